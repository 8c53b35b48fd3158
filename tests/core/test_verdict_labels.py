"""Verdict labels: unknowns alone read 'accepted, unverified', a real flag 'flagged', a blocked benchmark 'eval set'."""

from __future__ import annotations

from core.types import VerdictLabel, label_verdict


def r(code: str, blocking: bool = False) -> dict[str, object]:
    return {"code": code, "detail": "", "blocking": blocking}


def test_offline_unknowns_alone_are_unverified_not_flagged() -> None:
    unknowns = [r("existence_unverified"), r("license_unknown"), r("size_unknown"), r("fields_unknown")]
    assert label_verdict(unknowns) is VerdictLabel.UNVERIFIED
    assert label_verdict([*unknowns, r("duplicate")]) is VerdictLabel.UNVERIFIED


def test_a_real_flag_is_flagged_and_nothing_at_all_is_accepted() -> None:
    assert label_verdict([r("existence_unverified"), r("license_non_commercial")]) is VerdictLabel.FLAGGED
    assert label_verdict([r("benchmark")]) is VerdictLabel.FLAGGED  # a benchmark with a training split
    assert label_verdict([]) is VerdictLabel.ACCEPTED
    assert label_verdict([r("duplicate")]) is VerdictLabel.ACCEPTED


def test_blocking_reasons_reject_and_a_blocked_benchmark_alone_is_an_eval_set() -> None:
    assert label_verdict([r("existence_unverified"), r("benchmark", True)]) is VerdictLabel.EVAL_SET
    assert label_verdict([r("benchmark", True), r("off_topic", True)]) is VerdictLabel.REJECTED
    assert label_verdict([r("gated", True)]) is VerdictLabel.REJECTED
