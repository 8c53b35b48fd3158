"""What the ten-way `Send` fan-out buys: the campaign's wall time with parallel vs sequential subagents.

Every search call on the offline index is given an artificial latency (default 200 ms, like a Hub API call),
and the real subagent runs its planned queries against it. Three runs of the same pipeline (supervisor →
branches → verifier → persist, on a fresh SQLite catalog each time) are timed side by side:

* `parallel` — the campaign as shipped: all ten branches in one superstep;
* `sequential` — the same campaign with `max_concurrency=1`: the branches one after another;
* `slowest single` — each category alone in its own campaign; the slowest of the ten.

Two phases are reported: the fan-out (first branch start → last branch end, the part `Send` parallelises)
and the whole campaign (plus verification and persistence of ~500 candidates, the same work in every mode).
Run: `.venv/bin/python benchmarks/fanout.py [--latency 0.2 1.0] [--repeats 2]`; results go to
`benchmarks/results/fanout.{json,md}`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from agents.search.base import SearchHit
from agents.search.offline import OfflineIndex
from core.candidates import DatasetMetadata
from core.settings import get_settings
from core.types import Category
from curation.catalog import store
from graph.campaign import run_campaign
from graph.events import CampaignEvent

RESULTS = Path(__file__).resolve().parent / "results"


class SlowIndex:
    """The offline index behind an artificial per-search latency."""

    name = "offline"

    def __init__(self, inner: OfflineIndex, latency_s: float) -> None:
        self.inner, self.latency_s = inner, latency_s

    async def search(self, query: str, *, limit: int = 20) -> list[SearchHit]:
        await asyncio.sleep(self.latency_s)
        return await self.inner.search(query, limit=limit)

    async def lookup(self, hub_id: str) -> DatasetMetadata | None:
        return await self.inner.lookup(hub_id)


async def timed_campaign(
    backend: SlowIndex, categories: list[Category], max_concurrency: int | None
) -> dict[str, float]:
    """Run one campaign on a fresh catalog; return its fan-out and total wall times in seconds."""
    marks: list[float] = []

    def on_event(event: CampaignEvent) -> None:
        if event.kind in ("run_started", "run_finished"):
            marks.append(time.perf_counter())

    with tempfile.TemporaryDirectory() as folder:
        engine = store.make_engine(f"sqlite:///{folder}/catalog.db")
        store.upgrade_database(engine)
        started = time.perf_counter()
        await run_campaign(engine=engine, settings=get_settings(), categories=categories, offline=True,
                           backends=[backend], on_event=on_event, max_concurrency=max_concurrency)
        total = time.perf_counter() - started
        engine.dispose()
    return {"fanout_s": max(marks) - min(marks), "total_s": total}


async def measure(latency_s: float, repeats: int) -> dict[str, Any]:
    """Time the three modes `repeats` times at one latency; return medians and ratios."""
    backend = SlowIndex(OfflineIndex.default(), latency_s)
    everything = list(Category)
    runs: dict[str, list[dict[str, float]]] = {"parallel": [], "sequential": [], "slowest_single": []}
    for _ in range(repeats):
        runs["parallel"].append(await timed_campaign(backend, everything, None))
        runs["sequential"].append(await timed_campaign(backend, everything, 1))
        singles = [await timed_campaign(backend, [category], None) for category in everything]
        runs["slowest_single"].append({key: max(s[key] for s in singles) for key in ("fanout_s", "total_s")})
    median = {mode: {key: statistics.median(r[key] for r in rs) for key in ("fanout_s", "total_s")}
              for mode, rs in runs.items()}
    ratios = {
        phase: {
            "sequential_over_parallel": median["sequential"][key] / median["parallel"][key],
            "parallel_over_slowest_single": median["parallel"][key] / median["slowest_single"][key],
        }
        for phase, key in (("fanout", "fanout_s"), ("total", "total_s"))
    }
    return {"latency_s": latency_s, "repeats": repeats, "median_s": median, "ratios": ratios, "runs": runs}


def markdown(results: list[dict[str, Any]]) -> str:
    """Render the measurements as a Markdown table."""
    lines = [
        "# Fan-out benchmark (`benchmarks/fanout.py`)", "",
        "Ten categories, real subagent on the offline index with an artificial latency per search; medians of "
        "the repeats. Aims: sequential/parallel ≥ 8×, parallel/slowest-single ≤ 1.3×. The fan-out phase runs from "
        "the first branch start to the last branch end; the whole campaign adds verifying and persisting every "
        "candidate, which is the same work in all modes.", "",
        "| latency | phase | parallel | sequential | slowest single | sequential ÷ parallel "
        "| parallel ÷ slowest single |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for phase, key in (("fan-out", "fanout_s"), ("whole campaign", "total_s")):
            m, ratio = r["median_s"], r["ratios"]["fanout" if key == "fanout_s" else "total"]
            lines.append(
                f"| {r['latency_s'] * 1000:.0f} ms | {phase} | {m['parallel'][key]:.2f} s "
                f"| {m['sequential'][key]:.2f} s "
                f"| {m['slowest_single'][key]:.2f} s | {ratio['sequential_over_parallel']:.1f}× "
                f"| {ratio['parallel_over_slowest_single']:.2f}× |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency", type=float, nargs="+", default=[0.2, 1.0], help="seconds per search call")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    results = [asyncio.run(measure(latency, args.repeats)) for latency in args.latency]
    report = {"benchmark": "fanout", "python": platform.python_version(), "machine": platform.machine(),
              "cpus": os.cpu_count(), "load_average_after": os.getloadavg(), "results": results}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "fanout.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    table = markdown(results)
    (RESULTS / "fanout.md").write_text(table, encoding="utf-8")
    print(table)


if __name__ == "__main__":
    main()
