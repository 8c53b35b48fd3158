"""The break-even arithmetic: AL = c breaks even, AL / c is the speedup, and k maximises AL(k) / c(k)."""

from __future__ import annotations

import pytest

from training.break_even import (
    break_even_accept_length,
    describe,
    expected_accept_length,
    expected_speedup,
    interpolate_cost,
    recommend_k,
    round_cost,
)


def test_break_even_is_the_round_cost_and_the_speedup_its_ratio() -> None:
    cost = round_cost(round_s=0.0071, step_s=0.005)
    assert cost == pytest.approx(1.42)
    assert break_even_accept_length(cost) == cost
    assert expected_speedup(2.09, cost) == pytest.approx(2.09 / 1.42)
    assert expected_speedup(cost, cost) == pytest.approx(1.0)
    assert expected_speedup(1.3, cost) < 1.0  # accepted tokens alone do not make speculation pay
    with pytest.raises(ValueError, match="positive"):
        round_cost(0.01, 0.0)


def test_expected_accept_length_chains_the_per_position_rates() -> None:
    rates = [0.8, 0.5, 0.5]
    assert expected_accept_length(rates, 0) == 1.0
    assert expected_accept_length(rates, 1) == pytest.approx(1.8)
    assert expected_accept_length(rates, 3) == pytest.approx(1 + 0.8 + 0.4 + 0.2)
    assert expected_accept_length(rates, 5) == expected_accept_length(rates, 3)  # unmeasured positions add nothing


def test_costs_are_interpolated_between_and_beyond_the_measured_k() -> None:
    costs = {1: 1.1, 3: 1.3, 5: 1.5}
    assert interpolate_cost(costs, 3) == 1.3
    assert interpolate_cost(costs, 4) == pytest.approx(1.4)
    assert interpolate_cost(costs, 6) == pytest.approx(1.6)
    assert interpolate_cost({5: 1.45}, 2) == 1.45
    with pytest.raises(ValueError, match="no measured"):
        interpolate_cost({}, 3)


def test_the_recommended_k_maximises_expected_tokens_per_second() -> None:
    rates = [0.9, 0.8, 0.3, 0.2, 0.1]
    costs = {1: 1.1, 5: 1.5}  # +0.1 step per draft
    pick = recommend_k(rates, costs)
    speeds = {k: expected_accept_length(rates, k) / interpolate_cost(costs, k) for k in range(1, 6)}
    assert pick["k"] == max(speeds, key=lambda k: speeds[k]) == 2
    assert pick["expected_speedup"] == pytest.approx(speeds[2], abs=1e-3)
    # A draft that is never wrong wants the longest chain.
    assert recommend_k([1.0] * 5, costs)["k"] == 5


def test_the_sentence_puts_the_break_even_beside_the_measured_al() -> None:
    assert describe(2.09, 1.42, 5, 1.44) == "AL 2.09 vs break-even 1.42 at k=5: 1.47x expected, 1.44x measured"
    assert describe(2.09, 1.42, 5) == "AL 2.09 vs break-even 1.42 at k=5: 1.47x expected"
