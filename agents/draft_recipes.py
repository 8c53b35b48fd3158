"""Draft-training recipes: open projects that train speculative-decoding drafts and name their training sets.

The recipes are listed in `prompts/sources/draft_recipes.md` (one `- owner/repo: label` line each). A snapshot
record's `source` says where the record was found (`<host>:<owner>/<repo>/<path>`); when that is one of the
recipes, the set is already in a draft trainer's mix: a quality signal the verifier notes on the verdict. The
signal names no category, so the scorer leaves it out (a boost for it lowered dev precision and left recall
unchanged: benchmarks/results/index_quality_notes.md, fifth pass).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from prompts import load_prompt

_LINE = re.compile(r"^- (?P<repo>[\w.-]+/[\w.-]+): (?P<label>.+)$")


class DraftRecipesError(ValueError):
    """The recipe list is missing its `## Recipes` section or holds a malformed line."""


@dataclass(frozen=True)
class DraftRecipe:
    """One recipe: the repository its sources name and a short label for reasons and verdicts."""

    repo: str
    label: str

    def names(self, source: str) -> bool:
        """Return whether `source` (`<host>:<owner>/<repo>/<path>` or `<owner>/<repo>/<path>`) is in this repo."""
        path = source.split(":", 1)[-1].strip().lower()
        repo = self.repo.lower()
        return path == repo or path.startswith(f"{repo}/")


def parse_draft_recipes(text: str) -> tuple[DraftRecipe, ...]:
    """Return the recipes of the `## Recipes` section of `text`; raise DraftRecipesError when malformed."""
    section = re.search(r"^## Recipes\s*$(?P<body>.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    if section is None:
        raise DraftRecipesError("the draft recipe list has no '## Recipes' section")
    recipes = []
    for line in section["body"].splitlines():
        line = line.strip()
        if not line:
            continue
        match = _LINE.match(line)
        if match is None:
            raise DraftRecipesError(f"malformed recipe line {line!r}: expected '- owner/repo: label'")
        recipes.append(DraftRecipe(repo=match["repo"], label=match["label"].split(" (")[0].strip()))
    return tuple(recipes)


@lru_cache(maxsize=1)
def load_draft_recipes() -> tuple[DraftRecipe, ...]:
    """Return the shipped recipe list (`prompts/sources/draft_recipes.md`)."""
    return parse_draft_recipes(load_prompt("sources/draft_recipes"))


def recipes_using(sources: Iterable[str], recipes: Iterable[DraftRecipe] | None = None) -> list[str]:
    """Return the labels of the recipes (default: the shipped list) that any of `sources` belongs to, in order."""
    listed = tuple(recipes) if recipes is not None else load_draft_recipes()
    given = list(sources)  # read once per recipe: a generator would be spent after the first
    found = [recipe.label for recipe in listed if any(recipe.names(s) for s in given)]
    return list(dict.fromkeys(found))
