"""Regeneration input: curated samples read from Parquet or JSONL, each with a stable row id and its prompts.

A curated set (`curate --out`, or a file of one) is read through its one reader (`core.curated_set`), which
refuses a set whose completion marker is missing or disagrees with its files; a JSONL or Parquet file (or a
folder of them) of your own is read as it is, `{messages}` or ShareGPT `{conversations}` per row. A row's
id is its input `id`, else a content hash of its messages, so a resumed run recognises finished rows whatever
order they finished in. A regenerated conversation keeps the optional leading system message and every user
turn; the dataset's assistant turns are dropped (the target answers each user turn again). A row that uses
tools keeps its recorded calls and results (`core.samples.read_message` reads them) and its `tools`, for the
per-turn regeneration (`inference.turns`). Rows whose `needs_regeneration` is false are already target-native
and pass through unchanged.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from core.completion import ArtifactError
from core.curated_set import curated_files, curated_folder_of, read_curated
from core.jsonl import JsonlError, iter_jsonl
from core.samples import ROLES, CuratedSample, read_message
from core.tool_calls import Tool, ToolFormatError, read_tools
from inference.errors import InferenceError

logger = logging.getLogger(__name__)



class InputError(InferenceError, ValueError):
    """The input is missing, unreadable, or has duplicate ids; the message names the file and row."""


class PromptError(InferenceError, ValueError):
    """One row's messages cannot be regenerated (no user turn, unsupported role); recorded on the row."""


@dataclass(frozen=True)
class InputRow:
    """One curated sample as regeneration sees it."""

    id: str
    messages: list[dict[str, Any]]
    needs_regeneration: bool = True
    category: str | None = None
    source: Any = None
    extra: dict[str, Any] = field(default_factory=dict)
    sample: int = 0  # which of the prompt's answers this row asks for (0: the first; see expand_samples)
    prompt_id: str | None = None  # the input row's id when this is a further sample of it
    tools: list[Tool] | None = None  # the tools the row offers the target


SAMPLE_SEP = "#s"


def expand_samples(rows: list[InputRow], samples: int) -> list[InputRow]:
    """`samples` answers per prompt: each row to regenerate is followed by copies asking for answers 1..N-1.

    Sample 0 keeps the row's id, so a run made with one answer per prompt grows into N answers by running it
    again with --samples N (only the new samples are generated). Sample k has id `<id>#s<k>`. Target-native
    rows are not copied: they have one answer, their own.
    """
    if samples < 1:
        raise InputError(f"samples must be at least 1, not {samples}")
    if samples == 1:
        return rows
    out: list[InputRow] = []
    for row in rows:
        out.append(row)
        if row.needs_regeneration:
            out.extend(replace(row, id=f"{row.id}{SAMPLE_SEP}{k}", sample=k, prompt_id=row.id)
                       for k in range(1, samples))
    ids = [r.id for r in out]
    if len(ids) != len(set(ids)):
        clash = next(i for i in ids if ids.count(i) > 1)
        raise InputError(f"row id {clash!r} is both an input id and a sample id: rename it or use --samples 1")
    return out


def content_id(messages: list[dict[str, Any]]) -> str:
    """Return a stable id for a row without one: sha256 of the canonical JSON of its messages (24 hex; a turn's
    tool calls count where it has them)."""
    canon = json.dumps(
        [{"role": str(m.get("role")), "content": m.get("content"),
          **({"tool_calls": m["tool_calls"]} if m.get("tool_calls") else {})} for m in messages],
        ensure_ascii=False,
        sort_keys=True,
        separators=(",", ":"),
    )
    return "h" + hashlib.sha256(canon.encode("utf-8")).hexdigest()[:24]


def normalise_messages(messages: list[dict[str, object]]) -> list[dict[str, Any]]:
    """Return the messages as `{role, content}` turns read by the one turn reader (`core.samples.read_message`:
    ShareGPT's `from`/`value` and role aliases such as `human`→user, `gpt`→assistant) with text content, an
    assistant turn's `tool_calls` and a tool turn's `tool_call_id` kept. Raise ToolFormatError for a call
    that cannot be read."""
    return [dict(read_message(message, index)) for index, message in enumerate(messages)]


def user_turns(messages: list[dict[str, Any]]) -> tuple[str | None, list[str]]:
    """Return (system prompt or None, the user turns in order); raise PromptError when nothing can be asked."""
    system: str | None = None
    users: list[str] = []
    for index, message in enumerate(messages):
        role = message["role"]
        if role not in ROLES:
            raise PromptError(f"unsupported role {role!r} at message {index}; regeneration needs system/user/assistant")
        if role == "system":
            if users:
                raise PromptError(f"system message at position {index} after a user turn")
            system = message["content"] if system is None else system + "\n\n" + message["content"]
        elif role == "user":
            users.append(message["content"])
    if not users:
        raise PromptError("no user turn to answer")
    return system, users


