"""`run_curve(settings)`: every point of the plan trained, evaluated and saved in turn; a killed curve resumes.

After every finished point OUT/curve.json (the typed `CurveDoc`) is written whole, with curve.md and the
plots beside it; a curve started again with the same settings skips the points curve.json holds and continues
at the next one, and a point killed mid-training resumes inside the trainer from its newest checkpoint
(OUT/runs/<point>/checkpoints; `save_every` sets how often one is written). Other settings than the folder's
are refused, so that one curve never mixes two plans. curve.json's `runs` are in the schema
`datahunt forecast` reads, so the fit can be redone with another target AL.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from training.atomic_files import read_own, write_file
from training.curve.evaluate import DecodeEvaluator, Evaluator, SetScore, load_eval_prompts
from training.curve.plan import (
    CurveData,
    CurveError,
    CurveSettings,
    PlannedPoint,
    check_settings,
    distinct_prompts,
    load_curve_data,
    plan_points,
    point_config,
    point_rows,
    resolve_scales,
    write_point_data,
)
from training.curve.report import CurveRun, TrainingStats, fit_runs, markdown, run_row, write_plots
from training.forecast import FitFailure, ForecastResult

logger = logging.getLogger(__name__)
CURVE_FILE = "curve.json"
SUMMARY_FILE = "curve.md"
SCHEMA_VERSION = 1


class PointResult(BaseModel):
    """One trained and evaluated draft."""

    model_config = ConfigDict(extra="forbid")

    name: str
    samples: int
    control: bool
    fraction: float = Field(description="Its rows over the regenerated rows available.")
    distinct_prompts: int
    stats: TrainingStats = Field(description="The trainer's: steps, final_loss, train_tokens, train_wall_s, ...")
    eval_wall_s: float
    sets: dict[str, SetScore]

    @property
    def mean_accept_length(self) -> float:
        """The mean over the eval sets (what the fit reads at this size)."""
        return sum(s.accept_length for s in self.sets.values()) / max(1, len(self.sets))


class CurveDoc(BaseModel):
    """curve.json: the settings, the plan, every finished point, the runs for the forecast, and the fit."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    settings: CurveSettings
    steps_rule: str
    evaluator: str
    rows_available: int
    prompts_available: int
    prompts_left_out: int = Field(default=0, description="Prompts without an original answer (control only).")
    plan: list[PlannedPoint]
    skipped: list[str] = Field(default_factory=list)
    points: list[PointResult] = Field(default_factory=list)
    runs: list[CurveRun] = Field(default_factory=list)
    fit: ForecastResult | FitFailure | None = None
    complete: bool = False

    def done(self, name: str) -> bool:
        return any(p.name == name for p in self.points)


def training_stats(result: Any) -> TrainingStats:
    """What a point keeps of the trainer's result."""
    return {"steps": result.steps, "final_loss": round(result.loss, 4),
            "step_accuracies": [round(a, 3) for a in result.step_accuracies],
            "vocab_coverage": round(result.vocab_coverage, 4), "train_wall_s": round(result.wall_s, 1),
            "train_tokens": result.tokens, "train_tokens_per_s": round(result.tokens_per_s, 1)}


def runs_of(points: list[PointResult]) -> list[CurveRun]:
    """Every (point, eval set) as a forecast run, smallest first."""
    return [run_row(p.samples, not p.control, name, score, p.distinct_prompts, p.stats, data_scale=p.fraction)
            for p in sorted(points, key=lambda p: (p.control, p.samples)) for name, score in sorted(p.sets.items())]


def load_doc(out: Path) -> CurveDoc | None:
    """The curve.json of `out`, or None when there is none."""
    raw = read_own(out / CURVE_FILE, root=out)
    if raw is None:
        return None
    try:
        return CurveDoc.model_validate(json.loads(raw))
    except (json.JSONDecodeError, UnicodeDecodeError, ValidationError) as exc:
        raise CurveError(f"{out / CURVE_FILE} is not a curve this version reads ({str(exc).splitlines()[0]}): use "
                         "another --out") from None


