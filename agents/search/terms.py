"""Word splitting shared by the offline index and the scorer: Hub ids and free text to lowercase terms.

Hub ids glue words together in many ways (`code-review`, `code_review`, `CodeReviewer`, `gsm8k`), while people
search with spaced words. `split_terms` breaks text on punctuation, camel case and letter/digit boundaries so
both sides meet on the same terms; `light_stem` folds plural, -ing/-ed and silent-e endings for matching outside SQLite.
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
    ["a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "in", "into", "is", "it", "of", "on", "or",
     "the", "to", "with", "dataset", "datasets", "data", "hf", "huggingface", "co", "https", "http", "www"]
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


# "-es" is the inflection only after these endings (boxes, patches, classes); elsewhere (issues, codes, traces) the
# word ends in "e" and only the "s" is.
_ES_AFTER = ("ss", "x", "z", "ch", "sh")


@lru_cache(maxsize=65_536)
def light_stem(term: str) -> str:
    """Return `term` without a common English inflection (`reviews`→`review`, `calling`→`call`, `patches`→`patch`).

    A final silent "e" goes too, so a word meets its inflections (`issue`/`issues`, `resolve`/`resolved`,
    `code`/`coding` all become `issu`, `resolv`, `cod`), and a "-ction" noun meets its verb (`instruction` and
    `Instruct`, as ids write it, both become `instruct`).
    """
    stem = term
    for suffix, keep in (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", "")):
        if not term.endswith(suffix) or len(term) - len(suffix) < 3 or term.endswith("ss"):
            continue
        if suffix == "es" and not term[:-2].endswith(_ES_AFTER):
            continue  # `issues`: only the "s" is the plural
        stem = term[: len(term) - len(suffix)] + keep
        break
    if stem.endswith("ction"):
        stem = stem[:-3]
    if stem.endswith("e") and len(stem) >= 4:
        stem = stem[:-1]
    return stem


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
