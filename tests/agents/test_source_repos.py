"""Source repositories: the shipped lists parse, sources map to recipes and media libraries, snapshot records
carry the signals."""

from __future__ import annotations

import pytest

from agents.dataset_kind import multimodal_evidence
from agents.search.offline import OfflineIndex, record_metadata
from agents.source_repos import (
    SourceListError,
    SourceRepo,
    load_draft_recipes,
    load_media_libraries,
    media_libraries_of,
    parse_source_list,
    recipes_using,
)
from core.candidates import Candidate
from core.types import Category


def test_the_shipped_list_names_at_least_one_recipe_with_an_owner_and_a_repo() -> None:
    recipes = load_draft_recipes()
    assert recipes and all(r.repo.count("/") == 1 and r.label for r in recipes)


def test_a_source_belongs_to_a_recipe_only_inside_its_repository() -> None:
    recipe = SourceRepo(repo="org/Recipe", label="Recipe")
    assert recipes_using(["host:org/recipe/scripts/prepare_data.py"], [recipe]) == ["Recipe"]
    assert recipes_using(["org/Recipe"], [recipe]) == ["Recipe"]
    assert recipes_using(["host:org/RecipeBook/README.md", "host:other/Recipe/x"], [recipe]) == []
    assert recipes_using(["host:org/Recipe/a", "host:org/Recipe/b"], [recipe]) == ["Recipe"]  # once


def test_a_malformed_list_fails_with_the_line() -> None:
    with pytest.raises(SourceListError, match="no '## Recipes' section"):
        parse_source_list("# Recipes\n- org/repo: x\n", "Recipes")
    with pytest.raises(SourceListError, match="malformed source line"):
        parse_source_list("## Recipes\n- not a repo\n", "Recipes")
    assert parse_source_list("## Recipes\n- a/b: B (details)\n\n## Other\n- junk\n", "Recipes") == (
        SourceRepo("a/b", "B"),)


def test_snapshot_records_a_draft_recipe_uses_carry_it_and_others_do_not() -> None:
    index = OfflineIndex.default()
    used = {r["id"] for r in index.records() if any("SpecForge" in s for s in r.get("source") or [])}
    assert {"sahil2801/CodeAlpaca-20k", "HuggingFaceH4/ultrachat_200k"} <= used
    for record in index.records():
        expected = ["SpecForge"] if record["id"] in used else []
        assert record_metadata(record).draft_recipes == expected, record["id"]


def test_sources_given_as_a_generator_reach_every_recipe() -> None:
    recipes = [SourceRepo(repo="org/first", label="First"), SourceRepo(repo="org/second", label="Second")]
    sources = (s for s in ["host:org/second/README.md"])  # as the offline index passes them
    assert recipes_using(sources, recipes) == ["Second"]


def test_the_shipped_media_libraries_parse() -> None:
    libraries = load_media_libraries()
    assert {r.repo for r in libraries} >= {"huggingface/diffusers", "huggingface/lerobot"}
    assert all(r.repo.count("/") == 1 and r.label for r in libraries)


def test_datasets_a_media_library_documents_look_multimodal_and_text_sets_do_not() -> None:
    """An image-generation library's DPO example set (its record is a documentation snippet about GitHub issues)
    and a LeRobot recording read like nothing multimodal; their sources say what they hold."""
    index = OfflineIndex.default()
    for hub_id, label in (("kashif/pickascore", "diffusers"), ("lerobot/libero", "LeRobot"),
                          ("mozilla-foundation/common_voice_13_0", "the Hugging Face audio course")):
        metadata = record_metadata(index.record(hub_id))
        assert metadata.media_libraries == [label], hub_id
        found = multimodal_evidence(Candidate(hub_id=hub_id, categories=[Category.MATH], metadata=metadata))
        assert found == (f"the documentation of {label} names it", False), hub_id
    for record in index.records():  # no record of a text source is caught: SpecForge's, lm-eval's, the lists'
        sources = record.get("source") or []
        if not media_libraries_of(sources):
            assert record_metadata(record).media_libraries == []
    assert media_libraries_of(["github:huggingface/datasets/docs/source/image_load.mdx"]) == []
