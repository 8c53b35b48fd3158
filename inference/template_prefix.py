"""The target's own user-turn opening, cut from its chat template: what a Magpie-style prompt writer continues.

A conversation of one user message holding a sentinel is rendered with the tokenizer's chat template (no
generation prompt); the text before the sentinel is the prefix up to and including the user-turn opening
(BOS, any default system turn, the role marker), and the first token of text after it is the end-of-turn
marker the model writes when its user message is done (`<|im_end|>`, `<|eot_id|>`, `<end_of_turn>`, …). A
template that does not render the message verbatim, renders it twice, raises, or closes the turn with
nothing is refused with a TemplateError saying which.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inference.chat_template import TemplateError

SENTINEL = "DataHuntSentinel7f3a9c"  # mixed case: a template that changes case is caught


@dataclass(frozen=True)
class TurnPrefix:
    """The text that opens a user turn (`prefix`) and the marker that ends one (`end_marker`)."""

    prefix: str
    end_marker: str


def user_turn_prefix(tokenizer: Any, chat_template: str | None = None) -> TurnPrefix:
    """Return the user-turn prefix and end marker of the tokenizer's chat template (or `chat_template`)."""
    if chat_template is None and not getattr(tokenizer, "chat_template", None):
        raise TemplateError("the tokenizer has no chat template; pass one (--chat-template) to cut a user-turn prefix")
    try:
        text = str(tokenizer.apply_chat_template([{"role": "user", "content": SENTINEL}], chat_template=chat_template,
                                                 add_generation_prompt=False, tokenize=False))
    except Exception as exc:  # jinja2 and the template's own raise_exception give many types
        raise TemplateError(f"the chat template cannot render one user message: {type(exc).__name__}: {exc}") from None
    count = text.count(SENTINEL)
    if count != 1:
        raise TemplateError("the chat template does not render a user message verbatim "
                            f"(found it {count} times): cannot cut the user-turn prefix")
    prefix, after = text.split(SENTINEL)
    pieces = after.split()
    if not prefix.strip() or not pieces:
        raise TemplateError("the chat template marks no user-turn opening or end; cannot write prompts with it")
    return TurnPrefix(prefix=prefix, end_marker=pieces[0])
