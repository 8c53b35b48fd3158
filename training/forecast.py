"""How much data a target acceptance length needs: a saturating curve fitted to measured runs, with a band.

Model: AL(n) = a - b * n^(-c) (a power law approaching its ceiling a; b, c > 0), fitted to the mean
acceptance length over the eval sets at each data size of the regenerated runs. For each exponent c on a
grid, a and b follow by least squares (AL is linear in n^(-c)); the c with the smallest squared error wins.
The uncertainty band comes from a bootstrap over the eval sets (resample the sets with replacement, refit):
the 10th to 90th percentile of the refitted curves. The data a target AL needs is n = (b / (a - AL))^(1/c),
infinite when the fitted ceiling lies below it. Three data sizes at least; more make the exponent mean more.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NotRequired, Required, cast, final

from typing_extensions import TypedDict  # pydantic reads TypedDicts from typing_extensions on Python 3.11

from training.errors import TrainingError

EXPONENTS = [round(0.02 * i, 2) for i in range(1, 101)]  # c in 0.02 .. 2.0


class ForecastError(TrainingError, ValueError):
    """Results that cannot be fitted (too few data sizes, no regenerated runs)."""


class ForecastRun(TypedDict):
    """One measured (draft, eval set) row: what the fit reads of it (a row carries more: `CurveRun`)."""

    samples: int
    eval_set: str
    accept_length: float
    regenerated: NotRequired[bool]  # a control row (the datasets' own answers) is plotted, never fitted
    source: NotRequired[str]  # another prompt source (e.g. target-written) measured beside the curve: never fitted


def curve_runs(runs: Sequence[ForecastRun]) -> list[ForecastRun]:
    """Return the rows of the curve itself: those without a `source` (rows of another prompt source sit beside it)."""
    return [r for r in runs if not r.get("source")]


class FitParams(TypedDict):
    """`Fit` as JSON."""

    a: float
    b: float
    c: float
    sse: float


@final  # final, so that `"error" in fit` tells a ForecastResult from a FitFailure
class ForecastResult(TypedDict):
    """What `forecast` returns: the fit, its bootstrap band and the samples a target AL needs."""

    model: str
    fit: FitParams
    points: list[list[float]]  # [size, mean AL] of each data size
    eval_sets: list[str]
    target_accept_length: float
    samples_needed: int | None  # None: the fitted ceiling lies below the target
    samples_needed_band_10_90: list[int | None] | None
    ceiling: float
    grid: list[int]
    band_10_90: list[list[float]]
    bootstrap_fits: int
    saturation_identified: bool
    at_10x_top: float
    gain_per_doubling: list[float]
    steepening: bool
    top_above_fit: float


@final
class FitFailure(TypedDict):
    """A forecast that could not be made, and why."""

    error: str


class ScalingDoc(TypedDict, total=False):
    """A scaling results document (scaling.json, or a curve's runs and fit) as the forecast and plots read it."""

    target: str
    runs: Required[Sequence[ForecastRun]]
    forecast: ForecastResult | FitFailure | None


@dataclass
class Fit:
    """AL(n) = a - b * n^(-c) and its squared error on the points it was fitted to."""

    a: float
    b: float
    c: float
    sse: float

    def predict(self, n: float) -> float:
        value: float = self.a - self.b * n ** (-self.c)
        return value

    def needed(self, accept: float) -> float:
        """Samples for `accept` on this curve (inf when the ceiling a is not above it)."""
        if accept >= self.a:
            return math.inf
        if accept <= self.predict(1.0):
            return 1.0
        size: float = (self.b / (self.a - accept)) ** (1.0 / self.c)
        return size


def fit_curve(sizes: list[float], accepts: list[float]) -> Fit:
    """The least-squares saturating power law through (size, accept) points."""
    if len(set(sizes)) < 3:
        raise ForecastError(f"a saturating curve needs at least 3 data sizes, got {sorted(set(sizes))}")
    best: Fit | None = None
    for c in EXPONENTS:
        xs = [n ** (-c) for n in sizes]
        mx, my = sum(xs) / len(xs), sum(accepts) / len(accepts)
        var = sum((x - mx) ** 2 for x in xs)
        if var == 0:
            continue
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, accepts, strict=True)) / var
        b = max(0.0, -slope)  # AL rises with n: b >= 0
        a = my + b * mx
        sse = sum((a - b * x - y) ** 2 for x, y in zip(xs, accepts, strict=True))
        if best is None or sse < best.sse:
            best = Fit(a, b, c, sse)
    assert best is not None
    return best


