"""What a curve says: the runs in the forecast's schema, the fit and the data a target AL needs, curve.md, plots.

The fit is `training.forecast`'s, unchanged: AL(n) = a - b * n^(-c) through the mean acceptance length over the
eval sets at each size of the regenerated arm (the control is plotted, never fitted), a bootstrap band over the
sets, and n = (b / (a - AL))^(1/c) for the target AL. It needs three sizes at least; with fewer the curve says
so and gives the points alone. The answer in words is `training.forecast_text`'s, the lines `datahunt forecast`
prints, counted in rows.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, NotRequired, cast

from pydantic import ConfigDict, with_config
from typing_extensions import TypedDict  # pydantic reads TypedDicts from typing_extensions on Python 3.11

from training.curve.evaluate import SetScore
from training.forecast import (
    FitFailure,
    ForecastError,
    ForecastResult,
    ForecastRun,
    ScalingDoc,
    forecast,
    plot_forecast,
    plot_scaling,
)
from training.forecast_text import forecast_lines

PLOT = "curve.png"
FORECAST_PLOT = "curve_forecast.png"


@with_config(ConfigDict(extra="allow"))  # a caller's own stats (a benchmark's peak memory) are kept as given
class TrainingStats(TypedDict, total=False):
    """What a point keeps of the trainer's result (`runner.training_stats`; a hand-made point may hold fewer)."""

    steps: int
    final_loss: float
    step_accuracies: list[float]
    vocab_coverage: float
    train_wall_s: float
    train_tokens: int
    train_tokens_per_s: float


class CurveRun(ForecastRun, TrainingStats):
    """One (draft, eval set) row of a curve: what the forecast fits, the set's score, the point's training stats."""

    prompts: NotRequired[int]
    distinct_training_prompts: NotRequired[int]
    per_position_accept: NotRequired[list[float]]
    rounds: NotRequired[int]
    tokens: NotRequired[int]
    data_scale: NotRequired[float]  # the point's rows over the rows available


def run_row(samples: int, regenerated: bool, eval_set: str, result: SetScore, distinct: int,
            stats: TrainingStats, **extra: Any) -> CurveRun:
    """One (draft, eval set) row as `training.forecast` and the scaling report read it (`extra`: the caller's own
    keys, such as `data_scale`)."""
    return cast(CurveRun, {"samples": samples, "eval_set": eval_set, "regenerated": regenerated,
            "prompts": result.prompts,
            "distinct_training_prompts": distinct, "accept_length": result.accept_length,
            "per_position_accept": result.per_position_accept, "rounds": result.rounds, "tokens": result.tokens,
            **extra, **stats})


def fit_runs(runs: list[CurveRun], target_al: float) -> ForecastResult | FitFailure:
    """The forecast of the runs, or {"error": why it cannot be made}."""
    try:
        return forecast(runs, target_accept=target_al)
    except ForecastError as exc:
        return {"error": str(exc)}


def write_plots(runs: list[CurveRun], fit: ForecastResult | FitFailure | None, out: Path, title: str) -> list[Path]:
    """AL per set against rows (control dashed) and, once fitted, the fit with its band and the target AL."""
    if not runs:
        return []
    doc: ScalingDoc = {"target": title, "runs": runs, "forecast": fit}
    paths = [plot_scaling(doc, out / PLOT)]
    if fit and "error" not in fit:
        paths.append(plot_forecast(doc, out / FORECAST_PLOT))
    return paths


def markdown(doc: Any) -> str:
    """curve.md: what was trained under which rule, the table of points, the control's gap, the answer."""
    sets = sorted({s for p in doc.points for s in p.sets})
    lines = [f"# Data-scaling curve: {doc.settings.target}", "",
             f"- data: {doc.settings.data} ({doc.rows_available:,} rows, {doc.prompts_available:,} prompts)",
             f"- steps rule: {doc.steps_rule}", f"- evaluation: {doc.evaluator}",
             f"- status: {'complete' if doc.complete else 'in progress'} ({len(doc.points)} of {len(doc.plan)} "
             "points)"]
    lines += [f"- not measured: {s}" for s in doc.skipped]
    lines += ["", "| arm | rows | share | prompts | steps | final loss | " + " | ".join(f"AL {s}" for s in sets)
              + " | mean AL |", "|---" * (7 + len(sets)) + "|"]
    for p in sorted(doc.points, key=lambda p: (p.control, p.samples)):
        cells = [f"{p.sets[s].accept_length:.3f}" if s in p.sets else "-" for s in sets]
        lines.append(f"| {'control' if p.control else 'regenerated'} | {p.samples:,} | {p.fraction:.3f} | "
                     f"{p.distinct_prompts:,} | {p.stats['steps']} | {p.stats['final_loss']:.4f} | "
                     + " | ".join(cells) + f" | {p.mean_accept_length:.3f} |")
    gaps = control_gaps(doc.points)
    if gaps:
        lines += ["", "Regenerated minus control (mean AL): " + ", ".join(f"{n:,} rows {g:+.3f}" for n, g in gaps)]
    lines += ["", *forecast_lines(doc.fit, doc.settings.target_al, rows_available=doc.rows_available)]
    return "\n".join(lines) + "\n"


def control_gaps(points: list[Any]) -> list[tuple[int, float]]:
    """(rows, regenerated mean AL - control mean AL) at each size both arms measured."""
    regen = {p.samples: p.mean_accept_length for p in points if not p.control}
    return [(p.samples, regen[p.samples] - p.mean_accept_length) for p in sorted(points, key=lambda p: p.samples)
            if p.control and p.samples in regen and math.isfinite(p.mean_accept_length)]
