"""Prompt rendering for SGLang's native `/generate`, with the target tokenizer's own chat template.

The native API applies no template, so the client renders the conversation exactly as the target was
trained to see it (the one renderer, `core.chat_render`: tools, tool calls and the reasoning mode's template
switch included, generation prompt appended) and sends the text or the token ids. The tokenizer is loaded once
per run from a local path or Hub id (`--tokenizer`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from core.chat_render import Reasoning, ToolRendering, encode_text, render_text
from core.tool_calls import Tool
from inference.errors import InferenceError

logger = logging.getLogger(__name__)


class TemplateError(InferenceError, ValueError):
    """The tokenizer cannot be loaded or has no chat template; the message says which."""


class ChatRenderer:
    """Renders a conversation into the target's prompt text or ids."""

    def __init__(self, tokenizer: Any, *, chat_template: str | None = None) -> None:
        if chat_template is None and not getattr(tokenizer, "chat_template", None):
            raise TemplateError("the tokenizer has no chat template; pass one (manifest target.chat_template)")
        self.tokenizer = tokenizer
        self.chat_template = chat_template

    @classmethod
    def load(cls, name_or_path: str | Path, *, chat_template: str | None = None) -> ChatRenderer:
        """Return a renderer for the tokenizer at `name_or_path` (local folder or Hub id in the cache)."""
        from transformers import AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(str(name_or_path))
        except (OSError, ValueError) as exc:
            raise TemplateError(f"cannot load tokenizer {name_or_path}: {exc}") from None
        return cls(tokenizer, chat_template=chat_template)

    def render(self, history: list[dict[str, Any]], *, tools: list[Tool] | None = None,
               reasoning: Reasoning = Reasoning.KEEP, tool_rendering: ToolRendering = ToolRendering.NATIVE) -> str:
        """Return the prompt text for `history` (offering `tools`) with the generation prompt appended."""
        return render_text(self.tokenizer, history, tools=tools, reasoning=reasoning, tool_rendering=tool_rendering,
                           chat_template=self.chat_template, add_generation_prompt=True)

    def render_ids(self, history: list[dict[str, Any]], **kwargs: Any) -> list[int]:
        """Return the prompt token ids (the rendered text already holds the special tokens, so none are added);
        keywords as `render`'s."""
        return encode_text(self.tokenizer, self.render(history, **kwargs))
