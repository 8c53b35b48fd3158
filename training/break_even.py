"""When speculation pays: the break-even acceptance length and the chain length k that maximises tokens/s.

A round of chain k (k draft steps, then one (k+1)-token verify) costs `c(k)` target decode steps and yields
AL tokens on average, so speculation runs at AL / c(k) times the target's own speed: it breaks even at
AL = c(k), and the expected speedup of a measured AL is AL / c(k). With per-position acceptance rates
r_1..r_k (r_i = P(draft i stands | drafts 1..i-1 stood)) a chain of j <= k has the expected acceptance length
AL(j) = 1 + sum_{i<=j} prod_{m<=i} r_m, so the best k among the measured ones is argmax AL(j) / c(j).
Pure functions: the costs come from a measurement (benchmarks/gpu_speculative.py, eval-accept's timings).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["best_chain_length", "break_even_accept_length", "expected_accept_length", "expected_speedup",
           "fit_round_cost", "in_run_round_cost", "verdict"]


def break_even_accept_length(round_cost: float) -> float:
    """The acceptance length at which speculation is as fast as the target alone: the round's cost in steps."""
    if round_cost <= 0:
        raise ValueError(f"a round costs a positive number of target steps, not {round_cost}")
    return round_cost


def expected_speedup(accept_length: float, round_cost: float) -> float:
    """Tokens/s of speculation over the target's own, from AL and the round's cost in target steps."""
    return accept_length / break_even_accept_length(round_cost)


def in_run_round_cost(speculative_s: float, rounds: int, baseline_s: float, baseline_tokens: int) -> float:
    """A round's cost in target steps from one run's own timings: seconds per round over seconds per token.

    Both timings include each prompt's prefill, so this slightly overstates the cost of short outputs.
    """
    if rounds <= 0 or baseline_tokens <= 0 or baseline_s <= 0:
        raise ValueError("a round cost needs timed rounds and a timed baseline")
    return (speculative_s / rounds) / (baseline_s / baseline_tokens)


def expected_accept_length(rates: Sequence[float], k: int) -> float:
    """AL of a chain of k from per-position acceptance rates (only the first k are used; k <= len(rates))."""
    if k > len(rates):
        raise ValueError(f"chain {k} needs {k} per-position rates, {len(rates)} were measured")
    total, survive = 1.0, 1.0
    for rate in rates[:k]:
        survive *= rate
        total += survive
    return total


def fit_round_cost(costs: Mapping[int, float]) -> tuple[float, float]:
    """(a, b) of the least-squares line c(k) = a + b * k through measured round costs (one k: b from a = 1)."""
    if not costs:
        raise ValueError("no measured round costs")
    if len(costs) == 1:
        (k, c), = costs.items()
        return 1.0, (c - 1.0) / k  # the verify is about one target step; the rest is the draft's k steps
    n = len(costs)
    mean_k = sum(costs) / n
    mean_c = sum(costs.values()) / n
    var = sum((k - mean_k) ** 2 for k in costs)
    b = sum((k - mean_k) * (c - mean_c) for k, c in costs.items()) / var
    return mean_c - b * mean_k, b


def best_chain_length(rates: Sequence[float], costs: Mapping[int, float]) -> tuple[int, float]:
    """(k, expected speedup) maximising AL(k) / c(k) over 1..len(rates); costs measured at some k, fitted linear."""
    if not rates:
        raise ValueError("no per-position acceptance rates")
    a, b = fit_round_cost(costs)
    best = (1, 0.0)
    for k in range(1, len(rates) + 1):
        cost = costs.get(k, a + b * k)
        speed = expected_accept_length(rates, k) / cost if cost > 0 else 0.0
        if speed > best[1]:
            best = (k, speed)
    return best


def verdict(accept_length: float, round_cost: float, k: int, measured_speedup: float | None = None) -> str:
    """E.g. 'AL 2.09 vs break-even 1.42 at k=5: 1.47x expected, 1.44x measured'."""
    words = (f"AL {accept_length:.2f} vs break-even {break_even_accept_length(round_cost):.2f} at k={k}: "
             f"{expected_speedup(accept_length, round_cost):.2f}x expected")
    if measured_speedup:
        words += f", {measured_speedup:.2f}x measured"
    return words
