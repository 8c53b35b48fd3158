"""`run_value(settings)`: every planned draft trained, evaluated and saved in turn, then each unit's value.

After every finished draft OUT/value.json (the typed `ValueDoc`) is written whole with value.md beside it, the
values recomputed from the drafts measured so far; started again with the same settings, a run skips the
drafts value.json holds, and a draft killed mid-training resumes inside the trainer from its checkpoint
(OUT/runs/<draft>/). Other settings than the folder's are refused.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.measured_value import MEAN_SET, MeasuredValue, ValueEstimate
from training.atomic_files import read_own, write_file
from training.curve.evaluate import DecodeEvaluator, EvalPrompt, Evaluator, SetScore, load_eval_prompts
from training.curve.report import TrainingStats
from training.curve.runner import training_stats
from training.value.plan import (
    PlannedDraft,
    Pool,
    ValueRunError,
    ValueSettings,
    default_units,
    draft_config,
    draft_rows,
    load_pool,
    plan_drafts,
    write_draft_data,
)
from training.value.stats import difference, unit_values

logger = logging.getLogger(__name__)
VALUE_FILE = "value.json"
SUMMARY_FILE = "value.md"
USER_SET = "user"


class DraftResult(BaseModel):
    """One trained and evaluated draft."""

    model_config = ConfigDict(extra="forbid")

    name: str
    unit: str | None
    seed: int
    samples: int
    rows_swapped: int
    mix: bool = False
    stats: TrainingStats
    eval_wall_s: float
    sets: dict[str, SetScore]
    draft_sha256: str
    device: str

    @property
    def mean_accept_length(self) -> float:
        return sum(s.accept_length for s in self.sets.values()) / max(1, len(self.sets))


class ValueDoc(BaseModel):
    """value.json: the settings, the plan, every finished draft and the values they give so far."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = 1
    run_id: str
    settings: ValueSettings
    evaluator: str
    pool_rows: int
    units: list[str]
    plan: list[PlannedDraft]
    skipped: list[str] = Field(default_factory=list)
    drafts: list[DraftResult] = Field(default_factory=list)
    values: list[MeasuredValue] = Field(default_factory=list)
    mix_comparison: dict[str, ValueEstimate] = Field(default_factory=dict, description="With mix_counts: per set "
                                                     "(and `mean`), AL of the mix minus the default's, paired by seed.")
    complete: bool = False

    def done(self, name: str) -> bool:
        return any(d.name == name for d in self.drafts)

    @property
    def run(self) -> str:
        """How a value names its run: the id and the folder."""
        return f"value run {self.run_id} ({self.settings.out})"


def run_id(settings: ValueSettings) -> str:
    """A stable id of the run's settings."""
    return hashlib.sha256(json.dumps(settings.fingerprint(), sort_keys=True).encode()).hexdigest()[:12]


def compute_values(doc: ValueDoc) -> list[MeasuredValue]:
    """The units' values from the drafts measured so far (`training.value.stats`)."""
    scores = {d.name: {**{s: v.accept_length for s, v in d.sets.items()}, MEAN_SET: d.mean_accept_length}
              for d in doc.drafts}
    default = {p.seed: p.name for p in doc.plan if p.unit is None and not p.mix}
    arms: dict[str, dict[int, tuple[str, int]]] = {}
    for p in doc.plan:
        if p.unit is not None:
            arms.setdefault(p.unit, {})[p.seed] = (p.name, p.rows_swapped)
    return unit_values(kind=doc.settings.by, op=doc.settings.op, budget=doc.settings.budget, run=doc.run,
                       default=default, arms=arms, scores=scores)


def _scores(d: DraftResult) -> dict[str, float]:
    return {**{n: v.accept_length for n, v in d.sets.items()}, MEAN_SET: d.mean_accept_length}


def compare_mix(doc: ValueDoc) -> dict[str, ValueEstimate]:
    """Per set (and the mean): the mix's AL minus the default's, paired by seed, with a 95% interval from the
    seeds' spread of both."""
    by_seed = {(d.mix, d.seed): d for d in doc.drafts if d.unit is None}
    seeds = [s for (mix, s) in by_seed if mix and (False, s) in by_seed]
    if not seeds:
        return {}
    scores = _scores
    out = {}
    for name in sorted(scores(by_seed[(True, seeds[0])])):
        pairs = [(scores(by_seed[(True, s)])[name], scores(by_seed[(False, s)])[name]) for s in seeds]
        groups = [[scores(d)[name] for (mix, _), d in by_seed.items() if mix == arm] for arm in (False, True)]
        out[name] = difference(pairs, groups)
    return out


def load_value_doc(out: Path) -> ValueDoc | None:
    """The value.json of `out`, or None when there is none."""
    raw = read_own(out / VALUE_FILE, root=out)
    if raw is None:
        return None
    try:
        return ValueDoc.model_validate(json.loads(raw))
    except (json.JSONDecodeError, UnicodeDecodeError, ValidationError) as exc:
        raise ValueRunError(f"{out / VALUE_FILE} is not a value run this version reads "
                            f"({str(exc).splitlines()[0]}): use another --out") from None


