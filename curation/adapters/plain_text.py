"""Adapters for data that is not chat JSON: Human/Assistant transcripts, instructions without answers, line pairs.

- `hh_transcript`: Anthropic HH-RLHF `{chosen, rejected}`, each a whole transcript
  `"\n\nHuman: …\n\nAssistant: …"`; the `chosen` one becomes the conversation. A transcript ending in an empty
  Assistant turn keeps its prompt without that turn (an answer to regenerate); turns out of order (two Assistant
  turns in a row, as a few recorded transcripts have) are left for the role check to drop.
- `instruction_only`: `{instruction, input?}` with no answer column (InstructionWild, OctoPack's `rawin`): one
  user turn, the answer to be regenerated.
- `paired_lines`: a line of a source file and the same line of its target file (`curation.loading`'s paired
  line reader): NL2Bash's description and command, CodeXGLUE's Java and C# method. When both files' suffixes
  name programming languages, the prompt asks for the translation; otherwise the source line is the prompt.
"""

from __future__ import annotations

import re

from core.json_types import JSONObject
from curation.conversation import Drop, Message, message

_SPEAKER = re.compile(r"\n\n(Human|Assistant):")
_ROLE = {"Human": "user", "Assistant": "assistant"}
# File suffix -> the language's name, for a translation pair's prompt.
LANGUAGES = {"java": "Java", "cs": "C#", "py": "Python", "js": "JavaScript", "ts": "TypeScript", "c": "C",
             "cpp": "C++", "go": "Go", "rb": "Ruby", "php": "PHP", "rs": "Rust", "kt": "Kotlin", "swift": "Swift",
             "scala": "Scala", "sql": "SQL"}


def hh_transcript(record: JSONObject) -> list[Message] | Drop:
    """HH-RLHF `{chosen, rejected}` transcripts: the chosen one, split at its `Human:` / `Assistant:` markers."""
    text = record.get("chosen")
    if not isinstance(text, str) or not text.strip():
        return Drop("missing_field", "transcript row needs a chosen transcript")
    pieces = _SPEAKER.split("\n\n" + text.lstrip("\n"))
    if pieces[0].strip() or len(pieces) < 3:
        return Drop("missing_field", "transcript does not open with a Human: or Assistant: turn")
    messages = [message(_ROLE[speaker], body.strip()) for speaker, body in zip(pieces[1::2], pieces[2::2],
                                                                               strict=True)]
    if len(messages) > 1 and messages[-1]["role"] == "assistant" and not messages[-1]["content"]:
        messages.pop()  # the transcript stops where the answer would begin
    return messages


def instruction_only(record: JSONObject) -> list[Message] | Drop:
    """`{instruction, input?}` without an answer: one user turn (the input after a blank line, as for Alpaca)."""
    instruction = record.get("instruction")
    if not isinstance(instruction, str):
        return Drop("missing_field", "instruction row needs an instruction")
    extra = record.get("input") or ""
    prompt = f"{instruction}\n\n{extra}" if isinstance(extra, str) and extra.strip() else instruction
    return [message("user", prompt)]


def _language(file_name: object) -> str | None:
    if not isinstance(file_name, str) or "." not in file_name:
        return None
    return LANGUAGES.get(file_name.rsplit(".", 1)[1].lower())


def paired_lines(record: JSONObject) -> list[Message] | Drop:
    """`{source_line, target_line, source_file, target_file}`: the source line asks, the target line answers."""
    source, target = record.get("source_line"), record.get("target_line")
    if not isinstance(source, str) or not isinstance(target, str):
        return Drop("missing_field", "line pair needs a source and a target line")
    origin, goal = _language(record.get("source_file")), _language(record.get("target_file"))
    prompt = f"Translate this {origin} code to {goal}:\n\n{source}" if origin and goal and origin != goal else source
    return [message("user", prompt), message("assistant", target)]
