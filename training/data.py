"""Training rows: read regenerated (or curated) JSONL, render with the target's chat template, mask the loss.

Rows are ShareGPT-style `{"id", "conversations": [{"role", "content"}, ...]}` from the regeneration stage, or
curated rows whose turns sit under `messages` / `original_messages` (the dataset's own answers, for a
non-regenerated control run). Only assistant tokens are supervised: each assistant turn's span is found by
rendering the conversation up to the turn with the generation prompt and up to the end of the turn, so the
span covers the answer and the template's end-of-turn marker. `check_template` prints the supervised spans and
compares our ids with `tokenizer.apply_chat_template`, so a template mismatch is seen, not guessed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.completion import ArtifactError
from core.curated_set import STATE_FILE, curated_files, curated_folder_of, read_curated
from core.jsonl import JsonlError, iter_jsonl
from core.regenerated_set import is_run_folder, read_regenerated, regenerated_file
from core.samples import ROLES, read_turn
from training.errors import TrainingError


class DataError(TrainingError, ValueError):
    """A training file or row that cannot be used, with the line number where known."""


@dataclass
class TokenizedRow:
    """One rendered conversation: token ids and the loss mask (1 on assistant tokens)."""

    id: str
    input_ids: list[int]
    loss_mask: list[int]


def _turns(raw: Any, where: str) -> list[dict[str, str]]:
    if not isinstance(raw, list) or not raw:
        raise DataError(f"{where}: expected a non-empty list of turns")
    turns = []
    for turn in raw:
        if not isinstance(turn, dict):
            raise DataError(f"{where}: a turn is not an object")
        role, content = read_turn(turn)  # `{role, content}` or ShareGPT's `{from, value}`, aliases mapped
        if role not in ROLES or not isinstance(content, str) or not content:
            raise DataError(f"{where}: turn with role {role!r} needs a non-empty string content")
        turns.append({"role": role, "content": content})
    return turns


# What a folder given as the data holds, in the order looked for: a regen run's answers, a curated set's rows.
FOLDER_FILES = ("regenerated.jsonl", "samples.jsonl")


def training_file(path: Path) -> Path:
    """Return the file whose bytes decide the rows `path` names: itself, a regen run's journal, or for a curated
    set its marker (`state.json`, which stamps every file of the set); a run or set (or a file of one) is checked
    against its completion marker first (`core.regenerated_set`, `core.curated_set`). Raises DataError saying
    what is missing, or that the run or set is unfinished."""
    try:
        if (folder := curated_folder_of(path)) is not None:
            files = curated_files(path)
            return files[0] if path.is_file() else folder / STATE_FILE
        if path.is_dir() and not (path / FOLDER_FILES[0]).is_file():
            raise DataError(f"training data {path} is a folder with no {' or '.join(FOLDER_FILES)}: pass a regen "
                            "run folder or the JSONL file itself")
        return regenerated_file(path)
    except ArtifactError as exc:
        raise DataError(str(exc)) from None


def _numbered_rows(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line or row number, row) of every row `path` names: a finished regen run's or curated set's rows through
    their one reader (validated), any other JSONL file as it is."""
    try:
        if curated_folder_of(path) is not None:
            return [(n, s.model_dump()) for n, s in enumerate(read_curated(path), start=1)]
        file = training_file(path)
        if file.name == FOLDER_FILES[0] and is_run_folder(file.parent):
            return [(n, s.model_dump()) for n, s in enumerate(read_regenerated(file), start=1)]
        return list(iter_jsonl(file, objects=True))
    except (ArtifactError, JsonlError) as exc:
        raise DataError(str(exc)) from None


def load_conversations(path: Path, field: str = "conversations") -> list[tuple[str, list[dict[str, str]]]]:
    """Read (id, turns) from a JSONL file, using `field` ('conversations', 'messages', 'original_messages').

    For the default field, rows holding `messages` instead are accepted too. Raises DataError on a bad row.
    """
    numbered = _numbered_rows(path)
    rows = []
    for n, row in numbered:
        raw = row.get(field)
        if raw is None and field == "conversations":
            raw = row.get("messages")
        if raw is None:
            raise DataError(f"{path}:{n}: row has no {field!r} field")
        turns = _turns(raw, f"{path}:{n}")
        if not any(t["role"] == "assistant" for t in turns):
            raise DataError(f"{path}:{n}: no assistant turn to learn from")
        rows.append((str(row.get("id", n)), turns))
    if not rows:
        raise DataError(f"{path}: no rows")
    return rows


def _render(tokenizer: Any, turns: list[dict[str, str]], generation_prompt: bool = False) -> str:
    return str(tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=generation_prompt))


