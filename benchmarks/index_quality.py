"""How well the offline index answers category queries: recall@20 and precision@20 against a judged set.

`tests/data/index_judgments.json` holds (category, dataset, relevant?) judgments over the snapshot, labelled
from the records' descriptions: `judgements` lists the datasets a careful engineer would keep for a category,
`not_relevant` the ones judged and not kept. Four rankers answer each category and are scored side by side:

* `substring` — the baseline: a record matches a query word when the word is a case-insensitive substring of
  its id or description; records are ranked by how many query words they match (ties: snapshot order).
* `bm25` — the offline index's SQLite FTS5 BM25 ranking alone (split ids, id/tag weights).
* `hybrid` — BM25 fused with all-MiniLM-L6-v2 embeddings by reciprocal rank fusion (`OfflineIndex.rank`).
* `subagent` — the full deterministic subagent on the hybrid index: its planned queries and the exemplar
  queries, merged, scored on keywords plus semantic similarity to the category's anchors; this is the
  campaign's own top 20.

The three single-query rankers get the category's seed queries and keywords joined into one query (a long
keyword list, BM25's best case), and, in a second table, each seed query alone (short, human-style queries;
the mean over the category's seed queries).
recall@20 = kept ids in the top 20 / min(20, kept ids judged): a category with more than 20 relevant datasets
can at best fill its 20 slots, so that counts as full recall (the JSON also has the uncapped kept / judged);
precision@20 = kept ids in the top 20 / 20 (an unjudged id counts as not relevant, so it is a lower bound);
`judged` says how many of the 20 were judged at all. Run `.venv/bin/python benchmarks/index_quality.py`; results go to
`benchmarks/results/index_quality.{json,md}`.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

from agents.categories import load_category
from agents.search.offline import OfflineIndex
from agents.subagent import run_subagent
from core.types import Category

ROOT = Path(__file__).resolve().parent.parent
JUDGMENTS = ROOT / "tests" / "data" / "index_judgments.json"
RESULTS = ROOT / "benchmarks" / "results"
K = 20
RANKERS = ("substring", "bm25", "hybrid", "subagent")
SEED_RANKERS = ("substring", "bm25", "hybrid")


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
    """Return the one query the single-query rankers get: seed queries and keywords joined."""
    definition = load_category(category)
    return " ".join([*definition.seed_queries, *definition.keywords])


def load_judgments(path: Path = JUDGMENTS) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Return `(relevant, not_relevant)` id sets per category from the judged set."""
    data = json.loads(path.read_text(encoding="utf-8"))
    relevant = {c: set(ids) for c, ids in data["judgements"].items()}
    rejected = {c: set(ids) for c, ids in data.get("not_relevant", {}).items()}
    return relevant, rejected


def score(top: list[str], keep: set[str], judged: set[str]) -> dict[str, float]:
    """Return kept-in-top-k, recall@k, precision@k and judged@k of one ranking."""
    kept = sum(hub_id in keep for hub_id in top)
    return {
        "kept": kept,
        "recall": round(kept / min(K, len(keep)), 3) if keep else 0.0,
        "recall_uncapped": round(kept / len(keep), 3) if keep else 0.0,
        "precision": round(kept / K, 3),
        "judged": sum(hub_id in judged for hub_id in top),
    }


