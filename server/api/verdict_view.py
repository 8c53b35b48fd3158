"""How the verifier's reasons and verdicts read on the review pages: each reason once, labelled with the
categories that gave it; the current verdict per category apart from the history.

A dataset found by five categories carries five verdicts, and often the same reason in each ("no license
stated"); a dataset found again by a later campaign carries the earlier verdicts too. The list shows each
distinct reason once, grouped under the categories that gave it, and a dataset's page shows the latest verdict
of each category, with the older ones (earlier campaigns, re-runs) kept apart as history. Filtered to one
category, the list puts that category's verdict and reasons first (`category_verdict`, `viewed`), and sums a
row's search hits up as "found by N queries, best rank R" (`evidence_summary`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypedDict

from core.types import Category

UNTAGGED = "—"  # a reason stored without the category that gave it (older catalogs)
_ORDER = {c.value: i for i, c in enumerate(Category)}


def _category_key(name: str) -> tuple[int, str]:
    return _ORDER.get(name, len(_ORDER)), name


class ShownReason(TypedDict):
    """One distinct reason as the page shows it (its category is the group's)."""

    code: str
    detail: str
    blocking: bool


class ReasonGroup(TypedDict):
    """The reasons the same categories gave, and how the page labels them."""

    categories: list[str]
    label: str  # "math, tool_use", or "all 3 categories"
    blocking: bool  # one of its reasons blocks
    reasons: list[ShownReason]


def reason_groups(reasons: Iterable[Mapping[str, Any]], categories: Sequence[str] = (), *,
                  viewed: str | None = None) -> list[ReasonGroup]:
    """Return the distinct reasons grouped by the categories that gave them, blocking groups first:
    `[{"categories": [...], "label": "math, tool_use" | "all 3 categories", "blocking": bool,
    "reasons": [{"code", "detail", "blocking"}, ...]}]`.

    A reason is the same when its code, detail and blocking flag are; `categories` (the entry's) lets a
    reason every one of them gave read "all N categories". With `viewed` (the category the list shows), the
    groups that include it come first: another category's reasons (its `off_topic`, typically) follow them,
    behind the row's "show all", instead of leading a row they say nothing about.
    """
    given: dict[tuple[str, str, bool], set[str]] = {}
    for reason in reasons:
        key = (str(reason.get("code", "?")), str(reason.get("detail") or ""), bool(reason.get("blocking")))
        given.setdefault(key, set()).add(str(reason.get("category") or UNTAGGED))
    groups: dict[tuple[str, ...], list[ShownReason]] = {}
    for (code, detail, blocking), cats in given.items():
        names = tuple(sorted(cats, key=_category_key))
        groups.setdefault(names, []).append({"code": code, "detail": detail, "blocking": blocking})
    everyone = set(categories)
    out: list[ReasonGroup] = []
    for names, items in groups.items():
        items.sort(key=lambda r: (not r["blocking"], r["code"], r["detail"]))
        label = f"all {len(names)} categories" if len(names) > 1 and set(names) == everyone else ", ".join(names)
        out.append({"categories": list(names), "label": label, "blocking": any(r["blocking"] for r in items),
                    "reasons": items})
    out.sort(key=lambda g: (viewed is not None and viewed not in g["categories"], not g["blocking"],
                            -len(g["categories"]), [_category_key(c) for c in g["categories"]]))
    return out


def category_verdict(reasons: Iterable[Mapping[str, Any]], category: str) -> str:
    """Return `reject` when a blocking reason of `category`'s verdict is among `reasons`, else `accept`: the
    verifier's verdict for that one category (an entry found by several has one per category)."""
    blocked = any(r.get("blocking") and r.get("category") in (category, None) for r in reasons)
    return "reject" if blocked else "accept"


class EvidenceSummary(TypedDict):
    """What a row says of its search hits: how many queries found it, its best rank, and by which backends."""

    queries: int
    best_rank: int | None
    backends: list[str]
    best_query: str  # the query of the best-ranked hit


def evidence_summary(evidence: Iterable[Mapping[str, Any]]) -> EvidenceSummary:
    """Return the summary of search hits (`{backend, query, rank, …}` each) a row shows instead of the hits."""
    hits = list(evidence)
    ranked = [h for h in hits if isinstance(h.get("rank"), int)]
    best = min(ranked, key=lambda h: int(h["rank"])) if ranked else (hits[0] if hits else {})
    return {"queries": len({str(h.get("query", "")) for h in hits}),
            "best_rank": int(best["rank"]) if ranked else None,
            "backends": sorted({str(h.get("backend", "")) for h in hits if h.get("backend")}),
            "best_query": str(best.get("query", ""))}


def split_current(rows: Sequence[Mapping[str, Any]]) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """Split rows oldest first, each with a `category`, into `(the latest row of each category, in category
    order; every older row, newest first)`: what decides the entry now, and its history."""
    latest: dict[str, Mapping[str, Any]] = {}
    for row in rows:
        latest[str(row["category"])] = row
    current = [latest[c] for c in sorted(latest, key=_category_key)]
    kept = {id(r) for r in current}
    return current, [r for r in reversed(rows) if id(r) not in kept]
