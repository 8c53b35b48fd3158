"""Category definitions: what each of the ten categories means and how to search for it.

A definition is data, not code: `prompts/categories/<name>.md` holds a description, what a good dataset looks
like, exemplar descriptions of good datasets (semantic anchors for retrieval and scoring; never dataset ids),
seed queries, ranking keywords, optional Hub task filters, optional domain terms and optional specialised terms (the
domains a general category leaves to others), in fixed Markdown sections. This module
parses one file into a `CategoryDefinition` and fails with a message naming the file and the section when a
file is missing or malformed, so a new category is one new file.
"""

from __future__ import annotations

import re
from functools import lru_cache

from pydantic import BaseModel, Field

from agents.errors import AgentError
from core.types import Category
from prompts import PromptFileError, load_prompt

_SECTIONS = {
    "description": "Description",
    "good_dataset": "A good dataset",
    "exemplars": "Exemplars",
    "seed_queries": "Seed queries",
    "keywords": "Keywords",
    "hub_task_filters": "Hub task filters",
    "domain_terms": "Domain terms",
    "specialised_terms": "Specialised terms",
}
_REQUIRED = ("description", "good_dataset", "exemplars", "seed_queries", "keywords")
_LIST_FIELDS = {"exemplars", "seed_queries", "keywords", "hub_task_filters", "domain_terms", "specialised_terms"}


class CategoryDefinitionError(AgentError, ValueError):
    """A category definition file is missing or does not follow the expected sections."""


class CategoryDefinition(BaseModel):
    """One category as the subagent sees it."""

    category: Category
    description: str = Field(description="What data of this category is.")
    good_dataset: str = Field(description="What a dataset worth keeping looks like.")
    exemplars: list[str] = Field(
        description="Descriptions of datasets a careful engineer would keep: the category's semantic anchors."
    )
    seed_queries: list[str] = Field(description="Queries every search for this category starts from.")
    keywords: list[str] = Field(description="Words whose presence marks a dataset as on-topic.")
    hub_task_filters: list[str] = Field(
        default_factory=list, description="Hub `filter=` values, e.g. task_categories:…"
    )
    domain_terms: list[str] = Field(
        default_factory=list,
        description="Words of the category's domain (code, for the five code categories): a candidate whose id, "
        "tags and description hold none of them reads like the category only by accident (a news summarization "
        "set for code explanation) and ranks below those that do. Empty: no domain check.",
    )
    specialised_terms: list[str] = Field(
        default_factory=list,
        description="Words naming a specialised domain outside the category (code, math, tool calling, for general "
        "chat): a candidate whose id or tags hold one of them is a specialised set that another category serves, "
        "and ranks below general ones. Empty: no such check.",
    )


def parse_category_definition(category: Category, text: str) -> CategoryDefinition:
    """Return the definition parsed from Markdown `text`; raise CategoryDefinitionError when malformed."""
    where = f"prompts/categories/{category.value}.md"
    lines = text.splitlines()
    title = next((line for line in lines if line.strip()), "")
    if title.strip() != f"# {category.value}":
        raise CategoryDefinitionError(
            f"{where}: first line must be '# {category.value}', found {title.strip()!r}"
        )
    sections: dict[str, list[str]] = {}
    current: str | None = None
    for line in lines:
        heading = re.match(r"^##\s+(.+?)\s*$", line)
        if heading:
            current = heading.group(1).strip().lower()
            if current in sections:
                raise CategoryDefinitionError(f"{where}: section '## {heading.group(1)}' appears twice")
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
    values: dict[str, object] = {"category": category}
    for field, heading_text in _SECTIONS.items():
        body = sections.get(heading_text.lower())
        if body is None:
            if field in _REQUIRED:
                raise CategoryDefinitionError(f"{where}: missing section '## {heading_text}'")
            continue
        values[field] = (
            _parse_list(where, heading_text, body)
            if field in _LIST_FIELDS
            else " ".join(line.strip() for line in body if line.strip())
        )
        if field in _REQUIRED and not values[field]:
            raise CategoryDefinitionError(f"{where}: section '## {heading_text}' is empty")
    return CategoryDefinition.model_validate(values)


def _parse_list(where: str, heading: str, body: list[str]) -> list[str]:
    items: list[str] = []
    for line in body:
        text = line.strip()
        if not text:
            continue
        if not text.startswith(("- ", "* ")):
            raise CategoryDefinitionError(
                f"{where}: section '## {heading}' must be a bullet list, found {text!r}"
            )
        item = text[2:].strip()
        if item and item.lower() not in (i.lower() for i in items):
            items.append(item)
    return items


@lru_cache(maxsize=32)
def load_category(category: Category) -> CategoryDefinition:
    """Return the parsed definition of `category` from `prompts/categories/<name>.md`."""
    try:
        text = load_prompt(f"categories/{category.value}")
    except PromptFileError:
        raise CategoryDefinitionError(f"no definition file prompts/categories/{category.value}.md") from None
    return parse_category_definition(category, text)


def semantic_anchors(definition: CategoryDefinition) -> list[str]:
    """Return the texts that say what the category means: its description, then each exemplar."""
    return [definition.description, *definition.exemplars]
