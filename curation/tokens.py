"""Token counting: the target's tokenizer when it is available locally, else a fast documented estimate.

The estimate splits text into runs of up to six word characters and single punctuation marks
(`\\w{1,6}|[^\\w\\s]`), a rough stand-in for BPE counts (not calibrated against a real tokenizer here) that costs
one regex pass. With a real tokenizer, target-native rows also get `input_ids` and a `loss_mask` (1 on
assistant tokens) rendered with the tokenizer's chat template, turn by turn.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from core.chat_render import has_tool_turns, render_text, tool_support
from core.tool_calls import Tool
from curation.conversation import Message, turn_text

logger = logging.getLogger(__name__)

_PIECE = re.compile(r"\w{1,6}|[^\w\s]")
APPROXIMATE = "approx-regex"


def approximate_tokens(text: str) -> int:
    """Return the regex estimate of the number of tokens in `text`."""
    return len(_PIECE.findall(text))


class TokenCounter:
    """Counts tokens with a `transformers` tokenizer when given one, else with the regex estimate."""

    def __init__(self, tokenizer: Any | None = None, name: str = APPROXIMATE) -> None:
        self.tokenizer = tokenizer
        self.name = name

    def count(self, text: str) -> int:
        """Return the number of tokens in `text`."""
        if self.tokenizer is None:
            return approximate_tokens(text)
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def count_messages(self, messages: list[Message]) -> int:
        """Return the tokens of all turns' contents and tool calls (no template overhead)."""
        return sum(self.count(turn_text(m)) for m in messages)

    def encode(self, messages: list[Message], tools: list[Tool] | None = None) -> tuple[list[int], list[int]] | None:
        """Return (input_ids, loss_mask) rendered with the chat template (`core.chat_render`, tools included), or
        None without a real tokenizer, or for a row that uses tools when the template cannot render them."""
        if self.tokenizer is None or not getattr(self.tokenizer, "chat_template", None):
            return None
        if has_tool_turns(messages, tools) and tool_support(self.tokenizer) is not None:
            return None
        ids: list[int] = []
        mask: list[int] = []
        for end in range(1, len(messages) + 1):
            rendered = render_text(self.tokenizer, messages[:end], tools=tools)
            full = self.tokenizer(rendered, add_special_tokens=False)["input_ids"]
            new = full[len(ids) :]
            mask.extend([1 if messages[end - 1]["role"] == "assistant" else 0] * len(new))
            ids = list(full)
        return ids, mask


def load_counter(tokenizer_name: str | None, *, offline: bool) -> TokenCounter:
    """Return a counter for the named tokenizer (local folder, or the Hub when online), else the estimate."""
    if not tokenizer_name:
        return TokenCounter()
    local = Path(tokenizer_name).is_dir()
    if not local and offline:
        logger.warning(
            "tokenizer %s is not a local folder and datahunt is offline: estimating tokens", tokenizer_name
        )
        return TokenCounter()
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tokenizer_name, local_files_only=local or offline)
    except Exception as exc:  # any loading failure falls back to the documented estimate, logged
        logger.warning("could not load tokenizer %s (%s): estimating tokens", tokenizer_name, exc)
        return TokenCounter()
    return TokenCounter(tokenizer, name=str(tokenizer_name))
