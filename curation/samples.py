"""The split into target-native and needs-regeneration rows, and the curated-sample record written for each.

A row from a source whose answers the target model wrote (`Source.target_native`) keeps its assistant
turns and, with a real tokenizer, gets `input_ids` and `loss_mask` from the target's chat template. Every
other row becomes a prompt for regeneration: `messages` keeps the system and user turns, and for a row that
uses tools also the recorded calls (each assistant turn that calls tools, its text left out) and the tool
results answering them, which regeneration splices in while the target calls the same tools (`prompt_turns`);
the dataset's own conversation stays under `original_messages` for a non-regenerated control run. The row's
`tools` schema is kept as it came. The record is the core
contract `core.samples.CuratedSample`, validated as it is built, so a row that breaks the contract fails here,
at the stage door, and not in the stage that reads it.
"""

from __future__ import annotations

from core.samples import CuratedSample, Message, SampleSource
from curation.conversation import Row, turn_text
from curation.manifest import Source
from curation.textkeys import content_hash
from curation.tokens import TokenCounter


def build_sample(row: Row, source: Source, sample_id: str, counter: TokenCounter) -> CuratedSample:
    """Return the curated sample of a row (DESIGN.md's contract plus original turns and token ids)."""
    original = row.messages
    native = source.target_native
    messages = original if native else prompt_turns(original)
    encoded = counter.encode(original, row.tools) if native else None
    full_tokens = int(row.extra.get("token_count") or counter.count_messages(original))
    return CuratedSample(
        id=sample_id,
        category=row.category,
        messages=messages,
        needs_regeneration=not native,
        target_native=native,
        source=SampleSource(dataset=source.hub_id, config=source.config, split=source.split,
                            revision=source.revision, row=row.row_index),
        content_hash=content_hash("\n".join(f"{m['role']}: {turn_text(m)}" for m in original)),
        token_count=full_tokens if native else _prompt_tokens(row, messages, counter),
        original_messages=original,
        original_token_count=full_tokens,
        input_ids=encoded[0] if encoded else None,
        loss_mask=encoded[1] if encoded else None,
        tools=row.tools,
    )


def prompt_turns(messages: list[Message]) -> list[Message]:
    """Return what regeneration asks the target: every turn but the answers, where an assistant turn that calls
    tools stays as its calls alone (the recording the target's own calls are checked against)."""
    out: list[Message] = []
    for turn in messages:
        if turn["role"] != "assistant":
            out.append(turn)
        elif turn.get("tool_calls"):
            out.append({"role": "assistant", "content": "", "tool_calls": turn["tool_calls"]})
    return out


def _prompt_tokens(row: Row, messages: list[Message], counter: TokenCounter) -> int:
    cached = row.extra.get("prompt_tokens")
    return int(cached) if cached is not None else counter.count_messages(messages)
