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

Dev and test halves: every dataset id belongs to one half by a hash of its lowercased id (`split_of`), judged
or not. Retrieval and ranking choices are made looking at the dev half only; the test half is the headline.
On a half, recall@20 = that half's kept ids in the top 20 / (that half's kept ids × min(1, 20 / all kept ids)),
so the cap of a category with more than 20 kept ids is shared in proportion (at most 1.0), and precision@20 =
that half's kept ids in the top 20 / the top 20's ids of that half (unjudged ones counted as not relevant).
`subagent_before` scores the campaign's frozen top 20 from before issue #11
(`benchmarks/results/index_quality_before.json`) on the same halves, so the previous method stays comparable.

Batches: `batches` in the judged set names judgments added later (`pass5`, `pass7`: each labelled in its pass before
the subagent's ranking of them was seen). Every batch pair is also in the combined lists. The subagent is scored
side by side: on the old judgments' test half (the combined set less every batch: the figure the passes before the
first batch reported), on each batch alone (recall = the batch's kept ids in the top 20 / (the batch's kept ids ×
min(1, 20 / all kept ids)); precision = the batch's kept ids in the top 20 / the top 20's ids the batch judged), on
each batch's halves, and on the combined set's halves. A category a batch kept nothing for has no recall on it and
is left out of that mean.
"""

from __future__ import annotations

import asyncio
import hashlib
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
BEFORE = RESULTS / "index_quality_before.json"
NOTES = RESULTS / "index_quality_notes.md"  # the hand-written diagnosis, appended to the generated results
AIM_MEAN, AIM_EACH = 0.90, 0.75  # issue #11's aim for the subagent's recall@20 on the test half
RANKERS = ("substring", "bm25", "hybrid", "subagent_before", "subagent")
SEED_RANKERS = ("substring", "bm25", "hybrid")
SPLITS = ("test", "dev", "all")
BATCHES = ("pass5", "pass7")  # judgments added in the fifth and seventh passes, each scored on its own
SIDE_BY_SIDE = ("old_test", *(f"{b}{part}" for b in BATCHES for part in ("", "_dev", "_test")), "dev", "test")


def split_of(hub_id: str) -> str:
    """Return `dev` or `test`: the half a dataset id belongs to, from the first byte of its lowercased id's SHA-256."""
    return "dev" if hashlib.sha256(hub_id.strip().lower().encode("utf-8")).digest()[0] % 2 == 0 else "test"


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


def load_batch(name: str = BATCHES[0], path: Path = JUDGMENTS) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Return `(relevant, not_relevant)` id sets per category of one batch of later judgments."""
    batch = json.loads(path.read_text(encoding="utf-8"))["batches"][name]
    relevant = {c: set(ids) for c, ids in batch["judgements"].items()}
    rejected = {c: set(ids) for c, ids in batch["not_relevant"].items()}
    return relevant, rejected


def score_subset(
    top: list[str], keep: set[str], sub_keep: set[str], sub_judged: set[str], half: str | None = None
) -> dict[str, float | None]:
    """Return recall@k and precision@k of one ranking on a subset of the judgments (a batch), optionally on one half.

    The cap of a category with more kept ids than slots is shared in proportion, as on a half; precision counts only
    the top ids the subset judged, since an unjudged id belongs to no subset. Recall is None where the subset keeps
    nothing (on that half), precision None where it judged none of the top.
    """
    def inside(hub_id: str) -> bool:
        return half is None or split_of(hub_id) == half

    sub_keep = {h for h in sub_keep if inside(h)}
    kept = sum(h in sub_keep for h in top)
    share = len(sub_keep) * min(1.0, K / len(keep)) if keep else 0.0
    judged_top = [h for h in top if h in sub_judged and inside(h)]
    return {
        "kept": kept,
        "kept_judged": len(sub_keep),
        "recall": round(min(1.0, kept / share), 3) if share else None,
        "precision": round(kept / len(judged_top), 3) if judged_top else None,
    }


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(sum(present) / len(present), 3) if present else None


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


def score_half(top: list[str], keep: set[str], half: str) -> dict[str, float]:
    """Return recall@k and precision@k of one ranking on one half (`dev` or `test`), as the module text defines."""
    keep_half = {h for h in keep if split_of(h) == half}
    top_half = [h for h in top if split_of(h) == half]
    kept = sum(h in keep_half for h in top_half)
    share = len(keep_half) * min(1.0, K / len(keep)) if keep else 0.0
    return {
        "kept": kept,
        "kept_judged": len(keep_half),
        "recall": round(min(1.0, kept / share), 3) if share else 0.0,
        "precision": round(kept / len(top_half), 3) if top_half else 0.0,
    }


def load_before(path: Path = BEFORE) -> dict[str, list[str]]:
    """Return the frozen top 20 per category of the subagent before issue #11."""
    top: dict[str, list[str]] = json.loads(path.read_text(encoding="utf-8"))["top"]
    return top


