"""Every LLM prompt of datahunt, one file per use, and the one small loader that reads them.

Prompts live beside this module as `<agent>/<node>.md` Jinja templates with named placeholders
(`{{ category }}`). `render_prompt` fails on a missing placeholder value and on a value the template never
uses, so a prompt and its caller cannot drift apart silently. Category definitions
(`categories/<name>.md`) and rules (`rules/<name>.md`: the benchmark rule's patterns and penalties) are data
read by the agents, not templates.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

import jinja2
from jinja2 import meta

_ENV = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)


class PromptFileError(ValueError):
    """A prompt is missing, or was rendered with missing or unused values."""


def _root() -> resources.abc.Traversable:
    return resources.files(__name__)


def prompt_names() -> list[str]:
    """Return every template name (`agent/node`, without `.md`), excluding category definitions and rules."""
    names: list[str] = []
    for folder in _root().iterdir():
        if not folder.is_dir() or folder.name in {"categories", "rules", "__pycache__"}:
            continue
        names.extend(f"{folder.name}/{f.name[:-3]}" for f in folder.iterdir() if f.name.endswith(".md"))
    return sorted(names)


@lru_cache(maxsize=128)
def load_prompt(name: str) -> str:
    """Return the raw text of prompt `name` (`agent/node`, `categories/<category>` or `rules/<rule>`)."""
    path = _root().joinpath(*f"{name}.md".split("/"))
    if not path.is_file():
        raise PromptFileError(f"no prompt named {name!r}")
    return path.read_text(encoding="utf-8")


def placeholders(name: str) -> set[str]:
    """Return the names of the placeholders prompt `name` expects."""
    return set(meta.find_undeclared_variables(_ENV.parse(load_prompt(name))))


def render_prompt(name: str, **values: object) -> str:
    """Return prompt `name` rendered with `values`; raise PromptFileError on a missing or unused value."""
    expected = placeholders(name)
    missing = expected - values.keys()
    unused = values.keys() - expected
    if missing or unused:
        raise PromptFileError(f"prompt {name!r}: missing values {sorted(missing)}, unused values {sorted(unused)}")
    return _ENV.from_string(load_prompt(name)).render(**values)


def seed_topics(category: str) -> list[str]:
    """Return the seed topic lines of a category (`seed_topics/<category>.md`, the `- …` items under `## Topics`)."""
    text = load_prompt(f"seed_topics/{category}")
    section = text.split("## Topics", 1)[1] if "## Topics" in text else ""
    return [line[2:].strip() for line in section.splitlines() if line.startswith("- ") and line[2:].strip()]
