"""Tool calls read out of an answer's text, where no server parser gave them structured.

Through the OpenAI path a server started with a tool-call parser (vLLM `--enable-auto-tool-choice
--tool-call-parser hermes`, SGLang `--tool-call-parser`) returns `message.tool_calls`, and those are kept as
they come. The native `/generate` path, the in-process backends, and a server without a parser return text:
this module reads the two styles templates teach their models, the way the engines' parsers of the same names
do. `hermes` (Hermes, Qwen, and datahunt's own text rendering): each call a JSON object `{"name",
"arguments"}` between `<tool_call>` and `</tool_call>` (an unclosed last block runs to the end), the text
before the first block the answer's content. `llama3_json` (Llama 3.1/3.2): the whole answer one JSON object
`{"name", "parameters"}` (or several joined by `;`), after an optional `<|python_tag|>`. Text that holds
neither is plain content; a block that does not parse leaves the whole answer as text, as the engines do.
"""

from __future__ import annotations

import json
import re

from core.tool_calls import ToolCall, ToolFormatError, read_call

HERMES_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
PYTHON_TAG = "<|python_tag|>"


def _hermes(text: str, first_id: str) -> tuple[str, list[ToolCall]] | None:
    if "<tool_call>" not in text:
        return None
    calls = [read_call(json.loads(block.strip()), f"{first_id}_{k}")
             for k, block in enumerate(HERMES_BLOCK.findall(text))]
    return text[: text.index("<tool_call>")].rstrip(), calls


def _llama_json(text: str, first_id: str) -> tuple[str, list[ToolCall]] | None:
    body = text.strip()
    body = body[len(PYTHON_TAG):].strip() if body.startswith(PYTHON_TAG) else body
    if not body.startswith("{"):
        return None
    calls = []
    for k, part in enumerate(p for p in body.split(";") if p.strip()):
        value = json.loads(part)
        if not isinstance(value, dict) or "name" not in value or not ({"parameters", "arguments"} & set(value)):
            return None
        calls.append(read_call(value, f"{first_id}_{k}"))
    return "", calls


def parse_tool_calls(text: str, first_id: str = "call") -> tuple[str, list[ToolCall]]:
    """Return (the answer's content, the calls its text makes), ids `<first_id>_<k>`; no calls when the text
    holds none or a block does not parse (then the content is the whole text)."""
    for style in (_hermes, _llama_json):
        try:
            found = style(text, first_id)
        except (json.JSONDecodeError, ToolFormatError):
            return text, []
        if found is not None:
            return found
    return text, []