def measure() -> dict:
    index = OfflineIndex.default()
    records = index.records()
    relevant, rejected = load_judgments()
    batches = {name: load_batch(name) for name in BATCHES}
    before = load_before()
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
            "subagent_before": before[category.value][:K],
            "subagent": [c.hub_id for c in deliverable.candidates[:K]],
        }
        row: dict = {
            "category": category.value, "relevant": len(keep), "not_relevant": len(judged - keep), "query": query,
        }
        row.update({name: score(top, keep, judged) for name, top in ranked.items()})
        row["halves"] = {
            half: {name: score_half(top, keep, half) for name, top in ranked.items()} for half in ("dev", "test")
        }
        top = ranked["subagent"]
        all_new: set[str] = set()
        row["side_by_side"] = {}
        row["batch_judgments"] = {}
        for name, (batch_keep, batch_rejected) in batches.items():
            new_keep = batch_keep.get(category.value, set())
            new_judged = new_keep | batch_rejected.get(category.value, set())
            all_new |= new_keep
            row["side_by_side"][name] = score_subset(top, keep, new_keep, new_judged)
            for half in ("dev", "test"):
                row["side_by_side"][f"{name}_{half}"] = score_subset(top, keep, new_keep, new_judged, half)
            row["batch_judgments"][name] = len(new_judged)
        row["side_by_side"]["old_test"] = score_half(top, keep - all_new, "test")
        row["side_by_side"]["dev"] = row["halves"]["dev"]["subagent"]
        row["side_by_side"]["test"] = row["halves"]["test"]["subagent"]
        row["top"] = ranked["subagent"]
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
    for half in ("dev", "test"):
        means[half] = {
            name: {metric: round(sum(r["halves"][half][name][metric] for r in rows) / len(rows), 3)
                   for metric in ("recall", "precision")}
            for name in RANKERS
        }
    means["side_by_side"] = {
        view: {metric: _mean([r["side_by_side"][view][metric] for r in rows]) for metric in ("recall", "precision")}
        for view in SIDE_BY_SIDE
    }
    judgments = sum(r["relevant"] + r["not_relevant"] for r in rows)
    return {
        "k": K, "snapshot_records": len(records), "judgments": judgments, "retrieval": index.retrieval,
        "batches": {name: sum(r["batch_judgments"][name] for r in rows) for name in BATCHES},
        "subagent_seconds_all_categories": round(subagent_s, 2), "rows": rows, "mean": means,
    }


def _cell(result: dict, row: dict, half: str, name: str, metric: str) -> float:
    return float(row[name][metric] if half == "all" else row["halves"][half][name][metric])


