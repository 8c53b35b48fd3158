"""The shared vocabulary: category names parsed forgivingly, with a suggestion for a near miss."""

from __future__ import annotations

import pytest

from core.types import Category, UnknownCategoryError, parse_category


def test_case_and_dashes_are_forgiven() -> None:
    assert parse_category(" Code-Review ") is Category.CODE_REVIEW


@pytest.mark.parametrize(("typed", "suggestion"), [("maths", "math"), ("tool-usage", "tool_use"),
                                                   ("bugfixing", "bug_fixing")])
def test_a_near_miss_suggests_the_category(typed: str, suggestion: str) -> None:
    with pytest.raises(UnknownCategoryError, match=f"did you mean `{suggestion}`"):
        parse_category(typed)


def test_a_far_miss_lists_the_categories_without_a_guess() -> None:
    with pytest.raises(UnknownCategoryError) as err:
        parse_category("cooking")
    assert "did you mean" not in str(err.value) and "known categories: code_review" in str(err.value)
