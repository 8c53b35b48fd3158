"""What a value run measures: its settings, the pool of labelled rows, and the rows of every point.

The pool is a regenerated set (`regenerated.jsonl`): each row carries, in `meta`, the curated row's `source`
(its dataset id) and `category`, which make its unit. The default mix at budget B and seed s is the first B
rows of one seeded shuffle of the pool (the pool is the curated default mix, so a uniform draw keeps its
shares). Each unit u gets an arm at the same budget and seed:

- `remove`: the default mix's rows of u are swapped for the next rows of the same shuffle that are not u's
  (the rest of the mix is unchanged), so the arm differs from the default in u's rows only;
- `add`: `add_rows` rows of u not in the default mix take the place of the default mix's last rows that are
  not u's.

With `mix_counts` (rows per category: the measured mix `datahunt value --mix measured` chose) the run measures
no unit: it trains the default mix and that mix at every seed, each category's rows the first of the seed's
shuffle, so the two are compared at the same budget.

Every draft trains the same rows count under one steps rule and the same run config, and is evaluated on the
same prompts, so two drafts of one seed differ in the swapped rows only.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.completion import ArtifactError
from core.measured_value import UnitKind, ValueOp
from core.regenerated_set import read_regenerated
from training.atomic_files import write_file
from training.config import TrainConfig, make_config
from training.curve.plan import CURVE_OWNED, CurveError, regenerated_file

UNKNOWN = "(unlabelled)"  # the unit of a row whose meta names no source / category: filler, never measured


class ValueRunError(CurveError):
    """A value run that cannot be made as asked (budget above the pool, an unknown unit, other settings in the
    output folder than before)."""


class ValueSettings(BaseModel):
    """Everything one value run needs; saved in value.json, and a resumed run must have the same."""

    model_config = ConfigDict(extra="forbid")

    data: Path = Field(description="The regenerated set (regenerated.jsonl or the regeneration's run folder).")
    target: Path = Field(description="Folder of the target model (transformers layout) and its tokenizer.")
    eval: Path = Field(description="Held-out prompts JSONL (`set` or `category` groups them).")
    user_prompts: Path | None = Field(default=None, description="A held-out slice of the user's own prompts "
                                      "(same row shapes), scored as the set `user`.")
    out: Path = Field(description="Output folder: value.json, value.md, one run folder per point.")
    budget: int = Field(gt=0, description="Training rows of every draft.")
    by: UnitKind = "source"
    units: list[str] = Field(default_factory=list, description="The units to measure (default: every labelled "
                             "unit of the default mix holding at least min_share of it).")
    min_share: float = Field(default=0.02, ge=0, le=1)
    op: ValueOp = "remove"
    add_rows: int | None = Field(default=None, gt=0, description="add: rows of the unit swapped in (default "
                                 "budget // 10).")
    seeds: list[int] = Field(default_factory=lambda: [0, 1], min_length=1, description="Seeds of the default "
                             "mix (two or more measure the noise).")
    arm_seeds: int = Field(default=1, ge=1, description="Each arm trains at the first N seeds.")
    rule: Literal["epochs", "steps"] = "epochs"
    epochs: int = Field(default=1, ge=1)
    steps: int | None = Field(default=None, ge=1)
    eval_per_set: int | None = Field(default=None, ge=1)
    k: int = Field(default=5, ge=1)
    max_new: int = Field(default=64, ge=1)
    eval_batch: int = Field(default=1, ge=1)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    train: dict[str, Any] = Field(default_factory=dict, description="Further run-config keys, the same for "
                                  "every draft (lr, batch_tokens, draft_vocab_size, ttt_steps, ...).")
    mix_counts: dict[str, int] = Field(default_factory=dict, description="Rows per category of a mix to compare "
                                       "with the default at every seed (by category; no unit is measured then).")

    def fingerprint(self) -> dict[str, Any]:
        """What a resumed run must share with the one it continues (the device and eval batch do not change
        what greedy decoding measures)."""
        return self.model_dump(mode="json", exclude={"out", "device", "eval_batch"})


def make_value_settings(values: dict[str, Any]) -> ValueSettings:
    """Validate values into ValueSettings; ValueRunError naming the offending keys, or contradicting settings."""
    try:
        settings = ValueSettings.model_validate(values)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ValueRunError(f"invalid value settings: {problems}") from None
    if settings.rule == "steps" and settings.steps is None:
        raise ValueRunError("the steps rule needs --steps N (the optimizer steps every draft trains)")
    if settings.rule == "epochs" and settings.steps is not None:
        raise ValueRunError("--steps goes with --rule steps; the epochs rule trains --epochs passes per draft")
    if settings.mix_counts and settings.by != "category":
        raise ValueRunError("a mix to compare (--mix measured) is counted per category: pass --by category")
    if settings.mix_counts and sum(settings.mix_counts.values()) > settings.budget:
        raise ValueRunError(f"the mix's {sum(settings.mix_counts.values()):,} rows are more than the budget "
                            f"{settings.budget:,}")
    if settings.arm_seeds > len(settings.seeds):
        raise ValueRunError(f"--arm-seeds {settings.arm_seeds} is more than the {len(settings.seeds)} seed(s) given")
    owned = sorted(CURVE_OWNED & set(settings.train))
    if owned:
        raise ValueRunError(f"the value run sets {', '.join(owned)} itself for every draft")
    return settings


# --- The pool ---------------------------------------------------------------------------------------------------
@dataclass
class Pool:
    """The rows a value run draws from: id -> conversation, id -> unit, ids in file order."""

    ids: list[str]
    rows: dict[str, list[dict[str, str]]]
    unit: dict[str, str]


def unit_of(meta: dict[str, Any], by: UnitKind) -> str:
    """The row's source (its dataset id) or category, from the regeneration's meta; UNKNOWN when absent."""
    if by == "category":
        return str(meta.get("category") or UNKNOWN)
    source = meta.get("source")
    if isinstance(source, dict):
        source = source.get("dataset")
    return str(source or UNKNOWN)


def load_pool(data: Path, by: UnitKind) -> Pool:
    """The regenerated rows with their units; ValueRunError on an unreadable file or row."""
    path = regenerated_file(data)
    ids: list[str] = []
    rows: dict[str, list[dict[str, str]]] = {}
    unit: dict[str, str] = {}
    try:  # the set's one reader: a run that did not finish is refused, every row validated
        for n, sample in enumerate(read_regenerated(path), start=1):
            if sample.id in rows:
                raise ValueRunError(f"{path}:{n}: row id {sample.id!r} appears twice")
            ids.append(sample.id)
            rows[sample.id] = [{"role": m["role"], "content": m["content"]} for m in sample.conversations]
            unit[sample.id] = unit_of(sample.meta, by)
    except (ArtifactError, OSError) as exc:
        raise ValueRunError(str(exc)) from None
    if not ids:
        raise ValueRunError(f"{path} holds no rows")
    return Pool(ids=ids, rows=rows, unit=unit)


def shuffled(pool: Pool, seed: int) -> list[str]:
    """The pool's ids in the seed's order (the default mix at budget B is its first B)."""
    order = list(pool.ids)
    random.Random(f"value:{seed}").shuffle(order)
    return order


# --- Points -----------------------------------------------------------------------------------------------------
class PlannedDraft(BaseModel):
    """One draft to train: the default mix (`unit` None) or a unit's arm, at one seed."""

    model_config = ConfigDict(extra="forbid")

    name: str
    unit: str | None
    seed: int
    rows_swapped: int = 0
    mix: bool = False  # the mix of `mix_counts`, not the default (unit is None for both)