def measure() -> dict:
    index = OfflineIndex.default()
    records = index.records()
    relevant, rejected = load_judgments()
    rows = []
    subagent_s = 0.0
    for category in Category:
        keep = relevant[category.value]
        judged = keep | rejected.get(category.value, set())
        query = category_query(category)
        started = time.perf_counter()
        deliverable = asyncio.run(run_subagent(category, backends=[index]))
        subagent_s += time.perf_counter() - started
        ranked = {
            "substring": substring_rank(records, query, K),
            "bm25": [hub_id for hub_id, _ in index.rank_bm25(query, limit=K)],
            "hybrid": [hub_id for hub_id, _ in index.rank(query, limit=K)],
            "subagent": [c.hub_id for c in deliverable.candidates[:K]],
        }
        row: dict = {
            "category": category.value, "relevant": len(keep), "not_relevant": len(judged - keep), "query": query,
        }
        row.update({name: score(top, keep, judged) for name, top in ranked.items()})
        seeds = load_category(category).seed_queries
        per_seed = {
            "substring": [substring_rank(records, q, K) for q in seeds],
            "bm25": [[h for h, _ in index.rank_bm25(q, limit=K)] for q in seeds],
            "hybrid": [[h for h, _ in index.rank(q, limit=K)] for q in seeds],
        }
        row["seed_queries"] = {
            name: {metric: round(sum(score(top, keep, judged)[metric] for top in tops) / len(tops), 3)
                   for metric in ("recall", "precision")}
            for name, tops in per_seed.items()
        }
        rows.append(row)
    means = {
        name: {metric: round(sum(r[name][metric] for r in rows) / len(rows), 3) for metric in ("recall", "precision")}
        for name in RANKERS
    }
    means["seed_queries"] = {
        name: {metric: round(sum(r["seed_queries"][name][metric] for r in rows) / len(rows), 3)
               for metric in ("recall", "precision")}
        for name in SEED_RANKERS
    }
    judgments = sum(r["relevant"] + r["not_relevant"] for r in rows)
    return {
        "k": K, "snapshot_records": len(records), "judgments": judgments, "retrieval": index.retrieval,
        "subagent_seconds_all_categories": round(subagent_s, 2), "rows": rows, "mean": means,
    }


def markdown(result: dict) -> str:
    lines = [
        f"# Offline index quality (top {result['k']} of {result['snapshot_records']} snapshot records)",
        "",
        f"{result['judgments']} judgments (category, dataset, relevant?) over all ten categories. "
        f"R = recall@20 (kept in top 20 / min(20, kept judged)); P = precision@20 (kept in top 20 / 20, unjudged counted "
        f"as not relevant). Retrieval: {result['retrieval']}.",
        "",
        "| category | kept / judged | substring R | BM25 R | hybrid R | subagent R | substring P | BM25 P | "
        "hybrid P | subagent P |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        recall = " | ".join(f"{r[n]['recall']:.2f}" for n in RANKERS)
        precision = " | ".join(f"{r[n]['precision']:.2f}" for n in RANKERS)
        lines.append(f"| {r['category']} | {r['relevant']} / {r['relevant'] + r['not_relevant']} | {recall} | {precision} |")
    m = result["mean"]
    recall = " | ".join(f"**{m[n]['recall']:.3f}**" for n in RANKERS)
    precision = " | ".join(f"**{m[n]['precision']:.3f}**" for n in RANKERS)
    lines.append(f"| **mean** | | {recall} | {precision} |")
    lines += [
        "",
        "Each seed query alone (mean over the category's seed queries):",
        "",
        "| category | substring R | BM25 R | hybrid R | substring P | BM25 P | hybrid P |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        seed = r["seed_queries"]
        recall = " | ".join(f"{seed[n]['recall']:.2f}" for n in SEED_RANKERS)
        precision = " | ".join(f"{seed[n]['precision']:.2f}" for n in SEED_RANKERS)
        lines.append(f"| {r['category']} | {recall} | {precision} |")
    seed_mean = m["seed_queries"]
    recall = " | ".join(f"**{seed_mean[n]['recall']:.3f}**" for n in SEED_RANKERS)
    precision = " | ".join(f"**{seed_mean[n]['precision']:.3f}**" for n in SEED_RANKERS)
    lines.append(f"| **mean** | {recall} | {precision} |")
    worst = {n: min(r[n]["recall"] for r in result["rows"]) for n in RANKERS}
    lines += [
        "",
        "Lowest per-category recall@20: " + ", ".join(f"{n} {worst[n]:.2f}" for n in RANKERS) + ".",
        f"hybrid / BM25 mean recall@20: **{_ratio(m, 'hybrid', 'bm25'):.2f}×** on the joined keyword query, "
        f"**{_ratio(seed_mean, 'hybrid', 'bm25'):.2f}×** on single seed queries; "
        f"hybrid / substring: **{_ratio(m, 'hybrid', 'substring'):.2f}×**. "
        f"All ten subagents (the campaign's ranking) took {result['subagent_seconds_all_categories']:.1f} s here, "
        "one after another, embedding model load included.",
        "",
    ]
    return "\n".join(lines)


def _ratio(means: dict, ours: str, baseline: str) -> float:
    base = means[baseline]["recall"]
    return means[ours]["recall"] / base if base else float("inf")


def main() -> None:
    result = measure()
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "index_quality.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    text = markdown(result)
    (RESULTS / "index_quality.md").write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