def _points(runs: Sequence[ForecastRun], sets: list[str]) -> tuple[list[float], list[float]]:
    sizes = sorted({r["samples"] for r in runs})
    out_n, out_al = [], []
    for n in sizes:
        vals = [r["accept_length"] for r in runs if r["samples"] == n and r["eval_set"] in sets]
        if vals:
            out_n.append(float(n))
            out_al.append(sum(vals) / len(vals))
    return out_n, out_al


def forecast(runs: Sequence[ForecastRun], *, target_accept: float, boot: int = 400, seed: int = 0) -> ForecastResult:
    """Fit the curve's regenerated runs, bootstrap over eval sets, and say how many samples target_accept needs."""
    regen = [r for r in curve_runs(runs) if r.get("regenerated", True)]
    if not regen:
        raise ForecastError("no regenerated runs to fit")
    sets = sorted({r["eval_set"] for r in regen})
    sizes, accepts = _points(regen, sets)
    fit = fit_curve(sizes, accepts)
    rng = random.Random(seed)
    grid = [sizes[0] * (sizes[-1] * 100 / sizes[0]) ** (i / 40) for i in range(41)]
    curves, needs = [], []
    for _ in range(boot):
        sample = [rng.choice(sets) for _ in sets]
        n_b, al_b = _points([r for s in sample for r in regen if r["eval_set"] == s], sample)
        if len(set(n_b)) < 3:
            continue
        f = fit_curve(n_b, al_b)
        curves.append([f.predict(n) for n in grid])
        needs.append(f.needed(target_accept))
    band = [(_quantile([c[i] for c in curves], 0.1), _quantile([c[i] for c in curves], 0.9))
            for i in range(len(grid))] if curves else []
    need = fit.needed(target_accept)
    per_doubling = gain_per_doubling(sizes, accepts)
    return {
        "model": "AL(n) = a - b * n^(-c)", "fit": cast(FitParams, asdict(fit)),
        "points": [list(p) for p in zip(sizes, accepts, strict=True)],
        "eval_sets": sets, "target_accept_length": target_accept,
        "samples_needed": None if math.isinf(need) else round(need),
        "samples_needed_band_10_90": (
            [_finite(_quantile(needs, 0.1)), _finite(_quantile(needs, 0.9))] if needs else None
        ),
        "ceiling": round(fit.a, 3), "grid": [round(n) for n in grid],
        "band_10_90": [[round(lo, 4), round(hi, 4)] for lo, hi in band],
        "bootstrap_fits": len(curves),
        # An exponent at the grid's edge means the points cannot tell saturation from growth in log(n): the
        # ceiling is then not measured, and the samples needed are a log-linear extrapolation.
        "saturation_identified": EXPONENTS[0] < fit.c < EXPONENTS[-1],
        "at_10x_top": round(fit.predict(sizes[-1] * 10), 3),
        "gain_per_doubling": [round(g, 4) for g in per_doubling],
        # The model is concave in log(n): points whose top step gains more per doubling than the step before
        # contradict it, and the fit then lags the top (the samples needed are overstated).
        "steepening": len(per_doubling) >= 2 and per_doubling[-1] > per_doubling[-2],
        "top_above_fit": round(accepts[-1] - fit.predict(sizes[-1]), 4),
    }


def gain_per_doubling(sizes: list[float], accepts: list[float]) -> list[float]:
    """Each step between neighbouring data sizes: its AL gain per doubling of the data (from the points alone)."""
    return [(a1 - a0) / math.log2(n1 / n0) for n0, n1, a0, a1
            in zip(sizes, sizes[1:], accepts, accepts[1:], strict=False)]


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return math.nan
    return ordered[min(len(ordered) - 1, max(0, int(q * (len(ordered) - 1) + 0.5)))]


def _finite(x: float) -> int | None:
    return None if math.isinf(x) or math.isnan(x) else round(x)


def forecast_from_results(doc: ScalingDoc, *, target_accept: float) -> ForecastResult | FitFailure:
    """The forecast of a scaling results document (its `runs`), or the reason it cannot be made."""
    try:
        return forecast(doc["runs"], target_accept=target_accept)
    except ForecastError as exc:
        return {"error": str(exc)}


