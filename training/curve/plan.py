"""What a curve measures: its settings, its data, its scales, and the rows and training config of each point.

The data is the regenerated set (one row per answer; a prompt answered N times has rows `<id>`, `<id>#s1`, ...).
Its prompts are put in one seeded random order, and the answers in curve order: every prompt's first answer,
then every second answer, and so on, so that each scale's rows are a prefix of the next scale's (nested
subsets: a larger point holds every row of a smaller one) and each prefix is a random sample of the whole.

The control (`control`) trains, at each scale, a second draft on the same prompts' own answers (the curated
set's `original_messages`: what the datasets said, not what the target says), with the same steps rule: the gap
between the two arms is what regeneration buys at that size. With the control on, both arms use only the
prompts that have an original answer, so they compare the same prompts.

The steps rule, one for every point:
- `epochs`: every point trains E passes over its own rows, so the optimizer steps grow with the data (the
  scaling benchmark's rule: a larger set is both more data and more compute).
- `steps`: every point trains the same S optimizer steps, so a small set is repeated until S and the points
  differ in data only (fixed compute).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypedDict

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.completion import ArtifactError
from core.curated_set import curated_folder_of, read_curated
from core.json_types import JSONObject
from core.jsonl import JsonlError, iter_jsonl
from core.regenerated_set import read_run_record
from core.regenerated_set import regenerated_file as find_regenerated
from training.atomic_files import write_file
from training.config import TrainConfig, make_config
from training.data import load_conversations
from training.errors import TrainingError

SAMPLE_SEP = "#s"  # the regeneration stage's id of a prompt's further answers: <id>#s<k>
# Keys of the run config the curve sets itself, per point: not a user setting.
CURVE_OWNED = {"data", "target", "out", "epochs", "max_steps", "messages_field", "resume", "seed", "device", "cache",
               "mode"}


class CurveError(TrainingError, ValueError):
    """A curve that cannot be made as asked (scales out of range, missing data, no eval prompts, other settings
    in the output folder than before)."""


class CurveSettings(BaseModel):
    """Everything one curve needs; saved in curve.json, and a resumed curve must have the same."""

    model_config = ConfigDict(extra="forbid")

    data: Path = Field(description="The regenerated set: regenerated.jsonl, or the regeneration's run folder.")
    target: Path = Field(description="Folder of the target model (transformers layout) and its tokenizer.")
    out: Path = Field(description="Output folder: curve.json, curve.md, the plots, one run folder per point.")
    eval: Path = Field(description="Held-out prompts JSONL (text, prompt, or conversations/messages rows; the "
                       "optional `set` or `category` field groups them).")
    scales: list[float] = Field(min_length=1, description="Fractions of the rows (0 < s <= 1) or row counts.")
    control: bool = False
    originals: Path | None = Field(default=None, description="The curated set with `original_messages` (default: "
                                   "the input the regeneration's run.json names).")
    rule: Literal["epochs", "steps"] = "epochs"
    epochs: int = Field(default=1, ge=1)
    steps: int | None = Field(default=None, ge=1)
    seed: int = 0
    eval_per_set: int | None = Field(default=None, ge=1)
    k: int = Field(default=5, ge=1)
    max_new: int = Field(default=64, ge=1)
    eval_batch: int = Field(default=1, ge=1)
    target_al: float = Field(default=2.5, gt=1.0)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    train: dict[str, Any] = Field(default_factory=dict, description="Further run-config keys, the same at every "
                                  "point (lr, batch_size, batch_tokens, draft_vocab_size, ttt_steps, ...).")

    def rule_text(self) -> str:
        """The steps rule in words, as the outputs state it."""
        if self.rule == "steps":
            return (f"same optimizer steps at every point: {self.steps} steps each (smaller sets are repeated; "
                    "the points differ in data only)")
        return (f"same epochs at every point: {self.epochs} pass(es) over each point's rows (steps grow with the "
                "data)")

    def fingerprint(self) -> JSONObject:
        """The settings a resumed curve must share with the one it continues (the target AL may change: it only
        moves the forecast; the device and eval batch do not change what greedy decoding measures)."""
        return self.model_dump(mode="json", exclude={"target_al", "out", "device", "eval_batch"})


def make_settings(values: dict[str, Any]) -> CurveSettings:
    """Validate values into CurveSettings; CurveError naming the offending keys."""
    try:
        return CurveSettings.model_validate(values)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise CurveError(f"invalid curve settings: {problems}") from None


def check_settings(settings: CurveSettings) -> None:
    """Raise CurveError for settings that contradict each other."""
    if settings.rule == "steps" and settings.steps is None:
        raise CurveError("the steps rule needs --steps N (the optimizer steps every point trains)")
    if settings.rule == "epochs" and settings.steps is not None:
        raise CurveError("--steps goes with --rule steps; the epochs rule trains --epochs passes per point")
    owned = sorted(CURVE_OWNED & set(settings.train))
    if owned:
        raise CurveError(f"the curve sets {', '.join(owned)} itself for every point")
    if not settings.target.is_dir():
        raise CurveError(f"target folder {settings.target} does not exist")
    blocker = next((p for p in (settings.out, *settings.out.parents) if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise CurveError(f"--out {settings.out} cannot be a folder: {blocker} is a file")


# --- The data -------------------------------------------------------------------------------------------------
@dataclass
class CurveData:
    """The rows a curve draws from, in curve order."""

    answers: list[str]  # regenerated row ids: every prompt's first answer, then every second one, ...
    rows: dict[str, list[dict[str, str]]]  # regenerated row id -> its conversation
    prompts: list[str]  # prompt ids in the curve's random order
    originals: dict[str, list[dict[str, str]]]  # prompt id -> the dataset's own conversation (control only)
    left_out: int = 0  # prompts without an original answer, left out of both arms when the control is on


class PointRow(TypedDict):
    """One training row of a point, as the trainer reads it (`write_point_data`)."""

    id: str  # a regenerated row id, or (control) the prompt id
    conversations: list[dict[str, str]]


def prompt_of(row_id: str) -> str:
    """The prompt id of a regenerated row id (`<id>#s<k>` is the prompt `<id>`'s answer k)."""
    head, sep, tail = row_id.rpartition(SAMPLE_SEP)
    return head if sep and tail.isdigit() else row_id


def answer_order(prompts: list[str], answers: set[str] | list[str]) -> list[str]:
    """The answers in curve order: each prompt's first answer (its own id) in prompt order, then each prompt's
    answer 1 (`<id>#s1`), and so on while any prompt has one."""
    have = set(answers)
    ordered = [p for p in prompts if p in have]
    k = 1
    while more := [f"{p}{SAMPLE_SEP}{k}" for p in prompts if f"{p}{SAMPLE_SEP}{k}" in have]:
        ordered += more
        k += 1
    return ordered


def regenerated_file(data: Path) -> Path:
    """The regenerated JSONL behind `data` (the file itself, or a run folder's regenerated.jsonl), a run's
    checked against its completion marker (`core.regenerated_set`)."""
    try:
        return find_regenerated(data)
    except ArtifactError as exc:
        raise CurveError(str(exc)) from None


def load_curve_data(settings: CurveSettings) -> CurveData:
    """The regenerated rows (and, with the control, the datasets' own answers) in curve order."""
    path = regenerated_file(settings.data)
    rows = dict(load_conversations(path, "conversations"))
    prompts = list(dict.fromkeys(prompt_of(i) for i in rows))  # file order, then one seeded shuffle
    random.Random(settings.seed).shuffle(prompts)
    originals: dict[str, list[dict[str, str]]] = {}
    left_out = 0
    if settings.control:
        originals = load_originals(settings.originals or originals_named_by_run(path), set(prompts))
        kept = [p for p in prompts if p in originals]
        left_out = len(prompts) - len(kept)
        if not kept:
            raise CurveError("--control: no prompt of the regenerated set has an original answer in the curated set")
        prompts = kept
    return CurveData(answers=answer_order(prompts, set(rows)), rows=rows, prompts=prompts, originals=originals,
                     left_out=left_out)


def originals_named_by_run(regenerated: Path) -> Path:
    """The curated input the regeneration read, as its run.json names it."""
    record = read_run_record(regenerated.parent)
    named = record.input if record is not None else None
    if not named:
        raise CurveError(f"--control needs the datasets' own answers: pass --originals CURATED (no run.json beside "
                         f"{regenerated} names the curated input)")
    return Path(named)


def load_originals(path: Path, wanted: set[str]) -> dict[str, list[dict[str, str]]]:
    """Prompt id -> the dataset's own conversation (`original_messages` with an assistant turn) of a curated
    set: a JSONL or Parquet file, or a curated folder (data/*.parquet, samples.jsonl)."""
    out: dict[str, list[dict[str, str]]] = {}
    for raw in _curated_rows(path):
        turns = raw.get("original_messages")
        rid = str(raw.get("id", ""))
        if rid in wanted and isinstance(turns, list) and any(
                isinstance(t, dict) and t.get("role") == "assistant" and t.get("content") for t in turns):
            out[rid] = [{"role": str(t["role"]), "content": str(t["content"])} for t in turns
                        if isinstance(t, dict) and t.get("content")]
    return out


def _curated_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of the curated set `path`: a set (or a file of one) through its one reader, which checks its
    completion marker (`core.curated_set`); a JSONL or Parquet file of your own as it is."""
    try:
        if curated_folder_of(path) is not None:
            return [sample.model_dump() for sample in read_curated(path)]
    except ArtifactError as exc:
        raise CurveError(f"--control: {exc}") from None
    if not path.is_file():
        raise CurveError(f"--control: curated set {path} does not exist or holds no samples.jsonl / *.parquet")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            return list(pq.read_table(path, columns=None).to_pylist())
        except Exception as exc:  # pyarrow raises several unrelated types for a bad file
            raise CurveError(f"{path}: not a readable Parquet file ({exc})") from None
    try:
        return [row for _, row in iter_jsonl(path, objects=True)]
    except JsonlError as exc:
        raise CurveError(str(exc)) from None


# --- Scales and points ----------------------------------------------------------------------------------------
def resolve_scales(scales: list[float], available: int) -> list[int]:
    """Row counts of the scales, smallest first: a value in (0, 1] is a fraction of the `available` rows, a
    whole number above 1 a count."""
    counts = []
    for s in scales:
        if s <= 0:
            raise CurveError(f"scale {s:g} is not above 0: a scale is a fraction (0 < s <= 1) or a row count")
        if s <= 1:
            n = round(s * available)
            if n < 1:
                raise CurveError(f"scale {s:g} of {available} rows is no row at all")
        elif float(s).is_integer():
            n = int(s)
            if n > available:
                raise CurveError(f"scale {int(s)} asks for more rows than the {available} the data holds")
        else:
            raise CurveError(f"scale {s:g} is neither a fraction (0 < s <= 1) nor a whole row count")
        counts.append(n)
    if len(set(counts)) != len(counts):
        raise CurveError(f"scales {' '.join(f'{s:g}' for s in scales)} name the same row count twice: {counts}")
    return sorted(counts)


class PlannedPoint(BaseModel):
    """One draft to train: its arm and its row count."""

    model_config = ConfigDict(extra="forbid")

    name: str
    samples: int
    control: bool


def plan_points(sizes: list[int], data: CurveData, control: bool) -> tuple[list[PlannedPoint], list[str]]:
    """Each size's regenerated point, then its control, smallest first (a curve cut short leaves whole pairs);
    and the points that cannot be made, in words."""
    points, skipped = [], []
    for n in sizes:
        points.append(PlannedPoint(name=f"regen_{n}", samples=n, control=False))
        if control:
            if n <= len(data.prompts):
                points.append(PlannedPoint(name=f"control_{n}", samples=n, control=True))
            else:
                skipped.append(f"control at {n} rows: only {len(data.prompts)} prompts have their own answers "
                               "(the regenerated arm has several answers per prompt there)")
    return points, skipped


def point_rows(point: PlannedPoint, data: CurveData) -> list[PointRow]:
    """The training rows of a point: the first `samples` answers, or the same prompts' own answers."""
    if point.control:
        return [{"id": p, "conversations": data.originals[p]} for p in data.prompts[: point.samples]]
    return [{"id": i, "conversations": data.rows[i]} for i in data.answers[: point.samples]]


def distinct_prompts(rows: list[PointRow]) -> int:
    """How many prompts the rows answer (several answers of one prompt count once)."""
    return len({prompt_of(str(r["id"])) for r in rows})


def write_point_data(rows: list[PointRow], path: Path) -> Path:
    """Write a point's rows as the trainer reads them (written whole: a kill leaves the old file or the new)."""
    text = "".join(json.dumps({"id": r["id"], "conversations": r["conversations"]}, ensure_ascii=False) + "\n"
                   for r in rows)
    write_file(path, text.encode("utf-8"))
    return path


def point_config(settings: CurveSettings, data_file: Path, run_dir: Path) -> TrainConfig:
    """The one run config of every point, with its own data and folder and the steps rule applied."""
    values: dict[str, Any] = {**settings.train, "data": str(data_file), "target": str(settings.target),
                              "out": str(run_dir), "messages_field": "conversations", "seed": settings.seed,
                              "device": settings.device, "resume": True}
    if settings.rule == "steps":
        values["max_steps"] = settings.steps
    else:
        values["epochs"] = settings.epochs
    return make_config(values)