def assistant_spans(tokenizer: Any, turns: list[dict[str, str]]) -> tuple[str, list[tuple[int, int]]]:
    """Render the conversation; return the text and the character spans of each assistant turn.

    Raises DataError when the template is not prefix-stable (a rendering of the first turns is not a prefix of
    the whole), since then no mask derived from it can be trusted.
    """
    text = _render(tokenizer, turns)
    spans = []
    for i, turn in enumerate(turns):
        if turn["role"] != "assistant":
            continue
        before = _render(tokenizer, turns[:i], generation_prompt=True)
        upto = _render(tokenizer, turns[: i + 1])
        if not text.startswith(before) or not text.startswith(upto) or len(upto) <= len(before):
            raise DataError(
                f"chat template is not prefix-stable at turn {i}: the supervised span of that answer cannot be "
                "located; check the template (e.g. one that rewrites earlier turns)"
            )
        spans.append((len(before), len(upto)))
    return text, spans


def tokenize_row(tokenizer: Any, row_id: str, turns: list[dict[str, str]], max_length: int) -> TokenizedRow:
    """Token ids of the rendered conversation and a mask of 1 on tokens starting inside an assistant span."""
    text, spans = assistant_spans(tokenizer, turns)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = list(enc["input_ids"])[:max_length]
    mask = [int(any(a <= start < b for a, b in spans)) for start, _ in enc["offset_mapping"][:max_length]]
    return TokenizedRow(id=row_id, input_ids=ids, loss_mask=mask)


# Rows per batched call of a fast tokenizer: large enough to keep every core busy, small enough to bound memory.
ENCODE_BATCH = 4096


def tokenize_rows(tokenizer: Any, rows: list[tuple[str, list[dict[str, str]]]], max_length: int
                  ) -> list[TokenizedRow]:
    """`tokenize_row` over many rows, row for row equal to it, at a fraction of the cost.

    A fast tokenizer encodes each batch of rendered texts in one call (its Rust encoder spreads the batch over
    the cores), and the mask comes from each token's start offset by a binary search over the assistant spans
    (sorted and disjoint: each answer starts after the previous one ends). A slow tokenizer takes the row path.
    """
    import numpy as np

    if not getattr(tokenizer, "is_fast", False):
        return [tokenize_row(tokenizer, rid, turns, max_length) for rid, turns in rows]
    out = []
    for a in range(0, len(rows), ENCODE_BATCH):
        chunk = rows[a : a + ENCODE_BATCH]
        rendered = [assistant_spans(tokenizer, turns) for _, turns in chunk]
        enc = tokenizer([text for text, _ in rendered], add_special_tokens=False, return_offsets_mapping=True)
        for (rid, _), (_, spans), ids, offsets in zip(chunk, rendered, enc["input_ids"], enc["offset_mapping"],
                                                       strict=True):
            starts = np.asarray(offsets[:max_length], dtype=np.int64).reshape(-1, 2)[:, 0]
            lo = np.array([s for s, _ in spans], dtype=np.int64)
            hi = np.array([e for _, e in spans], dtype=np.int64)
            which = np.searchsorted(lo, starts, side="right") - 1  # the last span starting at or before each token
            inside = (which >= 0) & (starts < hi[np.clip(which, 0, None)]) if len(spans) else np.zeros_like(starts)
            out.append(TokenizedRow(id=rid, input_ids=list(ids[:max_length]), loss_mask=inside.astype(int).tolist()))
    return out


@dataclass
class TemplateCheck:
    """What `check_template` found: the rendered text, supervised spans as text, and whether ids agree."""

    text: str
    supervised: list[str]
    ids_match: bool
    detail: str


def check_template(tokenizer: Any, turns: list[dict[str, str]]) -> TemplateCheck:
    """Render one sample both ways (ours, `apply_chat_template(tokenize=True)`) and list the supervised spans."""
    row = tokenize_row(tokenizer, "check", turns, max_length=10**9)
    reference = tokenizer.apply_chat_template(turns, tokenize=True)
    if isinstance(reference, dict) or hasattr(reference, "keys"):
        reference = reference["input_ids"]
    reference = list(reference)
    spans, current = [], []
    for tok, m in zip(row.input_ids, row.loss_mask, strict=True):
        if m:
            current.append(tok)
        elif current:
            spans.append(current)
            current = []
    if current:
        spans.append(current)
    supervised = [tokenizer.decode(s) for s in spans]
    match = reference == row.input_ids
    detail = "ids match apply_chat_template" if match else (
        f"ids differ from apply_chat_template: ours {len(row.input_ids)} tokens, template {len(reference)}; "
        "first difference at token "
        f"{next((i for i, (a, b) in enumerate(zip(row.input_ids, reference, strict=False)) if a != b), min(len(row.input_ids), len(reference)))}"
    )
    return TemplateCheck(text=_render(tokenizer, turns), supervised=supervised, ids_match=match, detail=detail)
