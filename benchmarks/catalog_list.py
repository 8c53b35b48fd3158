"""How fast the catalog answers a review page: `list_entries` ranked in SQL against loading every entry.

A catalog of N entries (each found for one to three of the ten categories, with per-category relevance) is
built through the store on SQLite and, when the machine's PostgreSQL answers on 127.0.0.1:5432, in a private
schema there. Two ways to get page 1 (50 entries) of one category, best first by that category's relevance,
plus its total, are timed side by side in the same run:

* `store` — `store.list_entries(category=…, limit=50)`: filter, order by the JSON relevance and count in SQL.
* `load_all` — the baseline: load every entry through the ORM, filter and sort in Python, slice the page.

Both must return the same page (checked). A text search page (`text=…`) is timed the same way. Run:
`.venv/bin/python benchmarks/catalog_list.py`; results go to `benchmarks/results/catalog_list.{json,md}`.
"""

from __future__ import annotations

import json
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlmodel import select

from core.types import Category
from curation.catalog import store
from curation.catalog.models import CatalogEntry

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
ENTRIES = 3000
PAGE = 50
REPEATS = 15
PG_ADMIN = "host=127.0.0.1 port=5432 user=postgres dbname=test connect_timeout=3"
CATEGORIES = [c.value for c in Category]
WORDS = ["code", "review", "math", "proof", "chat", "agent", "tool", "commit", "diff", "reason", "bug", "python"]


def seed(engine: Any, rng: random.Random) -> float:
    """Fill the catalog through the store; return the seconds it took."""
    start = time.perf_counter()
    with store.open_session(engine) as session:
        campaign = store.create_campaign(session, categories=CATEGORIES, offline=True, backends=["offline"])
        runs = {c: store.start_run(session, campaign_id=campaign.id, category=c).id for c in CATEGORIES}
        for index in range(ENTRIES):
            hub_id = f"org{index % 97}/dataset-{index}"
            title = " ".join(rng.sample(WORDS, 3))
            for category in rng.sample(CATEGORIES, rng.randint(1, 3)):
                run_id = runs[category]
                assert run_id is not None
                record = store.add_candidate(
                    session, campaign_id=campaign.id, run_id=run_id, category=category,
                    candidate={"hub_id": hub_id, "title": title, "relevance": round(rng.random(), 4),
                               "metadata": {"license": rng.choice(["mit", "apache-2.0", "cc-by-4.0", None])}},
                )
                store.upsert_entry(session, candidate=record, decision="accept", reasons=[])
    return time.perf_counter() - start


def page_store(engine: Any, **filters: Any) -> tuple[list[str], int]:
    """Page 1 and total through the store (SQL does the work)."""
    with store.open_session(engine, readonly=True) as session:
        entries, total = store.list_entries(session, limit=PAGE, **filters)
        return [e.hub_id for e in entries], total


def page_load_all(engine: Any, *, category: str | None = None, text: str | None = None) -> tuple[list[str], int]:
    """Page 1 and total by loading every entry and filtering and sorting in Python (the baseline)."""
    with store.open_session(engine, readonly=True) as session:
        entries = list(session.exec(select(CatalogEntry)).all())
    if category:
        entries = [e for e in entries if category in e.relevance]
        entries.sort(key=lambda e: (-e.relevance[category], e.hub_id))
    if text:
        needle = text.lower()
        entries = [e for e in entries if needle in f"{e.hub_id}\n{e.title}\n{e.description}".lower()]
        entries.sort(key=lambda e: (-e.best_relevance, e.hub_id))
    return [e.hub_id for e in entries[:PAGE]], len(entries)


def median_ms(fn: Callable[[], Any]) -> float:
    fn()  # warm caches and the connection pool
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def measure(backend: str, engine: Any) -> dict[str, Any]:
    store.upgrade_database(engine)
    seconds = seed(engine, random.Random(7))
    row: dict[str, Any] = {"backend": backend, "entries": ENTRIES, "seed_s": round(seconds, 2)}
    for name, filters in (("category", {"category": "math"}), ("text", {"text": "proof"})):
        ours, baseline = page_store(engine, **filters), page_load_all(engine, **filters)
        assert ours == baseline, f"{backend} {name}: store and baseline disagree"
        ours_ms = median_ms(lambda f=filters: page_store(engine, **f))  # type: ignore[misc]
        base_ms = median_ms(lambda f=filters: page_load_all(engine, **f))  # type: ignore[misc]
        row[name] = {"total": ours[1], "store_ms": round(ours_ms, 2), "load_all_ms": round(base_ms, 2),
                     "speedup": round(base_ms / ours_ms, 1)}
    return row


def postgres_engine() -> tuple[Any, Callable[[], None]] | None:
    try:
        import psycopg

        schema = f"dh_bench_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
    except Exception as exc:  # the benchmark runs on SQLite alone when there is no server
        print(f"PostgreSQL skipped: {exc}")
        return None
    engine = store.make_engine(f"postgresql+psycopg://postgres@127.0.0.1:5432/test?options=-csearch_path%3D{schema}")

    def drop() -> None:
        engine.dispose()
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    return engine, drop


def main() -> None:
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        engine = store.make_engine(f"sqlite:///{Path(folder) / 'catalog.db'}")
        rows.append(measure("sqlite", engine))
        engine.dispose()
    pg = postgres_engine()
    if pg is not None:
        engine, drop = pg
        try:
            rows.append(measure("postgresql", engine))
        finally:
            drop()
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "catalog_list.json").write_text(
        json.dumps({"page": PAGE, "repeats": REPEATS, "rows": rows}, indent=2) + "\n")
    lines = [
        f"# Catalog review page: store (SQL) vs load-all baseline "
        f"({ENTRIES} entries, page of {PAGE}, median of {REPEATS})",
        "",
        "| backend | seed (store upserts) | query | matches | store ms | load-all ms | speedup |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        for name in ("category", "text"):
            q = row[name]
            lines.append(f"| {row['backend']} | {row['seed_s']} s | {name} | {q['total']} | {q['store_ms']} | "
                         f"{q['load_all_ms']} | **{q['speedup']}×** |")
    (RESULTS / "catalog_list.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