def save(doc: CurveDoc, out: Path) -> None:
    """curve.json, curve.md and the plots, each written whole."""
    doc.runs = runs_of(doc.points)
    doc.fit = fit_runs(doc.runs, doc.settings.target_al) if doc.points else None
    write_file(out / CURVE_FILE, (doc.model_dump_json(indent=1) + "\n").encode("utf-8"), root=out)
    write_file(out / SUMMARY_FILE, markdown(doc).encode("utf-8"), root=out)
    write_plots(doc.runs, doc.fit, out, doc.settings.target.name)


def start(settings: CurveSettings, data: CurveData, evaluator: Evaluator) -> CurveDoc:
    """The folder's curve when it has one with these settings; else a new one."""
    sizes = resolve_scales(settings.scales, len(data.answers))
    plan, skipped = plan_points(sizes, data, settings.control)
    fresh = CurveDoc(settings=settings, steps_rule=settings.rule_text(),
                     evaluator=evaluator.description, rows_available=len(data.answers),
                     prompts_available=len(data.prompts), prompts_left_out=data.left_out, plan=plan, skipped=skipped)
    before = load_doc(settings.out)
    if before is None:
        return fresh
    old = before.settings.fingerprint()
    changed = sorted(k for k, v in settings.fingerprint().items() if old.get(k) != v)
    if changed:
        raise CurveError(f"{settings.out} holds a curve made with other settings ({', '.join(changed)}): run it "
                         "with the same settings to resume, or use another --out")
    if before.plan != plan:
        raise CurveError(f"{settings.out} holds a curve of other points ({', '.join(p.name for p in before.plan)}) "
                         f"than the data gives now ({', '.join(p.name for p in plan)}): use another --out")
    before.settings = fresh.settings  # the target AL may differ: the fit follows the new one
    return before


def run_curve(settings: CurveSettings, *, evaluator: Evaluator | None = None,
              say: Callable[[str], None] = lambda line: None,
              on_prompt: Callable[[int], None] | None = None) -> CurveDoc:
    """Train and evaluate every point not yet in OUT/curve.json; return the finished curve."""
    check_settings(settings)
    data = load_curve_data(settings)
    prompts = load_eval_prompts(settings.eval, settings.eval_per_set)
    evaluator = evaluator or DecodeEvaluator(settings.target, prompts, k=settings.k, max_new=settings.max_new,
                                             device=settings.device, batch=settings.eval_batch)
    doc = start(settings, data, evaluator)
    out = settings.out
    save(doc, out)
    say(f"curve: {len(doc.plan)} points on {doc.rows_available:,} rows; steps rule: {doc.steps_rule}")
    for s in doc.skipped:
        say(f"not measured: {s}")
    from training.tokenized import RenderedRows

    memo = RenderedRows()  # the runs train on subsets of one pool: each conversation is rendered once
    for index, point in enumerate(doc.plan, start=1):
        head = f"point {index}/{len(doc.plan)} {point.name} ({point.samples:,} rows)"
        if doc.done(point.name):
            say(f"{head}: already measured, skipped")
            continue
        rows = point_rows(point, data)
        run_dir = out / "runs" / point.name
        cfg = point_config(settings, write_point_data(rows, out / "data" / f"{point.name}.jsonl"), run_dir)
        say(f"{head}: training")
        from training.trainer import train

        result = train(cfg, memo=memo)
        say(f"{head}: {result.steps} steps, loss {result.loss:.4f}; evaluating")
        started = time.perf_counter()
        sets = evaluator(result.export_dir, on_prompt)
        doc.points.append(PointResult(name=point.name, samples=point.samples, control=point.control,
                                      fraction=round(point.samples / doc.rows_available, 4),
                                      distinct_prompts=distinct_prompts(rows), stats=training_stats(result),
                                      eval_wall_s=round(time.perf_counter() - started, 2), sets=sets))
        save(doc, out)
        als = ", ".join(f"{name} {s.accept_length:.3f}" for name, s in sorted(sets.items()))
        say(f"{head}: done, AL {als} (saved {out / CURVE_FILE})")
    doc.complete = True
    save(doc, out)
    return doc
