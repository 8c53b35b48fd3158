"""Reasons read once each, under the categories that gave them; the latest verdict per category apart from history."""

from __future__ import annotations

from server.api.verdict_view import reason_groups, split_current

LICENSE = {"code": "license_unknown", "detail": "no license stated", "blocking": False}
GATED = {"code": "gated", "detail": "gated", "blocking": True}


def test_a_reason_every_category_gave_reads_once_for_all_of_them() -> None:
    reasons = [{**LICENSE, "category": c} for c in ("tool_use", "math", "math")] + [{**GATED, "category": "math"}]
    groups = reason_groups(reasons, ["math", "tool_use"])
    assert [(g["label"], g["blocking"], [r["code"] for r in g["reasons"]]) for g in groups] == [
        ("math", True, ["gated"]),  # blocking groups first
        ("all 2 categories", False, ["license_unknown"]),
    ]
    # A reason the entry's other categories did not give is labelled with the ones that did.
    assert [g["label"] for g in reason_groups([{**LICENSE, "category": "math"}], ["math", "tool_use"])] == ["math"]
    # Reasons stored without a category (older catalogs) are still shown, once.
    assert reason_groups([LICENSE, LICENSE], ["math"]) == [
        {"categories": ["—"], "label": "—", "blocking": False, "reasons": [LICENSE]}]


def test_the_latest_row_of_each_category_is_current_the_rest_history() -> None:
    rows = [{"category": "math", "n": 1}, {"category": "tool_use", "n": 2}, {"category": "math", "n": 3}]
    current, history = split_current(rows)
    assert [r["n"] for r in current] == [2, 3]  # in the order of core.types.Category: tool_use before math
    assert [r["n"] for r in history] == [1]
