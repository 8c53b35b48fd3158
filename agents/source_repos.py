"""Repositories a snapshot record was found in, and what that says about the dataset.

A snapshot record's `source` says where the record was found (`<host>:<owner>/<repo>/<path>`). Two shipped lists
(`prompts/sources/*.md`, one `- owner/repo: label` line each under a fixed `## …` heading) turn a source into a
signal:

* **draft-training recipes** (`draft_recipes.md`, `## Recipes`): open projects that train speculative-decoding
  drafts and name their training sets. A set found there is already in a draft trainer's mix: a quality signal
  the verifier notes on the verdict. It names no category, so the scorer leaves it out (a boost for it lowered
  dev precision and left recall unchanged: benchmarks/results/index_quality_notes.md, fifth pass).
* **media libraries** (`media_libraries.md`, `## Libraries`): documentation of libraries for image generation,
  robot learning and audio, whose example datasets hold images, video, robot recordings or sound. A set found
  there looks multimodal (`agents/dataset_kind.py`): a text target's draft cannot learn from it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from agents.errors import AgentError
from prompts import load_prompt

_LINE = re.compile(r"^- (?P<repo>[\w.-]+/[\w.-]+): (?P<label>.+)$")


class SourceListError(AgentError, ValueError):
    """A source list is missing its `## …` section or holds a malformed line."""


@dataclass(frozen=True)
class SourceRepo:
    """One listed repository: the repo its sources name and a short label for reasons and verdicts."""

    repo: str
    label: str

    def names(self, source: str) -> bool:
        """Return whether `source` (`<host>:<owner>/<repo>/<path>` or `<owner>/<repo>/<path>`) is in this repo."""
        path = source.split(":", 1)[-1].strip().lower()
        repo = self.repo.lower()
        return path == repo or path.startswith(f"{repo}/")


def parse_source_list(text: str, section: str) -> tuple[SourceRepo, ...]:
    """Return the repositories of the `## {section}` section of `text`; raise SourceListError when malformed."""
    found = re.search(rf"^## {re.escape(section)}\s*$(?P<body>.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    if found is None:
        raise SourceListError(f"the source list has no '## {section}' section")
    repos = []
    for line in found["body"].splitlines():
        line = line.strip()
        if not line:
            continue
        match = _LINE.match(line)
        if match is None:
            raise SourceListError(f"malformed source line {line!r}: expected '- owner/repo: label'")
        repos.append(SourceRepo(repo=match["repo"], label=match["label"].split(" (")[0].strip()))
    return tuple(repos)


@lru_cache(maxsize=1)
def load_draft_recipes() -> tuple[SourceRepo, ...]:
    """Return the shipped draft-training recipes (`prompts/sources/draft_recipes.md`)."""
    return parse_source_list(load_prompt("sources/draft_recipes"), "Recipes")


@lru_cache(maxsize=1)
def load_media_libraries() -> tuple[SourceRepo, ...]:
    """Return the shipped media libraries (`prompts/sources/media_libraries.md`)."""
    return parse_source_list(load_prompt("sources/media_libraries"), "Libraries")


def repos_naming(sources: Iterable[str], repos: Iterable[SourceRepo]) -> list[str]:
    """Return the labels of the `repos` that any of `sources` belongs to, in list order, each once."""
    given = list(sources)  # read once per repo: a generator would be spent after the first
    found = [repo.label for repo in repos if any(repo.names(s) for s in given)]
    return list(dict.fromkeys(found))


def recipes_using(sources: Iterable[str], recipes: Iterable[SourceRepo] | None = None) -> list[str]:
    """Return the labels of the draft-training recipes (default: the shipped list) any of `sources` belongs to."""
    return repos_naming(sources, recipes if recipes is not None else load_draft_recipes())


def media_libraries_of(sources: Iterable[str], libraries: Iterable[SourceRepo] | None = None) -> list[str]:
    """Return the labels of the media libraries (default: the shipped list) any of `sources` belongs to."""
    return repos_naming(sources, libraries if libraries is not None else load_media_libraries())
