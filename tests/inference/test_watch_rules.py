"""The watcher's rules and rolling window on the CPU: each alert class fires on its case and only on it, the
window follows the newest rounds, and a server restart (counters back to zero) empties it without an alarm."""

from __future__ import annotations

import pytest

from inference.spec_window import RollingWindow, SpecTotals, conditional_rates
from inference.watch_rules import Expected, Thresholds, WindowStats, describe, judge, paying

RULES = Thresholds(min_accept_length=1.05, position0_fraction=0.5, drift=0.10, min_rounds=100)
HEALTHY = Expected(break_even=1.4, break_even_source="recorded at batch 1", position0=0.7, accept_length=2.5)


def _window(al: float, p0: float, rounds: float = 400) -> WindowStats:
    return WindowStats(rounds=rounds, accepted=(al - 1) * rounds, per_position=(p0, 0.6, 0.5), tokens=al * rounds,
                       seconds=10.0)


def _kinds(stats: WindowStats, expected: Expected = HEALTHY) -> list[str]:
    return [a.kind for a in judge(stats, expected, RULES)]


def test_a_healthy_window_raises_nothing_and_pays() -> None:
    stats = _window(2.4, 0.68)
    assert _kinds(stats) == []
    assert paying(stats, HEALTHY) is True
    line = describe(stats, HEALTHY, RULES)
    assert line.startswith("paying: AL 2.400 over 400 rounds") and "1.71x expected speedup" in line
    assert "recorded AL 2.500 (-4.0%)" in line and "recorded 0.70 (-2.9%)" in line


def test_acceptance_at_one_is_the_eagle_flag_class() -> None:
    kinds = _kinds(_window(1.02, 0.02))
    assert kinds[0] == "no_acceptance" and "below_break_even" in kinds


def test_position0_far_below_the_recorded_rate_is_the_layer_id_class() -> None:
    kinds = _kinds(_window(1.6, 0.30))  # still above break-even: only the position rule sees it
    assert kinds == ["position0"]
    assert _kinds(_window(1.6, 0.36)) == []  # 0.36 > 0.5 x 0.70


def test_below_break_even_alone() -> None:
    assert _kinds(_window(1.3, 0.5)) == ["below_break_even"]
    assert paying(_window(1.3, 0.5), HEALTHY) is False


def test_drift_from_the_deployment_baseline() -> None:
    expected = Expected(break_even=1.4, position0=0.7, baseline_accept_length=2.5)
    assert _kinds(_window(2.2, 0.65), expected) == ["drift"]  # -12 %
    assert _kinds(_window(2.3, 0.65), expected) == []  # -8 %: within the 10 %


def test_too_few_rounds_are_not_judged_and_unknown_break_even_is_said() -> None:
    assert _kinds(_window(1.0, 0.0, rounds=99)) == []
    bare = Expected()
    assert paying(_window(2.0, 0.5), bare) is None
    assert "break-even unknown" in describe(_window(2.0, 0.5), bare, RULES)
    assert "not judged below 100 rounds" in describe(_window(2.0, 0.5, rounds=50), bare, RULES)


def test_conditional_rates_from_accepted_counts_per_position() -> None:
    assert conditional_rates(100, (70.0, 42.0, 21.0)) == pytest.approx((0.7, 0.6, 0.5))
    assert conditional_rates(0, (0.0,)) == (0.0,)


def _reading(rounds: float, accepted: float, p: tuple[float, ...], epoch: float = 1.0) -> SpecTotals:
    return SpecTotals(rounds=rounds, accepted=accepted, tokens=rounds + accepted, requests=rounds / 10,
                      per_position=p, epoch=epoch)


def test_window_keeps_the_newest_rounds() -> None:
    window = RollingWindow(size=100)
    window.add(_reading(0, 0, (0.0, 0.0)), 0.0)
    window.add(_reading(100, 10, (10.0, 0.0)), 1.0)  # a bad first stretch: AL 1.1
    window.add(_reading(200, 160, (90.0, 70.0)), 2.0)  # then good: +100 rounds, +150 accepted
    stats = window.stats()
    assert stats.rounds == 100 and stats.accept_length == pytest.approx(2.5)
    assert stats.per_position == pytest.approx((0.8, 0.875))
    assert stats.seconds == 1.0 and stats.tokens_per_s == pytest.approx(250.0)


def test_a_restart_empties_the_window_and_raises_no_alarm() -> None:
    window = RollingWindow(size=100)
    window.add(_reading(0, 0, (0.0,)), 0.0)
    assert not window.add(_reading(500, 700, (300.0,)), 5.0)
    assert judge(window.stats(), HEALTHY, RULES) == []
    # The server restarts: its counters begin again, lower than before. Differencing them would give negative
    # rounds and an acceptance below 1, which would fire every rule.
    assert window.add(_reading(20, 30, (15.0,)), 6.0) is True
    assert window.stats().rounds == 0 and judge(window.stats(), HEALTHY, RULES) == []
    assert window.restarts == 1
    window.add(_reading(520, 730, (315.0,)), 7.0)
    assert window.stats().rounds == 500 and judge(window.stats(), HEALTHY, RULES) == []


def test_a_restart_seen_by_its_epoch_even_when_the_new_counters_are_higher() -> None:
    window = RollingWindow(size=10)
    window.add(_reading(50, 60, (40.0,), epoch=1.0), 0.0)
    assert window.add(_reading(80, 100, (60.0,), epoch=2.0), 1.0) is True
    assert window.stats().rounds == 0


def test_idle_intervals_fold_into_one_and_lower_the_served_rate() -> None:
    window = RollingWindow(size=100)
    window.add(_reading(0, 0, (0.0,)), 0.0)
    window.add(_reading(100, 100, (60.0,)), 1.0)
    for t in range(2, 12):
        window.add(_reading(100, 100, (60.0,)), float(t))
    assert len(window.intervals) == 2
    assert window.stats().seconds == 11.0 and window.stats().accept_length == 2.0
