"""Training rows: read regenerated (or curated) JSONL, render with the target's chat template, mask the loss.

Rows are ShareGPT-style `{"id", "conversations": [{"role", "content"}, ...]}` from the regeneration stage, or
curated rows whose turns sit under `messages` / `original_messages` (the dataset's own answers, for a
non-regenerated control run). A turn may call tools (`tool_calls`) or answer a call (`tool` turns), and a row
may offer `tools`; a regenerated row records how it was made (`meta.reasoning`, `meta.tool_rendering`). Every
row is rendered by the one renderer (`core.chat_render`), with its tools, the run's reasoning mode and tool
rendering, so the ids trained on are the ids the serving engine builds for the same messages. Only assistant
tokens are supervised: each assistant turn's span is found by rendering the conversation up to the turn with
the generation prompt and up to the end of the turn, so the span covers the answer, its tool-call tokens and
the template's end-of-turn marker, and never a tool result or the template's own headers. `check_template`
prints the supervised spans and compares our ids with `tokenizer.apply_chat_template`, so a template mismatch
is seen, not guessed.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.chat_render import (
    Reasoning,
    ToolRendering,
    has_tool_turns,
    native_turns,
    render_text,
    template_kwargs,
    tool_support,
)
from core.completion import ArtifactError
from core.curated_set import SAMPLES_FILE, STATE_FILE, curated_files, curated_folder_of, read_curated
from core.jsonl import JsonlError, iter_jsonl
from core.regenerated_set import JOURNAL_FILE, is_run_folder, read_regenerated, regenerated_file
from core.samples import ROLES, read_message
from core.tool_calls import Tool, ToolFormatError, read_tools
from training.atomic_files import write_file
from training.errors import TrainingError


class DataError(TrainingError, ValueError):
    """A training file or row that cannot be used, with the line number where known."""


@dataclass
class TokenizedRow:
    """One rendered conversation: token ids and the loss mask (1 on assistant tokens)."""

    id: str
    input_ids: list[int]
    loss_mask: list[int]


class Conversation(tuple[str, list[dict[str, Any]]]):
    """One training row: the pair (id, turns), as earlier readers took it, with how it renders attached: the
    tools it offers, and the reasoning mode and tool rendering its regeneration recorded (None: not recorded)."""

    tools: list[Tool] | None
    reasoning: Reasoning | None
    tool_rendering: ToolRendering | None

    def __new__(cls, row_id: str, turns: list[dict[str, Any]], tools: list[Tool] | None = None,
                reasoning: Reasoning | None = None, tool_rendering: ToolRendering | None = None) -> Conversation:
        self = super().__new__(cls, (row_id, turns))
        self.tools, self.reasoning, self.tool_rendering = tools, reasoning, tool_rendering
        return self


@dataclass(frozen=True)
class Rendering:
    """How a run renders every row: the reasoning mode and the tool rendering (recorded with the run)."""

    reasoning: Reasoning = Reasoning.KEEP
    tool_rendering: ToolRendering = ToolRendering.NATIVE

    def as_json(self) -> dict[str, str]:
        """The record written beside the run and into the draft's config (`datahunt.rendering`)."""
        return {"reasoning": self.reasoning.value, "tool_rendering": self.tool_rendering.value}


DEFAULT_RENDERING = Rendering()  # the template's defaults, tool calls native: rows that record nothing


RENDERING_FILE = "rendering.json"


def record_rendering(folder: Path, rendering: Rendering) -> None:
    """Write the run's rendering beside it (`rendering.json`), where its exports take it from."""
    folder.mkdir(parents=True, exist_ok=True)
    write_file(folder / RENDERING_FILE, (json.dumps(rendering.as_json(), indent=1) + "\n").encode("utf-8"))


def recorded_rendering(record: object) -> Rendering | None:
    """Return the rendering a record holds (`rendering.json`'s object, or a draft config's
    `datahunt.rendering`), None when there is none."""
    if not isinstance(record, dict):
        return None
    try:
        return Rendering(Reasoning(record.get("reasoning", "keep")),
                         ToolRendering(record.get("tool_rendering", "native")))
    except ValueError:
        raise DataError(f"unreadable rendering record {record}") from None