def plot_scaling(doc: ScalingDoc, path: Path) -> Path:
    """AL vs training samples per eval set (control dashed) and their mean: what was measured, no fit."""
    plt = _pyplot()
    runs = curve_runs(doc["runs"])
    fig, ax = plt.subplots(figsize=(7.0, 4.4))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, eval_set in enumerate(sorted({r["eval_set"] for r in runs})):
        for regenerated, style in ((True, "-o"), (False, "--s")):
            pts = sorted((r["samples"], r["accept_length"]) for r in runs
                         if r["eval_set"] == eval_set and r["regenerated"] is regenerated)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, color=colors[i % len(colors)], lw=1.2,
                        ms=4, mfc="none" if not regenerated else None,
                        label=f"{eval_set}{'' if regenerated else ' (control: original answers)'}")
    regen = [r for r in runs if r.get("regenerated", True)]
    sizes, means = _points(regen, sorted({r["eval_set"] for r in regen}))
    if sizes:
        ax.plot(sizes, means, "-D", color="black", lw=2.0, ms=5, label="mean of the sets (regenerated)")
    _finish(ax, fig, path, doc, ncol=2)
    return path


def plot_forecast(doc: ScalingDoc, path: Path) -> Path:
    """The mean AL points, the fitted curve with its bootstrap band, the target AL and the samples it needs."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.0, 4.4))
    made = doc.get("forecast")
    fc = cast(ForecastResult, made if made and "error" not in made else {})  # a failed fit plots the frame alone
    if fc.get("points"):
        ax.plot([p[0] for p in fc["points"]], [p[1] for p in fc["points"]], "D", color="black", ms=5,
                label="measured mean AL")
    if fc.get("fit"):
        fit = Fit(**fc["fit"])
        ax.plot(fc["grid"], [fit.predict(n) for n in fc["grid"]], ":", color="black", lw=1.5,
                label=f"fit: {fit.a:.2f} - {fit.b:.2f}·n^-{fit.c:.2f}")
        if fc.get("band_10_90"):
            ax.fill_between(fc["grid"], [b[0] for b in fc["band_10_90"]], [b[1] for b in fc["band_10_90"]],
                            color="gray", alpha=0.2, label="bootstrap band (10-90%)")
        target = fc.get("target_accept_length")
        if target is not None:
            ax.axhline(target, color="tab:red", lw=1.0, ls="--", label=f"target AL {target}")
            if fc.get("samples_needed"):
                ax.axvline(fc["samples_needed"], color="tab:red", lw=1.0, ls=":",
                           label=f"fit reaches it at {fc['samples_needed']:,}")
        if fc.get("steepening"):
            ax.text(0.02, 0.97, "points steepen: the fit lags the top point", transform=ax.transAxes,
                    fontsize=7, va="top", color="tab:red")
    _finish(ax, fig, path, doc, ncol=1)
    return path


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _finish(ax: Any, fig: Any, path: Path, doc: ScalingDoc, *, ncol: int) -> None:
    import matplotlib.pyplot as plt

    ax.set_xscale("log")
    ax.set_xlabel("training conversations (log scale)")
    ax.set_ylabel("acceptance length (chain of 5, greedy)")
    ax.set_title(f"{doc.get('target', 'target')}: EAGLE-3 draft acceptance vs data")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6.5, ncol=ncol)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def load_results(path: Path) -> ScalingDoc:
    """A scaling results document (scaling.json) with its runs."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ForecastError(f"cannot read {path}: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("runs"), list):
        raise ForecastError(f"{path} holds no `runs` list")
    for i, run in enumerate(doc["runs"]):
        ok = isinstance(run, dict) and isinstance(run.get("samples"), int) and run["samples"] > 0 \
            and isinstance(run.get("eval_set"), str) and isinstance(run.get("accept_length"), int | float) \
            and math.isfinite(run["accept_length"]) and run["accept_length"] >= 1.0
        if not ok:
            raise ForecastError(f"{path}: run {i} needs samples (a positive integer), eval_set (text) and "
                                f"accept_length (a number >= 1): {str(run)[:120]}")
    return cast(ScalingDoc, doc)
