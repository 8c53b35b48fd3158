"""Mixing: quotas from shares, unshared categories, unmet budgets, seeded determinism."""

from __future__ import annotations

from core.types import Category
from curation.conversation import Row
from curation.manifest import Budget
from curation.mixing import mix, quotas


def _rows(category: str, n: int, source: str = "a/b") -> list[Row]:
    return [Row(source, i, [{"role": "user", "content": f"{category} {i}"}], category) for i in range(n)]


def test_quotas_from_shares_and_rest() -> None:
    budget = Budget(total=100, shares={Category.MATH: 0.5})
    assert quotas(budget, {"math": 10, "general_chat": 10, "tool_use": 10}) == {
        "math": 50,
        "general_chat": 25,
        "tool_use": 25,
    }
    full = Budget(total=10, shares={Category.MATH: 1.0})
    assert quotas(full, {"math": 3, "tool_use": 3}) == {"math": 10, "tool_use": 0}
    assert quotas(Budget(), {"math": 3}) == {"math": None}


def test_no_budget_keeps_everything() -> None:
    rows = _rows("math", 5, "m/m") + _rows("general_chat", 3, "g/g")
    result = mix(rows, Budget(), seed=0, row_id={r.key: f"{r.category}{r.row_index}" for r in rows})
    assert result.selected == rows
    assert result.per_category["math"].quota is None and result.per_category["math"].unmet == 0


def test_budget_sampling_is_seeded_and_reports_unmet() -> None:
    rows = _rows("math", 50, "m/m") + _rows("general_chat", 4, "g/g")
    ids = {r.key: f"{r.category}-{r.row_index}" for r in rows}
    budget = Budget(total=20, shares={Category.MATH: 0.5, Category.GENERAL_CHAT: 0.3, Category.TOOL_USE: 0.2})
    first = mix(rows, budget, seed=1, row_id=ids)
    again = mix(list(reversed(rows)), budget, seed=1, row_id=ids)
    other = mix(rows, budget, seed=2, row_id=ids)
    assert sorted(ids[r.key] for r in first.selected) == sorted(ids[r.key] for r in again.selected)
    assert {ids[r.key] for r in first.selected} != {ids[r.key] for r in other.selected}
    assert first.per_category["math"].selected == 10
    assert first.per_category["general_chat"].unmet == 2
    assert first.per_category["tool_use"].available == 0 and first.per_category["tool_use"].unmet == 4
    assert first.per_source == {"m/m": 10, "g/g": 4}


def test_mix_warnings_name_a_dominant_category_and_an_empty_one() -> None:
    from curation.mixing import CategoryMix, mix_warnings

    mixed = {"math": CategoryMix(450, None, 450), "general_chat": CategoryMix(300, None, 300),
             "tool_use": CategoryMix(250, None, 250)}
    wanted = {"math", "general_chat", "tool_use", "code_review"}
    lines = mix_warnings(mixed, wanted, shared=set())
    assert lines == [
        "math is 45% of the mix (450 of 1,000 rows): give it a budget share to balance the set (`datahunt manifest "
        "export --budget-total N --share math=0.2`, or `budget.shares` in the manifest)",
        "code_review has approved sources but no rows in the mix (see the per-source table)",
    ]
    assert mix_warnings(mixed, wanted - {"code_review"}, shared={"math"}) == []  # a share asked for it
    assert mix_warnings({"math": CategoryMix(9, None, 9)}, {"math"}, shared=set()) == []  # one category only
    assert mix_warnings({"math": CategoryMix(9, None, 9)}, {"math", "tool_use"}, shared=set()) == [
        "tool_use has approved sources but no rows in the mix (see the per-source table)"]


def test_the_share_hint_names_flags_the_command_it_names_has() -> None:
    """The hint once named `--share` on `curate`, which has no such flag: every flag it names exists on its command."""
    import re

    from typer.testing import CliRunner

    from curation.mixing import CategoryMix, mix_warnings
    from server.cli import app

    line = mix_warnings({"math": CategoryMix(9, None, 9), "tool_use": CategoryMix(1, None, 1)}, set(), set())[0]
    command = re.search(r"`datahunt ([a-z -]+?) (--[^`]*)`", line)
    assert command, line
    help_text = CliRunner().invoke(app, [*command.group(1).split(), "--help"], terminal_width=200).output
    for flag in re.findall(r"--[a-z-]+", command.group(2)):
        assert flag in help_text, (flag, command.group(1))