def run_folder_rendering(folder: Path) -> Rendering | None:
    """Return the rendering a run folder recorded (`rendering.json`), None when it has none."""
    path = folder / RENDERING_FILE
    if not path.is_file():
        return None
    try:
        return recorded_rendering(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: unreadable ({exc})") from None


def _turns(raw: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(raw, list) or not raw:
        raise DataError(f"{where}: expected a non-empty list of turns")
    turns = []
    for index, turn in enumerate(raw):
        if not isinstance(turn, dict):
            raise DataError(f"{where}: a turn is not an object")
        try:
            message = dict(read_message(turn, index))  # `{role, content}` or ShareGPT's `{from, value}`, tools kept
        except ToolFormatError as exc:
            raise DataError(f"{where}: {exc.detail}") from None
        role, content = message["role"], message["content"]
        if role not in ROLES or (not content and role != "tool" and not message.get("tool_calls")):
            raise DataError(f"{where}: turn with role {role!r} needs a non-empty string content")
        turns.append(message)
    return turns


# What a folder given as the data holds, in the order looked for: a regen run's answers, a curated set's rows.
FOLDER_FILES = (JOURNAL_FILE, SAMPLES_FILE)


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


def _recorded(meta: object, key: str, kind: type[Reasoning] | type[ToolRendering], where: str) -> Any:
    value = meta.get(key) if isinstance(meta, dict) else None
    try:
        return None if value is None else kind(value)
    except ValueError:
        raise DataError(f"{where}: meta.{key} {value!r} is not one of {[m.value for m in kind]}") from None


def load_conversations(path: Path, field: str = "conversations") -> list[Conversation]:
    """Read the rows of a JSONL file, using `field` ('conversations', 'messages', 'original_messages'): each
    an (id, turns) pair with its tools and recorded rendering (`Conversation`).

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
        where = f"{path}:{n}"
        turns = _turns(raw, where)
        if not any(t["role"] == "assistant" for t in turns):
            raise DataError(f"{where}: no assistant turn to learn from")
        try:
            tools = read_tools(row.get("tools"))
        except ToolFormatError as exc:
            raise DataError(f"{where}: {exc.detail}") from None
        meta = row.get("meta")
        rows.append(Conversation(str(row.get("id", n)), turns, tools, _recorded(meta, "reasoning", Reasoning, where),
                                 _recorded(meta, "tool_rendering", ToolRendering, where)))
    if not rows:
        raise DataError(f"{path}: no rows")
    return rows


def run_rendering(rows: Sequence[Conversation], reasoning: Reasoning | None = None,
                  tool_rendering: ToolRendering | None = None) -> Rendering:
    """Return the one rendering a run gives every row: the run's own choice where given, else what the rows
    recorded (keep / native where they recorded nothing). A draft serves one way, so rows recorded two ways,
    or a choice the rows contradict, raise DataError naming the counts."""
    chosen: list[Any] = []
    for key, given, default in (("reasoning", reasoning, Reasoning.KEEP),
                                ("tool_rendering", tool_rendering, ToolRendering.NATIVE)):
        seen = Counter(getattr(r, key) for r in rows if getattr(r, key) is not None)
        if given is not None and seen and set(seen) != {given}:
            raise DataError(f"the run renders {key} {given.value} but rows were regenerated with "
                            f"{', '.join(f'{k.value} ({n} rows)' for k, n in seen.items())}: render them as they "
                            "were made (leave the option out) or regenerate them")
        if given is None and len(seen) > 1:
            raise DataError(f"rows were regenerated with several {key} settings "
                            f"({', '.join(f'{k.value}: {n}' for k, n in seen.items())}): a draft serves one; train "
                            "on one kind at a time")
        chosen.append(given if given is not None else next(iter(seen), default))
    return Rendering(*chosen)


def check_tool_support(tokenizer: Any, rows: Sequence[Conversation], rendering: Rendering) -> None:
    """Raise DataError, in one line with the two ways on, when rows use tools and the run renders them natively
    through a template that cannot."""
    if rendering.tool_rendering is not ToolRendering.NATIVE:
        return
    using = sum(1 for r in rows if has_tool_turns(r[1], r.tools))
    problem = tool_support(tokenizer) if using else None
    if problem is not None:
        raise DataError(f"the target's chat template does not render tool use ({problem}) and {using} rows use "
                        "tools: give the target a template that does (datahunt target prepare SOURCE --out DIR "
                        "--chat-template FILE) or render tool calls as datahunt's text (--tool-rendering text)")


def _as_conversation(row: tuple[str, list[dict[str, Any]]]) -> Conversation:
    return row if isinstance(row, Conversation) else Conversation(row[0], list(row[1]))


def _render(tokenizer: Any, turns: Sequence[dict[str, Any]], spec: tuple[list[Tool] | None, Rendering],
            generation_prompt: bool = False) -> str:
    tools, rendering = spec
    return render_text(tokenizer, turns, tools=tools, reasoning=rendering.reasoning,
                       tool_rendering=rendering.tool_rendering, add_generation_prompt=generation_prompt)


def assistant_spans(tokenizer: Any, turns: list[dict[str, Any]], tools: list[Tool] | None = None,
                    rendering: Rendering = DEFAULT_RENDERING) -> tuple[str, list[tuple[int, int]]]:
    """Render the conversation; return the text and the character spans of each assistant turn.

    Raises DataError when the template is not prefix-stable (a rendering of the first turns is not a prefix of
    the whole), since then no mask derived from it can be trusted.
    """
    spec = (tools, rendering)
    text = _render(tokenizer, turns, spec)
    spans = []
    for i, turn in enumerate(turns):
        if turn["role"] != "assistant":
            continue
        before = _render(tokenizer, turns[:i], spec, generation_prompt=True)
        upto = _render(tokenizer, turns[: i + 1], spec)
        if not text.startswith(before) or not text.startswith(upto) or len(upto) <= len(before):
            raise DataError(
                f"chat template is not prefix-stable at turn {i}: the supervised span of that answer cannot be "
                "located; check the template (e.g. one that rewrites earlier turns)"
            )
        spans.append((len(before), len(upto)))
    return text, spans


def tokenize_row(tokenizer: Any, row_id: str, turns: list[dict[str, Any]], max_length: int,
                 tools: list[Tool] | None = None, rendering: Rendering = DEFAULT_RENDERING) -> TokenizedRow:
    """Token ids of the rendered conversation and a mask of 1 on tokens starting inside an assistant span."""
    text, spans = assistant_spans(tokenizer, turns, tools, rendering)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = list(enc["input_ids"])[:max_length]
    mask = [int(any(a <= start < b for a, b in spans)) for start, _ in enc["offset_mapping"][:max_length]]
    return TokenizedRow(id=row_id, input_ids=ids, loss_mask=mask)


# Rows per batched call of a fast tokenizer: large enough to keep every core busy, small enough to bound memory.
ENCODE_BATCH = 4096


def tokenize_rows(tokenizer: Any, rows: Sequence[tuple[str, list[dict[str, Any]]]], max_length: int,
                  rendering: Rendering = DEFAULT_RENDERING) -> list[TokenizedRow]:
    """`tokenize_row` over many rows (pairs, or `Conversation`s, whose tools go with them), row for row equal to
    it, at a fraction of the cost; every row rendered with `rendering`.

    A fast tokenizer encodes each batch of rendered texts in one call (its Rust encoder spreads the batch over
    the cores), and the mask comes from each token's start offset by a binary search over the assistant spans
    (sorted and disjoint: each answer starts after the previous one ends). A slow tokenizer takes the row path.
    """
    import numpy as np

    convs = [_as_conversation(r) for r in rows]
    if not getattr(tokenizer, "is_fast", False):
        return [tokenize_row(tokenizer, c[0], c[1], max_length, c.tools, rendering) for c in convs]
    out = []
    for a in range(0, len(convs), ENCODE_BATCH):
        chunk = convs[a : a + ENCODE_BATCH]
        rendered = [assistant_spans(tokenizer, c[1], c.tools, rendering) for c in chunk]
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
    """What `check_template` found: the rendered text, supervised spans as text, whether ids agree, and the
    ids and loss mask themselves."""

    text: str
    supervised: list[str]
    ids_match: bool
    detail: str
    input_ids: list[int]
    loss_mask: list[int]
    rendering: Rendering


def check_template(tokenizer: Any, turns: list[dict[str, Any]], tools: list[Tool] | None = None,
                   rendering: Rendering = DEFAULT_RENDERING) -> TemplateCheck:
    """Render one sample both ways (ours, `apply_chat_template(tokenize=True)`) and list the supervised spans."""
    row = tokenize_row(tokenizer, "check", turns, 10**9, tools, rendering)
    if rendering.tool_rendering is ToolRendering.NATIVE:
        kwargs: dict[str, Any] = {**template_kwargs(rendering.reasoning), **({"tools": tools} if tools else {})}
        reference = tokenizer.apply_chat_template(native_turns(turns), tokenize=True, **kwargs)
    else:  # the text rendering has no transformers counterpart: our text, encoded by the template's call
        reference = tokenizer(_render(tokenizer, turns, (tools, rendering)), add_special_tokens=False)["input_ids"]
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
    first_difference = next(
        (i for i, (a, b) in enumerate(zip(row.input_ids, reference, strict=False)) if a != b),
        min(len(row.input_ids), len(reference)),
    )
    detail = "ids match apply_chat_template" if match else (
        f"ids differ from apply_chat_template: ours {len(row.input_ids)} tokens, template {len(reference)}; "
        f"first difference at token {first_difference}"
    )
    return TemplateCheck(text=_render(tokenizer, turns, (tools, rendering)), supervised=supervised, ids_match=match,
                         detail=detail, input_ids=row.input_ids, loss_mask=row.loss_mask, rendering=rendering)