def save(doc: ValueDoc) -> None:
    """value.json and value.md, each written whole, the values recomputed first."""
    from training.value.results import markdown

    out = doc.settings.out
    doc.values = compute_values(doc)
    doc.mix_comparison = compare_mix(doc)
    write_file(out / VALUE_FILE, (doc.model_dump_json(indent=1) + "\n").encode("utf-8"), root=out)
    write_file(out / SUMMARY_FILE, markdown(doc).encode("utf-8"), root=out)


def eval_prompts(settings: ValueSettings) -> list[EvalPrompt]:
    """The eval sets' prompts, and the user's own held-out prompts as the set `user`."""
    prompts = load_eval_prompts(settings.eval, settings.eval_per_set)
    if settings.user_prompts is not None:
        own = load_eval_prompts(settings.user_prompts, None)
        prompts += [EvalPrompt(set=USER_SET, id=p.id, turns=p.turns, text=p.text) for p in own]
    return prompts


def start(settings: ValueSettings, pool: Pool, evaluator: Evaluator) -> ValueDoc:
    """The folder's run when it has one with these settings; else a new one."""
    units = default_units(pool, settings)
    plan, skipped = plan_drafts(pool, settings, units)
    fresh = ValueDoc(run_id=run_id(settings), settings=settings, evaluator=evaluator.description,
                     pool_rows=len(pool.ids), units=units, plan=plan, skipped=skipped)
    before = load_value_doc(settings.out)
    if before is None:
        return fresh
    old = before.settings.fingerprint()
    changed = sorted(k for k, v in settings.fingerprint().items() if old.get(k) != v)
    if changed or before.plan != plan:
        what = ", ".join(changed) or "the drafts the pool gives now"
        raise ValueRunError(f"{settings.out} holds a value run made with other settings ({what}): run it with the "
                            "same settings to resume, or use another --out")
    before.settings = settings
    return before


def device_name(device: str) -> str:
    """The accelerator a draft was measured on, in words."""
    import torch

    if device != "cpu" and torch.cuda.is_available():
        return str(torch.cuda.get_device_name())
    return "cpu"


def draft_sha256(export_dir: Path) -> str:
    """SHA-256 of the exported draft's weights file."""
    digest = hashlib.sha256()
    with (export_dir / "model.safetensors").open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def run_value(settings: ValueSettings, *, evaluator: Evaluator | None = None,
              say: Callable[[str], None] = lambda line: None) -> ValueDoc:
    """Train and evaluate every draft not yet in OUT/value.json; return the finished run with its values."""
    if not settings.target.is_dir():
        raise ValueRunError(f"target folder {settings.target} does not exist")
    pool = load_pool(settings.data, settings.by)
    prompts = eval_prompts(settings)
    evaluator = evaluator or DecodeEvaluator(settings.target, prompts, k=settings.k, max_new=settings.max_new,
                                             device=settings.device, batch=settings.eval_batch)
    doc = start(settings, pool, evaluator)
    save(doc)
    what = "the measured mix against the default" if settings.mix_counts else f"{len(doc.units)} {settings.by}(s)"
    say(f"value: {what} at {settings.budget:,} rows, {len(doc.plan)} drafts "
        f"(pool {doc.pool_rows:,} rows)")
    for line in doc.skipped:
        say(f"not measured: {line}")
    from training.tokenized import RenderedRows

    memo = RenderedRows()  # the runs train on subsets of one pool: each conversation is rendered once
    for index, draft in enumerate(doc.plan, start=1):
        head = f"draft {index}/{len(doc.plan)} {draft.name}"
        if doc.done(draft.name):
            say(f"{head}: already measured, skipped")
            continue
        rows = draft_rows(pool, settings, draft)
        data = write_draft_data(pool, rows, settings.out / "data" / f"{draft.name}.jsonl")
        cfg = draft_config(settings, draft, data, settings.out / "runs" / draft.name)
        say(f"{head}: training on {len(rows):,} rows")
        from training.trainer import train

        result = train(cfg, memo=memo)
        started = time.perf_counter()
        sets = evaluator(result.export_dir)
        doc.drafts.append(DraftResult(
            name=draft.name, unit=draft.unit, seed=draft.seed, samples=len(rows), rows_swapped=draft.rows_swapped,
            mix=draft.mix,
            stats=training_stats(result), eval_wall_s=round(time.perf_counter() - started, 2), sets=sets,
            draft_sha256=draft_sha256(result.export_dir), device=device_name(settings.device)))
        save(doc)
        say(f"{head}: mean AL {doc.drafts[-1].mean_accept_length:.3f} (saved {settings.out / VALUE_FILE})")
    doc.complete = True
    save(doc)
    return doc