def split_tables(result: dict) -> list[str]:
    """Return the Markdown tables of recall@20 and precision@20 per category on the test, dev and all halves."""
    lines: list[str] = []
    for half in SPLITS:
        lines += [
            "",
            f"**{half}**" + (" (the headline: nothing was tuned on it)" if half == "test" else "")
            + (" (every choice was made looking at this half only)" if half == "dev" else "") + ":",
            "",
            "| category | kept | " + " | ".join(f"{n} R" for n in RANKERS) + " | "
            + " | ".join(f"{n} P" for n in RANKERS) + " |",
        ]
        lines.append("|---|---:|" + "---:|" * (2 * len(RANKERS)))
        for r in result["rows"]:
            kept = r["relevant"] if half == "all" else r["halves"][half]["subagent"]["kept_judged"]
            recall = " | ".join(f"{_cell(result, r, half, n, 'recall'):.2f}" for n in RANKERS)
            precision = " | ".join(f"{_cell(result, r, half, n, 'precision'):.2f}" for n in RANKERS)
            lines.append(f"| {r['category']} | {kept} | {recall} | {precision} |")
        m = result["mean"][half] if half != "all" else result["mean"]
        recall = " | ".join(f"**{m[n]['recall']:.3f}**" for n in RANKERS)
        precision = " | ".join(f"**{m[n]['precision']:.3f}**" for n in RANKERS)
        lines.append(f"| **mean** | | {recall} | {precision} |")
        worst = min(_cell(result, r, half, "subagent", "recall") for r in result["rows"])
        lines.append("")
        lines.append(f"Lowest subagent recall@20 on {half}: {worst:.2f}.")
    return lines


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def side_by_side_table(result: dict) -> list[str]:
    """Return the Markdown tables of the subagent's recall@20 and precision@20: old test half, each batch, combined."""
    batches = ", ".join(f"`{name}` ({count} judgments)" for name, count in result["batches"].items())
    lines = [
        "",
        f"**Side by side** (subagent): `old test` = the judgments before any batch, test half (the figure the passes "
        f"before the first batch reported); each batch alone, {batches}, labelled before their ranking was seen "
        "(`dev` / `test` after a batch's name: its halves); `dev` / `test` = the combined set's halves. n/a: the "
        "batch kept nothing there (recall) or judged none of the top 20 there (precision).",
    ]
    for metric, label in (("recall", "recall@20"), ("precision", "precision@20")):
        lines += [
            "",
            f"{label}:",
            "",
            "| category | " + " | ".join(v.replace("_", " ") for v in SIDE_BY_SIDE) + " |",
            "|---|" + "---:|" * len(SIDE_BY_SIDE),
        ]
        for r in result["rows"]:
            cells = r["side_by_side"]
            lines.append(f"| {r['category']} | " + " | ".join(_fmt(cells[v][metric]) for v in SIDE_BY_SIDE) + " |")
        m = result["mean"]["side_by_side"]
        lines.append("| **mean** | " + " | ".join(f"**{_fmt(m[v][metric])}**" for v in SIDE_BY_SIDE) + " |")
    return lines


def markdown(result: dict) -> str:
    lines = [
        f"# Offline index quality (top {result['k']} of {result['snapshot_records']} snapshot records)",
        "",
        f"{result['judgments']} judgments (category, dataset, relevant?) over all ten categories, split into a dev "
        "and a test half by a hash of the dataset id. R = recall@20 (kept in top 20 / min(20, kept judged); on a "
        "half the cap is shared in proportion); P = precision@20 (kept in top 20 / 20, on a half / the top 20's ids "
        "of that half; unjudged counted as not relevant). `subagent_before` is the campaign's frozen top 20 from "
        f"before issue #11, `subagent` the current one. Retrieval: {result['retrieval']}. "
        + ", ".join(f"{count} of the judgments are the `{name}` batch" for name, count in result["batches"].items())
        + " (see the side-by-side tables).",
    ]
    test = [r["halves"]["test"]["subagent"]["recall"] for r in result["rows"]]
    short = [f"{r['category']} {v:.2f}" for r, v in zip(result["rows"], test, strict=True) if v < AIM_EACH]
    mean = result["mean"]["test"]["subagent"]["recall"]
    met = mean >= AIM_MEAN and not short
    lines += [
        "",
        f"Aim (subagent recall@20 on test: mean >= {AIM_MEAN:.2f}, every category >= {AIM_EACH:.2f}): "
        + ("**met**." if met
           else f"**not met**: mean {mean:.3f}"
           + (f"; below {AIM_EACH:.2f}: {', '.join(short)}" if short else "") + "."),
    ]
    lines += side_by_side_table(result)
    lines += split_tables(result)
    m = result["mean"]
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
        "Lowest per-category recall@20 (all): " + ", ".join(f"{n} {worst[n]:.2f}" for n in RANKERS) + ".",
        f"hybrid / BM25 mean recall@20: **{_ratio(m, 'hybrid', 'bm25'):.2f}×** on the joined keyword query, "
        f"**{_ratio(seed_mean, 'hybrid', 'bm25'):.2f}×** on single seed queries; "
        f"hybrid / substring: **{_ratio(m, 'hybrid', 'substring'):.2f}×**. "
        f"All ten subagents (the campaign's ranking) took {result['subagent_seconds_all_categories']:.1f} s here, "
        "one after another, embedding model load included.",
        "",
    ]
    if NOTES.exists():
        lines += [NOTES.read_text(encoding="utf-8").rstrip(), ""]
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
