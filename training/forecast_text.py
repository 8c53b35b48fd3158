"""The forecast in words: the one renderer `datahunt forecast` prints and a data-scaling curve writes.

It reads `training.forecast`'s result (or the reason none was made) and says the fit, optionally each measured
data size against it, what the points cannot show (no saturation, a steepening top step), and how much data
the target acceptance length needs with its bootstrap band. A scaling results file counts data in samples; a
curve counts rows and also says the need as a multiple of the rows its set holds.
"""

from __future__ import annotations

from training.forecast import FitFailure, ForecastResult


def forecast_lines(fit: ForecastResult | FitFailure | None, target_accept: float, *,
                   rows_available: int | None = None, show_points: bool = False) -> list[str]:
    """Return the forecast as lines of text: the fit, each data size against it (with `show_points`), the notes,
    and the data `target_accept` needs, counted in samples, or in rows against `rows_available` when given."""
    if not fit:
        return ["fit: not yet (no point measured)"]
    if "error" in fit:
        return [f"fit: not made: {fit['error']}; the points above are the measurement"]
    unit = "samples" if rows_available is None else "rows"
    f = fit["fit"]
    lines = [f"fit: AL(n) = {f['a']:.3f} - {f['b']:.3f} * n^-{f['c']:.2f} over {len(fit['points'])} data sizes "
             f"({', '.join(fit['eval_sets'])})"]
    if show_points:
        lines += [f"  {int(n):>8} {unit}: mean AL {al:.3f} (fit {f['a'] - f['b'] * n ** -f['c']:.3f})"
                  for n, al in fit["points"]]
    if not fit["saturation_identified"]:
        lines.append("note: these points do not show saturation (the exponent sits at the fit's edge); the numbers "
                     "below extrapolate growth in log(data), and more data sizes would pin the ceiling down")
    if fit.get("steepening"):
        gains = fit["gain_per_doubling"]
        lines.append(f"note: the top step gains {gains[-1]:+.3f} AL per doubling of the data against {gains[-2]:+.3f} "
                     f"in the step before, and lies {fit['top_above_fit']:+.3f} off the fit: the points steepen, "
                     f"which a saturating curve cannot follow, so the {unit} below are likely overstated; measure "
                     "the next size")
    need, band = fit["samples_needed"], fit["samples_needed_band_10_90"]
    if need is None:
        lines.append(f"AL {target_accept} lies above the fitted ceiling {fit['ceiling']:.2f}: more data of this kind "
                     "alone does not reach it")
        return lines
    share = "" if rows_available is None else \
        f"{need / max(1, rows_available):.1f}x the {rows_available:,} rows of this set; "
    lo = "?" if not band or band[0] is None else f"{band[0]:,}"
    hi = "unreachable" if not band or band[1] is None else f"{band[1]:,}"
    lines.append(f"AL {target_accept} needs about {need:,} {unit} ({share}bootstrap 10-90%: {lo} to {hi})")
    return lines
