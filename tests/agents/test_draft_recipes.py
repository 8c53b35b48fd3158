"""Draft-training recipes: the shipped list parses, sources map to recipes, snapshot records carry the signal."""

from __future__ import annotations

import pytest

from agents.draft_recipes import (
    DraftRecipe,
    DraftRecipesError,
    load_draft_recipes,
    parse_draft_recipes,
    recipes_using,
)
from agents.search.offline import OfflineIndex, record_metadata


def test_the_shipped_list_names_at_least_one_recipe_with_an_owner_and_a_repo() -> None:
    recipes = load_draft_recipes()
    assert recipes and all(r.repo.count("/") == 1 and r.label for r in recipes)


def test_a_source_belongs_to_a_recipe_only_inside_its_repository() -> None:
    recipe = DraftRecipe(repo="org/Recipe", label="Recipe")
    assert recipes_using(["host:org/recipe/scripts/prepare_data.py"], [recipe]) == ["Recipe"]
    assert recipes_using(["org/Recipe"], [recipe]) == ["Recipe"]
    assert recipes_using(["host:org/RecipeBook/README.md", "host:other/Recipe/x"], [recipe]) == []
    assert recipes_using(["host:org/Recipe/a", "host:org/Recipe/b"], [recipe]) == ["Recipe"]  # once


def test_a_malformed_list_fails_with_the_line() -> None:
    with pytest.raises(DraftRecipesError, match="no '## Recipes' section"):
        parse_draft_recipes("# Recipes\n- org/repo: x\n")
    with pytest.raises(DraftRecipesError, match="malformed recipe line"):
        parse_draft_recipes("## Recipes\n- not a repo\n")
    assert parse_draft_recipes("## Recipes\n- a/b: B (details)\n\n## Other\n- junk\n") == (DraftRecipe("a/b", "B"),)


def test_snapshot_records_a_draft_recipe_uses_carry_it_and_others_do_not() -> None:
    index = OfflineIndex.default()
    used = {r["id"] for r in index.records() if any("SpecForge" in s for s in r.get("source") or [])}
    assert {"sahil2801/CodeAlpaca-20k", "HuggingFaceH4/ultrachat_200k"} <= used
    for record in index.records():
        expected = ["SpecForge"] if record["id"] in used else []
        assert record_metadata(record).draft_recipes == expected, record["id"]


def test_sources_given_as_a_generator_reach_every_recipe() -> None:
    recipes = [DraftRecipe(repo="org/first", label="First"), DraftRecipe(repo="org/second", label="Second")]
    sources = (s for s in ["host:org/second/README.md"])  # as the offline index passes them
    assert recipes_using(sources, recipes) == ["Second"]
