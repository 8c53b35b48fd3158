"""Word splitting shared by the offline index and the scorer: Hub ids and free text to lowercase terms.

Hub ids glue words together in many ways (`code-review`, `code_review`, `CodeReviewer`, `gsm8k`), while people
search with spaced words. `split_terms` breaks text on punctuation, camel case and letter/digit boundaries so
both sides meet on the same terms; `light_stem` folds plural and -ing/-ed endings for matching outside SQLite.
Mixed-case acronyms (`MIXED_CASE_ACRONYMS`: `CoT`, `SQuAD`, …) stay whole, so `LogiCoT` is `logi cot`, not
`logi co t`: all-caps ones (`SWE`, `SQL`, `QA`) already do. The offline index's shipped document vectors embed
split ids, so changing the list means rebuilding them (`python -m agents.search.build_vectors`).
"""

from __future__ import annotations

import re
from functools import lru_cache

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
# Acronyms written in mixed case in dataset names; camel-case splitting would cut them into meaningless pieces.
MIXED_CASE_ACRONYMS = ("CoT", "PoT", "ToT", "CoQA", "SQuAD", "LLaMA", "LLaVA")
_CAMEL = re.compile(
    "(?:" + "|".join(MIXED_CASE_ACRONYMS) + r")s?(?![a-z])|[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+"
)

STOPWORDS = frozenset(
    ["a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "in", "into", "is", "it", "of", "on", "or", "the", "to", "with", "dataset", "datasets", "data", "hf", "huggingface", "co", "https", "http", "www"]
)


def split_terms(text: str) -> list[str]:
    """Return the lowercase terms of `text`: words, camel-case parts and digit runs, in order, repeats kept."""
    terms: list[str] = []
    for word in _WORD.findall(text):
        parts = _CAMEL.findall(word) if word.isascii() else [word]
        if len(parts) > 1:
            terms.append(word.lower())
        terms.extend(part.lower() for part in parts if part)
    return terms


def query_terms_repeated(text: str) -> list[str]:
    """Return the meaningful terms of a query in order, repeats kept (stopwords and one-letter words dropped)."""
    return [term for term in split_terms(text) if len(term) > 1 and term not in STOPWORDS]


def query_terms(text: str) -> list[str]:
    """Return the distinct, meaningful terms of a query (stopwords and one-letter words dropped)."""
    return list(dict.fromkeys(query_terms_repeated(text)))


@lru_cache(maxsize=65_536)
def light_stem(term: str) -> str:
    """Return `term` without a common English inflection (`reviews`→`review`, `calling`→`call`)."""
    for suffix, keep in (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", "")):
        if term.endswith(suffix) and len(term) - len(suffix) >= 3 and not term.endswith("ss"):
            return term[: len(term) - len(suffix)] + keep
    return term


_FILTER = re.compile(
    r"^(task_categories|task_ids|language|license|size_categories|modality|format|library|benchmark):[\w.+<>=-]+$"
)


def split_filters(query: str) -> tuple[str, list[str]]:
    """Return `(text, hub_filters)`: Hub tag filters such as `task_categories:text-generation` taken out of `query`.

    Only the Hub backend applies the filters; other backends search the remaining text alone.
    """
    words = query.split()
    filters = [w for w in words if _FILTER.match(w)]
    return " ".join(w for w in words if not _FILTER.match(w)), filters
