"""Category definitions: all ten parse into useful definitions; malformed files fail with a clear message."""

from __future__ import annotations

import re

import pytest

from agents.categories import CategoryDefinitionError, load_category, parse_category_definition
from core.types import Category

GOOD = """# math

## Description
Math problems.

## A good dataset
Worked solutions.

## Exemplars
- Grade-school word problems with worked solutions.

## Seed queries
- gsm8k
- math word problems

## Keywords
- math
"""


@pytest.mark.parametrize("category", list(Category))
def test_every_category_has_a_usable_definition(category: Category) -> None:
    definition = load_category(category)
    assert definition.category is category
    assert len(definition.description) > 40 and len(definition.good_dataset) > 40
    assert len(definition.seed_queries) >= 3
    assert len(definition.exemplars) >= 3 and all(len(e) > 40 for e in definition.exemplars)
    assert not any(re.search(r"\b[\w.-]+/[\w.-]+\b", e) for e in definition.exemplars), "exemplars name no dataset ids"
    assert len(definition.keywords) >= 3
    assert all(f.startswith("task_categories:") for f in definition.hub_task_filters)


def test_a_minimal_file_parses_and_task_filters_are_optional() -> None:
    definition = parse_category_definition(Category.MATH, GOOD)
    assert definition.seed_queries == ["gsm8k", "math word problems"]
    assert definition.keywords == ["math"]
    assert definition.hub_task_filters == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (GOOD.replace("# math", "# maths"), "first line must be '# math'"),
        (GOOD.replace("## Keywords\n- math\n", ""), "missing section '## Keywords'"),
        (GOOD.replace("## Exemplars\n- Grade-school word problems with worked solutions.\n", ""),
         "missing section '## Exemplars'"),
        (GOOD.replace("- gsm8k\n- math word problems", "gsm8k, math"), "must be a bullet list"),
        (GOOD.replace("Math problems.", ""), "section '## Description' is empty"),
        (GOOD + "\n## Keywords\n- again\n", "appears twice"),
    ],
)
def test_malformed_definitions_name_the_file_and_the_problem(text: str, message: str) -> None:
    with pytest.raises(CategoryDefinitionError, match=message) as info:
        parse_category_definition(Category.MATH, text)
    assert "prompts/categories/math.md" in str(info.value)
