"""The deterministic query planner: a category's seed queries, then its uncovered keywords, without an LLM.

Seed queries come first (they are written to find the best-known datasets), then the first seed query with
the category's first Hub task filter (`task_categories:…`, applied by the Hub backend only), then each keyword
no seed query mentions, as a query of its own (a single distinctive word such as `codesearchnet` is also what
the Hub's id search matches best), then pairs of keywords, so `max_queries` above the seed count still widens
the search.
"""

from __future__ import annotations

from agents.categories import CategoryDefinition


def plan_queries_deterministic(
    definition: CategoryDefinition, max_queries: int, *, hub_filters: bool = True
) -> list[str]:
    """Return up to `max_queries` distinct queries for `definition`, seed queries first.

    `hub_filters=False` leaves out the filtered query (no Hub backend would apply the filter).
    """
    queries: list[str] = []

    def add(query: str) -> None:
        text = " ".join(query.split())
        if text and text.lower() not in (q.lower() for q in queries):
            queries.append(text)

    for seed in definition.seed_queries:
        add(seed)
    for hub_filter in (
        definition.hub_task_filters[:1] if hub_filters else []
    ):  # the Hub applies it; other backends drop it
        add(f"{definition.seed_queries[0]} {hub_filter}")
    seed_words = {word for seed in definition.seed_queries for word in seed.lower().split()}
    for keyword in definition.keywords:
        if keyword.lower() not in seed_words:
            add(keyword)
    keywords = definition.keywords
    for i, first in enumerate(keywords):
        for second in keywords[i + 1 :]:
            if len(queries) >= max_queries:
                return queries[:max_queries]
            if not any(first in q.lower() and second in q.lower() for q in queries):
                add(f"{first} {second}")
    return queries[: max(0, max_queries)]
