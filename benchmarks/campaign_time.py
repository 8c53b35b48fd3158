"""How long `make run` takes: the offline campaign's wall time, this tree against a baseline commit.

`make run` is `datahunt campaign run --offline` in a fresh process: interpreter start, imports, the ten
subagents on the embedded index, the verifier and the persist node. Both trees run it the same way (this
venv's Python with the tree first on the import path, so the baseline's own code and data are used), each
repeat in alternating order so a busy moment of the shared machine hits both alike:

* `fresh` — a campaign into an empty catalog (a fresh `DATAHUNT_HOME`);
* `again` — a second campaign into the same catalog, as a second `make run` does: every entry merges.

Both trees must leave the same catalog behind (candidates, verdicts, entries, run rows; clock times aside),
which the benchmark checks; when the change is meant to alter what a campaign finds (a discovery-quality pass),
`--results-may-differ` times it anyway and reports, per table, how many rows each tree left and whether they
match. Run: `.venv/bin/python benchmarks/campaign_time.py [--baseline REV] [--repeats 5] [--results-may-differ]`;
results go to `benchmarks/results/campaign_time.{json,md}`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
BASELINE = "4c34d66"  # the last commit before the persist batching and the threaded embeddings
CLOCK_FIELDS = {"created_at", "updated_at", "started_at", "finished_at", "elapsed_s", "at"}
COMPARED_TABLES = ("subagentrun", "candidate", "verdict", "catalogentry")
CAMPAIGN_IDS = ("bench00000000001", "bench00000000002")


def extract(rev: str, into: Path) -> Path:
    """Write the tree of commit `rev` under `into` and return its path."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def run_campaign(tree: Path, home: Path, campaign_id: str) -> float:
    """Run one offline campaign from `tree` into the catalog under `home`; return its wall seconds."""
    env = {**os.environ, "PYTHONPATH": str(tree), "DATAHUNT_HOME": str(home), "DATAHUNT_OFFLINE": "1"}
    command = [sys.executable, "-c", "from server.cli import app; app()", "campaign", "run", "--offline",
               "--id", campaign_id, "--json"]
    started = time.perf_counter()
    subprocess.run(command, cwd=tree, env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def catalog_rows(database: Path) -> dict[str, list[Any]]:
    """Return the compared tables' rows, clock times dropped and run ids named `category#attempt` (branches
    open their runs concurrently, so which one gets which id is a race)."""
    db = sqlite3.connect(database)
    db.row_factory = sqlite3.Row
    runs = {r["id"]: f"{r['campaign_id']}:{r['category']}#{r['attempt']}"
            for r in db.execute("SELECT * FROM subagentrun")}
    tables: dict[str, list[Any]] = {}
    for table in COMPARED_TABLES:
        rows = []
        for row in db.execute(f"SELECT * FROM {table} ORDER BY id"):  # noqa: S608 - our table names
            plain = {k: _plain(row[k]) for k in row.keys() if k not in CLOCK_FIELDS}  # noqa: SIM118 - a Row iterates values
            if table == "subagentrun":
                plain["id"] = runs[plain["id"]]
            if plain.get("run_id") is not None:
                plain["run_id"] = runs[plain["run_id"]]
            rows.append(plain)
        tables[table] = sorted(rows, key=lambda r: str(r["id"])) if table == "subagentrun" else rows
    db.close()
    return tables


def _plain(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in "[{":  # a JSON column, or a description that opens with a bracket
        try:
            return _without_clock(json.loads(value))
        except ValueError:
            return value
    return value


def _without_clock(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_clock(v) for k, v in value.items() if k not in CLOCK_FIELDS}
    if isinstance(value, list):
        return [_without_clock(v) for v in value]
    return value


def measure(trees: dict[str, Path], repeats: int, scratch: Path, *, may_differ: bool = False
            ) -> tuple[dict[str, dict[str, list[float]]], dict[str, dict[str, Any]]]:
    """Time both trees `repeats` times, alternating which goes first; check their catalogs agree each time
    (unless `may_differ`). Return the times and, per table, each tree's row count and whether they matched."""
    times: dict[str, dict[str, list[float]]] = {name: {"fresh": [], "again": []} for name in trees}
    tables: dict[str, dict[str, Any]] = {}
    for repeat in range(repeats):
        order = list(trees) if repeat % 2 == 0 else list(reversed(trees))
        catalogs = {}
        for name in order:
            home = scratch / f"{name}-{repeat}"
            times[name]["fresh"].append(run_campaign(trees[name], home, CAMPAIGN_IDS[0]))
            times[name]["again"].append(run_campaign(trees[name], home, CAMPAIGN_IDS[1]))
            catalogs[name] = catalog_rows(home / "catalog.db")
        first, *others = catalogs.values()
        for name, rows in zip(order[1:], others, strict=True):
            for table in COMPARED_TABLES:
                if rows[table] != first[table] and not may_differ:
                    raise SystemExit(f"repeat {repeat}: {name} left a different {table} table than {order[0]}")
        for table in COMPARED_TABLES:
            tables[table] = {**{name: len(catalogs[name][table]) for name in trees},
                             "same": all(catalogs[n][table] == first[table] for n in trees)}
        print(f"repeat {repeat + 1}/{repeats}: " + ", ".join(
            f"{n} {times[n]['fresh'][-1]:.2f}/{times[n]['again'][-1]:.2f} s" for n in order), flush=True)
    return times, tables


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default=BASELINE, help="commit to compare against (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--results-may-differ", action="store_true",
                        help="time trees whose campaigns find different things (report the catalogs' rows instead)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="campaign-time-") as scratch_dir:
        scratch = Path(scratch_dir)
        trees = {"baseline": extract(args.baseline, scratch / "baseline"), "current": ROOT}
        load_before = os.getloadavg()
        times, tables = measure(trees, args.repeats, scratch, may_differ=args.results_may_differ)
        load_after = os.getloadavg()
    medians = {name: {kind: round(statistics.median(v), 2) for kind, v in kinds.items()}
               for name, kinds in times.items()}
    ratios = {kind: round(medians["baseline"][kind] / medians["current"][kind], 2) for kind in ("fresh", "again")}
    report = {
        "baseline": args.baseline, "repeats": args.repeats, "cpus": os.cpu_count(), "python": platform.python_version(),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in load_after],
        "seconds": {name: {kind: [round(x, 3) for x in v] for kind, v in kinds.items()}
                    for name, kinds in times.items()},
        "median_s": medians, "speedup": ratios, "same_catalog": all(t["same"] for t in tables.values()),
        "tables": tables,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "campaign_time.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    lines = [
        f"# `make run` wall time: this tree vs {args.baseline} (median of {args.repeats}, interleaved, "
        f"{os.cpu_count()} CPUs, load {load_before[0]:.1f} → {load_after[0]:.1f})",
        "",
        "| campaign | baseline s | current s | speedup |",
        "|---|---:|---:|---:|",
        *(f"| {kind} | {medians['baseline'][kind]} | {medians['current'][kind]} | **{ratios[kind]}×** |"
          for kind in ("fresh", "again")),
        "",
        catalog_line(tables),
        "",
    ]
    (RESULTS / "campaign_time.md").write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))


def catalog_line(tables: dict[str, dict[str, Any]]) -> str:
    """The report's sentence on what the two trees left in their catalogs."""
    if all(t["same"] for t in tables.values()):
        return ("Both trees left the same catalog (runs, candidates, verdicts, entries; clock times aside) "
                "in every repeat.")
    counts = "; ".join(f"{table} {t['baseline']} vs {t['current']} rows{'' if t['same'] else ', differing'}"
                       for table, t in tables.items())
    return f"The trees find different things (`--results-may-differ`), so their catalogs differ: {counts}."


if __name__ == "__main__":
    main()
