"""From the drafts' acceptance to each unit's value, with its 95% interval from the noise the seeds show.

For a unit u, an eval set (or the mean over the sets) and each seed s its arm was trained at:
`d_s = AL(default, s) - AL(arm, s)` for `remove` (what u's rows were worth), `AL(arm, s) - AL(default, s)`
for `add`. The value is the mean of d_s over the arm's seeds, paired with the default mix of the same seed
(same shuffle, same training seed: the two drafts differ in the swapped rows only).

Noise: every draft trained at several seeds (the default mix always; an arm too with `arm_seeds` > 1) gives
the spread of AL between seeds of the same rows recipe; the within-group variances are pooled,
`s^2 = sum_groups sum (x - mean_group)^2 / sum_groups (n_group - 1)`, with that many degrees of freedom. A
difference of two independent drafts has variance 2 s^2, a mean of m paired differences 2 s^2 / m, so the
interval is `value ± t(0.975, dof) * s * sqrt(2 / m)` (Student's t: with 1 degree of freedom, two seeds of
the default mix, it is ±12.7 standard errors, honestly wide). Scaled by 10,000 / rows swapped into AL per
10K rows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from core.measured_value import MEAN_SET, MeasuredValue, UnitKind, ValueEstimate, ValueOp

# Student's t, 97.5% quantile, for 1..30 degrees of freedom (above 30 the normal's 1.96 is within 2%).
T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045,
         2.042)


def t_975(dof: int) -> float:
    """Student's t 97.5% quantile for `dof` degrees of freedom (dof >= 1)."""
    if dof < 1:
        raise ValueError("the t quantile needs at least one degree of freedom")
    return T_975[dof - 1] if dof <= len(T_975) else 1.96


def pooled_noise(groups: Sequence[Sequence[float]]) -> tuple[float, int]:
    """(pooled standard deviation, degrees of freedom) over groups of repeated measurements; groups of one add
    nothing; (0.0, 0) when no group is repeated."""
    squares, dof = 0.0, 0
    for values in groups:
        if len(values) < 2:
            continue
        mean = sum(values) / len(values)
        squares += sum((v - mean) ** 2 for v in values)
        dof += len(values) - 1
    return (math.sqrt(squares / dof), dof) if dof else (0.0, 0)


def estimate(deltas: Sequence[float], noise: float, dof: int, rows_swapped: float) -> ValueEstimate:
    """A unit's estimate on one set from its paired differences, the pooled noise and the rows swapped."""
    m = len(deltas)
    delta = sum(deltas) / m
    scale = 10_000 / rows_swapped if rows_swapped else 0.0
    low = high = None
    if dof:
        half = t_975(dof) * noise * math.sqrt(2 / m)
        low, high = round((delta - half) * scale, 4), round((delta + half) * scale, 4)
    return ValueEstimate(delta=round(delta, 4), per_10k=round(delta * scale, 4), low=low, high=high)


def difference(pairs: Sequence[tuple[float, float]], groups: Sequence[Sequence[float]]) -> ValueEstimate:
    """Mean of `a - b` over paired (a, b) measurements, with its 95% interval from the pooled noise of `groups`
    (per_10k is the difference itself: nothing is scaled)."""
    return estimate([a - b for a, b in pairs], *pooled_noise(groups), rows_swapped=10_000)


# AL per draft: draft name -> set name -> AL (MEAN_SET included).
Scores = Mapping[str, Mapping[str, float]]


def unit_values(*, kind: UnitKind, op: ValueOp, budget: int, run: str, default: Mapping[int, str],
                arms: Mapping[str, Mapping[int, tuple[str, int]]], scores: Scores) -> list[MeasuredValue]:
    """Every unit's value. `default`: seed -> the default draft's name; `arms`: unit -> seed -> (draft name,
    rows swapped); `scores`: the measured drafts' AL per set. Drafts not measured yet are left out; a unit
    with no arm paired with its seed's default is not valued."""
    sets = sorted({s for per in scores.values() for s in per})
    groups: dict[str, list[list[float]]] = {s: [] for s in sets}
    recipes = [dict(default)] + [{seed: name for seed, (name, _) in by_seed.items()} for by_seed in arms.values()]
    for recipe in recipes:
        for s in sets:
            groups[s].append([scores[n][s] for n in recipe.values() if n in scores and s in scores[n]])
    noise = {s: pooled_noise(groups[s]) for s in sets}
    sign = 1.0 if op == "add" else -1.0
    out: list[MeasuredValue] = []
    for unit, by_seed in sorted(arms.items()):
        pairs = [(scores[name], scores[default[seed]], swapped) for seed, (name, swapped) in sorted(by_seed.items())
                 if name in scores and seed in default and default[seed] in scores]
        if not pairs:
            continue
        swapped_mean = sum(p[2] for p in pairs) / len(pairs)
        per: dict[str, ValueEstimate] = {}
        for s in sets:
            deltas = [sign * (arm[s] - base[s]) for arm, base, _ in pairs if s in arm and s in base]
            if deltas:
                per[s] = estimate(deltas, *noise[s], swapped_mean)
        if MEAN_SET not in per:
            continue
        mean = per.pop(MEAN_SET)
        out.append(MeasuredValue(kind=kind, name=unit, op=op, budget=budget, rows_swapped=swapped_mean,
                                 seeds=len(pairs), noise_dof=noise[MEAN_SET][1], mean=mean, per_set=per, run=run))
    return out
