"""How well the offline index answers category queries: kept-in-top-20 and recall@20 against a judged set.

For each of the ten categories, the hand-labelled set `tests/data/index_judgments.json` lists the snapshot
datasets a careful engineer would keep. Three rankers answer the same category and are scored side by side:

* `substring` — the baseline: a record matches a query word when the word is a case-insensitive substring of
  its id or description; records are ranked by how many query words they match (ties: snapshot order).
* `fts5` — the offline index (SQLite FTS5, BM25 with id/tag weights, split ids) on the same query text.
* `subagent` — the full deterministic subagent on the offline index (its planned queries, merged and scored).

Both single-query rankers get the category's seed queries and keywords joined into one query; a second table
gives them the first seed query alone (a short, human-style query). Run:
`.venv/bin/python benchmarks/index_quality.py`; results go to `benchmarks/results/index_quality.{json,md}`.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

from agents.categories import load_category
from agents.search.offline import OfflineIndex
from agents.subagent import run_subagent
from core.types import Category

ROOT = Path(__file__).resolve().parent.parent
JUDGMENTS = ROOT / "tests" / "data" / "index_judgments.json"
RESULTS = ROOT / "benchmarks" / "results"
K = 20
RANKERS = ("substring", "fts5", "subagent", "substring_seed", "fts5_seed")


def substring_rank(records: list[dict], query: str, k: int) -> list[str]:
    """Return the top `k` ids by number of query words found as substrings of id + description."""
    words = sorted({w for w in re.findall(r"\w+", query.lower()) if len(w) > 1})
    scored = []
    for order, record in enumerate(records):
        text = f"{record['id']} {record.get('description') or ''}".lower()
        matches = sum(word in text for word in words)
        if matches:
            scored.append((-matches, order, record["id"]))
    return [hub_id for _, _, hub_id in sorted(scored)[:k]]


def category_query(category: Category) -> str:
    definition = load_category(category)
    return " ".join([*definition.seed_queries, *definition.keywords])


def measure() -> dict:
    index = OfflineIndex.default()
    records = index.records()
    judged = json.loads(JUDGMENTS.read_text(encoding="utf-8"))["judgements"]
    rows = []
    for category in Category:
        keep = set(judged[category.value])
        query = category_query(category)
        deliverable = asyncio.run(run_subagent(category, backends=[index]))
        ranked = {
            "substring": substring_rank(records, query, K),
            "fts5": [hub_id for hub_id, _ in index.rank(query, limit=K)],
            "subagent": [c.hub_id for c in deliverable.candidates[:K]],
        }
        seed = load_category(category).seed_queries[0]
        ranked["substring_seed"] = substring_rank(records, seed, K)
        ranked["fts5_seed"] = [hub_id for hub_id, _ in index.rank(seed, limit=K)]
        row: dict = {"category": category.value, "judged": len(keep), "query": query, "seed_query": seed}
        for name, top in ranked.items():
            kept = sum(hub_id in keep for hub_id in top)
            row[name] = {"kept_in_top20": kept, "recall_at_20": round(kept / len(keep), 3)}
        rows.append(row)
    means = {
        name: {
            "kept_in_top20": round(sum(r[name]["kept_in_top20"] for r in rows) / len(rows), 2),
            "recall_at_20": round(sum(r[name]["recall_at_20"] for r in rows) / len(rows), 3),
        }
        for name in RANKERS
    }
    return {"k": K, "snapshot_records": len(records), "rows": rows, "mean": means}


def markdown(result: dict) -> str:
    lines = [
        f"# Offline index quality (top {result['k']} of {result['snapshot_records']} snapshot records)",
        "",
        "Kept = judged-relevant ids in the top 20; recall@20 = kept / judged. Same query text for substring and fts5.",
        "",
        "| category | judged | substring kept | fts5 kept | subagent kept | substring R@20 | fts5 R@20 | subagent R@20 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['category']} | {r['judged']} | {r['substring']['kept_in_top20']} | {r['fts5']['kept_in_top20']} | "
            f"{r['subagent']['kept_in_top20']} | {r['substring']['recall_at_20']:.2f} | {r['fts5']['recall_at_20']:.2f} | "
            f"{r['subagent']['recall_at_20']:.2f} |"
        )
    m = result["mean"]
    lines.append(
        f"| **mean** | | {m['substring']['kept_in_top20']} | {m['fts5']['kept_in_top20']} | {m['subagent']['kept_in_top20']} | "
        f"{m['substring']['recall_at_20']:.3f} | {m['fts5']['recall_at_20']:.3f} | {m['subagent']['recall_at_20']:.3f} |"
    )
    lines += [
        "",
        "First seed query alone:",
        "",
        "| category | seed query | substring kept | fts5 kept | substring R@20 | fts5 R@20 |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['category']} | {r['seed_query']} | {r['substring_seed']['kept_in_top20']} | "
            f"{r['fts5_seed']['kept_in_top20']} | {r['substring_seed']['recall_at_20']:.2f} | "
            f"{r['fts5_seed']['recall_at_20']:.2f} |"
        )
    lines.append(
        f"| **mean** | | {m['substring_seed']['kept_in_top20']} | {m['fts5_seed']['kept_in_top20']} | "
        f"{m['substring_seed']['recall_at_20']:.3f} | {m['fts5_seed']['recall_at_20']:.3f} |"
    )
    lines += [
        "",
        f"fts5 / substring mean recall@20: **{_ratio(m, 'fts5', 'substring'):.2f}×** (category query), "
        f"**{_ratio(m, 'fts5_seed', 'substring_seed'):.2f}×** (first seed query)",
        "",
    ]
    return "\n".join(lines)


def _ratio(means: dict, ours: str, baseline: str) -> float:
    base = means[baseline]["recall_at_20"]
    return means[ours]["recall_at_20"] / base if base else float("inf")


def main() -> None:
    result = measure()
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "index_quality.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    text = markdown(result)
    (RESULTS / "index_quality.md").write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
