"""When speculation pays: the break-even acceptance length and the chain length k to run, from measured costs.

A round (k draft steps and the (k+1)-token verify) costs c target decode steps and yields AL tokens on average,
where one target step yields one. So speculation breaks even at AL = c, the expected speedup is AL / c, and an
AL below c is slower than the target alone however good it looks. From the per-position acceptance a_i
(P(draft i accepted | drafts before it were)) a chain of k is expected to yield AL(k) = 1 + sum_{i<=k} prod_{j<=i} a_j
tokens a round; the k to run maximises AL(k) / c(k), with c(k) measured at a few k and interpolated between them.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence


def round_cost(round_s: float, step_s: float) -> float:
    """The cost of one round in target decode steps (round time over one step's time, same batch)."""
    if step_s <= 0 or round_s <= 0:
        raise ValueError(f"round and step times must be positive, not {round_s} and {step_s}")
    return round_s / step_s


def break_even_accept_length(cost: float) -> float:
    """The acceptance length at which a round of `cost` target steps is exactly as fast as the target alone."""
    return cost


def expected_speedup(accept_length: float, cost: float) -> float:
    """Tokens/s of speculation over the target's own: AL tokens per round of `cost` steps against 1 per step."""
    return accept_length / cost if cost > 0 else 0.0


def expected_accept_length(rates: Sequence[float], k: int) -> float:
    """AL of a chain of k from per-position acceptance rates (positions past the measured ones count as 0)."""
    total, run = 1.0, 1.0
    for rate in rates[:k]:
        run *= rate
        total += run
    return total


def interpolate_cost(costs: Mapping[int, float], k: int) -> float:
    """c(k) from costs measured at some k: exact where measured, linear between and beyond the nearest two."""
    if not costs:
        raise ValueError("no measured round cost to interpolate from")
    if k in costs:
        return costs[k]
    ks = sorted(costs)
    if len(ks) == 1:  # one point says nothing about the slope: the cost is taken as flat
        return costs[ks[0]]
    if k < ks[0]:
        lo, hi = ks[0], ks[1]
    elif k > ks[-1]:
        lo, hi = ks[-2], ks[-1]
    else:
        lo, hi = next((a, b) for a, b in itertools.pairwise(ks) if a < k < b)
    return costs[lo] + (costs[hi] - costs[lo]) * (k - lo) / (hi - lo)


def recommend_k(rates: Sequence[float], costs: Mapping[int, float], ks: Sequence[int] | None = None
                ) -> dict[str, float]:
    """The k in `ks` (default 1..len(rates)) with the highest expected AL(k) / c(k), and what it expects."""
    candidates = list(ks) if ks is not None else list(range(1, len(rates) + 1))
    if not candidates:
        raise ValueError("no chain length to choose from")
    best_k, best = candidates[0], -math.inf
    for k in candidates:
        speed = expected_speedup(expected_accept_length(rates, k), interpolate_cost(costs, k))
        if speed > best:
            best_k, best = k, speed
    cost = interpolate_cost(costs, best_k)
    return {"k": best_k, "expected_accept_length": round(expected_accept_length(rates, best_k), 3),
            "round_cost_target_steps": round(cost, 3), "expected_speedup": round(best, 3)}


def describe(accept_length: float, cost: float, k: int, measured: float | None = None) -> str:
    """One line, e.g. 'AL 2.09 vs break-even 1.42 at k=5: 1.47x expected, 1.44x measured'."""
    words = (f"AL {accept_length:.2f} vs break-even {break_even_accept_length(cost):.2f} at k={k}: "
             f"{expected_speedup(accept_length, cost):.2f}x expected")
    if measured is not None:
        words += f", {measured:.2f}x measured"
    return words