def slug(unit: str) -> str:
    """A folder-safe name of a unit ('owner/name' -> 'owner--name')."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", unit.replace("/", "--")).strip("-") or "unit"


def default_units(pool: Pool, settings: ValueSettings) -> list[str]:
    """The units measured: the ones asked for (each must be in the pool), else every labelled unit holding at
    least min_share of the first seed's default mix."""
    present = set(pool.unit.values())
    if settings.mix_counts:
        return []
    if settings.units:
        missing = [u for u in settings.units if u not in present]
        if missing:
            known = ", ".join(sorted(present - {UNKNOWN})[:12])
            raise ValueRunError(f"unit(s) {', '.join(missing)} not in the pool (by {settings.by}; known: {known})")
        return list(dict.fromkeys(settings.units))
    base = shuffled(pool, settings.seeds[0])[: settings.budget]
    counts: dict[str, int] = {}
    for rid in base:
        counts[pool.unit[rid]] = counts.get(pool.unit[rid], 0) + 1
    return sorted(u for u, n in counts.items() if u != UNKNOWN and n >= settings.min_share * len(base))


def default_rows(pool: Pool, budget: int, seed: int) -> list[str]:
    """The default mix's rows at a budget and seed."""
    if budget > len(pool.ids):
        raise ValueRunError(f"budget {budget:,} is more than the {len(pool.ids):,} rows of the pool")
    return shuffled(pool, seed)[:budget]