def _row_from_dict(raw: dict[str, Any], where: str) -> InputRow:
    messages = raw.get("messages", raw.get("conversations"))
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise InputError(f"{where}: `messages` must be a list of {{role, content}} objects")
    try:
        messages, tools = normalise_messages(messages), read_tools(raw.get("tools"))
    except ToolFormatError as exc:
        raise InputError(f"{where}: {exc.detail}") from None
    row_id = raw.get("id")
    row_id = str(row_id) if row_id not in (None, "") else content_id(messages)
    known = {"id", "messages", "conversations", "needs_regeneration", "category", "source", "tools"}
    return InputRow(
        id=row_id,
        messages=messages,
        needs_regeneration=bool(raw.get("needs_regeneration", True)),
        category=raw.get("category"),
        source=raw.get("source"),
        extra={k: v for k, v in raw.items() if k not in known},
        tools=tools,
    )


def _iter_jsonl(path: Path) -> Iterator[InputRow]:
    try:
        for number, raw in iter_jsonl(path, objects=True):
            yield _row_from_dict(raw, f"{path}:{number}")
    except JsonlError as exc:
        raise InputError(str(exc)) from None


def _iter_parquet(path: Path) -> Iterator[InputRow]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several unrelated types for a bad file
        raise InputError(f"{path}: not a readable Parquet file ({exc})") from None
    for number, raw in enumerate(table.to_pylist()):
        yield _row_from_dict(raw, f"{path}[{number}]")


def _row_from_sample(sample: CuratedSample) -> InputRow:
    messages = [dict(read_message(m, i)) for i, m in enumerate(sample.messages)]
    return InputRow(id=sample.id, messages=messages, needs_regeneration=sample.needs_regeneration,
                    category=sample.category, source=sample.source.model_dump(),
                    tools=[dict(t) for t in sample.tools] if sample.tools else None)  # type: ignore[misc]


def _iter_curated(path: Path) -> Iterator[InputRow]:
    """The rows of a curated set (a folder, or a file of one) through its one reader, which refuses a set
    whose completion marker is missing or disagrees with its files."""
    try:
        for sample in read_curated(path):
            yield _row_from_sample(sample)
    except ArtifactError as exc:
        raise InputError(str(exc)) from None


def input_files(path: Path) -> list[Path]:
    """Return the sample files behind `path`: itself, a curated set's Parquet shards (its completion marker
    checked), or the JSONL / Parquet files of a folder of your own."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"input {path} does not exist")
    if curated_folder_of(path) is not None:
        try:
            return curated_files(path)
        except ArtifactError as exc:
            raise InputError(str(exc)) from None
    if path.is_file():
        return [path]
    for pattern in ("data/*.parquet", "*.parquet", "data/*.jsonl", "*.jsonl"):
        found = sorted(path.glob(pattern))
        if found:
            return found
    raise InputError(f"input folder {path} has no data/*.parquet, *.parquet or *.jsonl samples")


def iter_rows(path: Path) -> Iterator[InputRow]:
    """Yield every input row of `path` (a curated set, a file, or a folder of files) in file order."""
    if curated_folder_of(Path(path)) is not None:
        yield from _iter_curated(Path(path))
        return
    for file in input_files(path):
        if file.suffix == ".parquet":
            yield from _iter_parquet(file)
        elif file.suffix in (".jsonl", ".json"):
            yield from _iter_jsonl(file)
        else:
            raise InputError(f"{file}: unsupported input type (expected .parquet or .jsonl)")


def load_rows(path: Path) -> tuple[list[InputRow], int]:
    """Return (rows with unique ids, number of identical duplicates skipped); raise InputError on a clash.

    Two rows with the same id and the same messages are one prompt (kept once, counted); the same id
    with different messages is an error, since the output could not tell them apart.
    """
    seen: dict[str, InputRow] = {}
    duplicates = 0
    for row in iter_rows(path):
        first = seen.get(row.id)
        if first is None:
            seen[row.id] = row
        elif first.messages == row.messages:
            duplicates += 1
        else:
            raise InputError(f"id {row.id!r} appears twice with different messages in {path}")
    if duplicates:
        logger.warning("%d duplicate input rows (same id and messages) skipped", duplicates)
    return list(seen.values()), duplicates


def stratified(rows: list[InputRow], n: int) -> list[InputRow]:
    """Return n rows spread over the categories: one per category in turn (categories in order of first
    appearance, rows in input order), so a trial run of a curated set, which lists rows category by category,
    sees every category instead of the first one's rows. The rows keep their input order."""
    by_category: dict[str | None, list[int]] = {}
    for index, row in enumerate(rows):
        by_category.setdefault(row.category, []).append(index)
    queues = [iter(indices) for indices in by_category.values()]
    chosen: list[int] = []
    while queues and len(chosen) < n:
        for queue in list(queues):
            found = next(queue, None)
            if found is None:
                queues.remove(queue)
            elif len(chosen) < n:
                chosen.append(found)
    return [rows[i] for i in sorted(chosen)]