def arm_rows(pool: Pool, budget: int, seed: int, unit: str, op: ValueOp, add_rows: int) -> tuple[list[str], int]:
    """(rows of the unit's arm, rows swapped): the default mix with the unit's rows swapped out (remove) or
    `add_rows` of them swapped in (add); ValueRunError when the pool cannot fill the swap."""
    order = shuffled(pool, seed)
    base, rest = order[:budget], order[budget:]
    if op == "remove":
        kept = [r for r in base if pool.unit[r] != unit]
        swapped = budget - len(kept)
        fill = [r for r in rest if pool.unit[r] != unit][:swapped]
        if len(fill) < swapped:
            raise ValueRunError(f"removing {unit} at budget {budget:,} (seed {seed}) needs {swapped:,} other rows "
                              f"beyond the default mix; the pool has {len(fill):,}")
        return kept + fill, swapped
    extra = [r for r in rest if pool.unit[r] == unit][:add_rows]
    others = [i for i, r in enumerate(base) if pool.unit[r] != unit]
    n = min(len(extra), len(others))
    if n == 0:
        raise ValueRunError(f"adding {unit} at budget {budget:,} (seed {seed}): no row of it outside the default mix")
    dropped = set(others[-n:])
    return [r for i, r in enumerate(base) if i not in dropped] + extra[:n], n


def plan_drafts(pool: Pool, settings: ValueSettings, units: list[str]) -> tuple[list[PlannedDraft], list[str]]:
    """The default mix at every seed, then each unit's arm at the first `arm_seeds` seeds; and the arms that
    cannot be made, in words."""
    drafts = [PlannedDraft(name=f"default_s{s}", unit=None, seed=s) for s in settings.seeds]
    default_rows(pool, settings.budget, settings.seeds[0])
    if settings.mix_counts:
        for seed in settings.seeds:
            mix_rows(pool, settings.mix_counts, seed)
        drafts += [PlannedDraft(name=f"measured_mix_s{s}", unit=None, seed=s, mix=True) for s in settings.seeds]
    skipped: list[str] = []
    for unit in units:
        for seed in settings.seeds[: settings.arm_seeds]:
            try:
                _, swapped = arm_rows(pool, settings.budget, seed, unit, settings.op, add_rows(settings))
            except ValueRunError as exc:
                skipped.append(str(exc))
                continue
            drafts.append(PlannedDraft(name=f"{settings.op}_{slug(unit)}_s{seed}", unit=unit, seed=seed,
                                       rows_swapped=swapped))
    return drafts, skipped


def add_rows(settings: ValueSettings) -> int:
    return settings.add_rows or max(1, settings.budget // 10)


def draft_rows(pool: Pool, settings: ValueSettings, draft: PlannedDraft) -> list[str]:
    """The row ids a planned draft trains on."""
    if draft.mix:
        return mix_rows(pool, settings.mix_counts, draft.seed)
    if draft.unit is None:
        return default_rows(pool, settings.budget, draft.seed)
    return arm_rows(pool, settings.budget, draft.seed, draft.unit, settings.op, add_rows(settings))[0]


def mix_rows(pool: Pool, counts: dict[str, int], seed: int) -> list[str]:
    """A mix of `counts` rows per unit: each unit's first rows in the seed's shuffle; ValueRunError when one has
    fewer."""
    left = dict(counts)
    rows = []
    for rid in shuffled(pool, seed):
        if left.get(pool.unit[rid], 0) > 0:
            rows.append(rid)
            left[pool.unit[rid]] -= 1
    short = {u: n for u, n in left.items() if n > 0}
    if short:
        raise ValueRunError("the mix asks for more rows than the pool has: "
                            + ", ".join(f"{u} {n:,} short" for u, n in sorted(short.items())))
    return rows


def write_draft_data(pool: Pool, ids: list[str], path: Path) -> Path:
    """A draft's rows as the trainer reads them, written whole."""
    text = "".join(json.dumps({"id": i, "conversations": pool.rows[i]}, ensure_ascii=False) + "\n" for i in ids)
    write_file(path, text.encode("utf-8"))
    return path


def draft_config(settings: ValueSettings, draft: PlannedDraft, data_file: Path, run_dir: Path) -> TrainConfig:
    """The one run config of every draft, with its own data, folder and seed, and the steps rule applied."""
    values: dict[str, Any] = {**settings.train, "data": str(data_file), "target": str(settings.target),
                              "out": str(run_dir), "messages_field": "conversations", "seed": draft.seed,
                              "device": settings.device, "resume": True}
    if settings.rule == "steps":
        values["max_steps"] = settings.steps
    else:
        values["epochs"] = settings.epochs
    return make_config(values)
