"""Load on the review service: catalog list and detail under 50 concurrent clients, SQLite vs PostgreSQL.

For each database the catalog is seeded with 2,000 entries through the store (as campaigns would write them),
then a real uvicorn server (one process, `datahunt serve`'s app) is started on loopback and 50 concurrent
httpx clients hammer one route for a bounded time. Printed and written to benchmarks/results/api_load.json
and .md: requests/s, p50 and p99 latency, errors, and the PostgreSQL/SQLite ratios measured in the same run.

    .venv/bin/python benchmarks/api_load.py [--seconds 10] [--clients 50] [--entries 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import psycopg

from core.types import Category
from curation.catalog import store

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PG_ADMIN = "host=127.0.0.1 port=5432 user=postgres dbname=test"
PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test?options=-csearch_path%3D{schema}"
LICENSES = ["mit", "apache-2.0", "cc-by-4.0", "cc-by-nc-4.0", "other", None]


def seed(url: str, entries: int) -> list[str]:
    """Write `entries` catalog entries the way a campaign does; return their Hub ids."""
    engine = store.make_engine(url)
    store.upgrade_database(engine)
    rng = random.Random(7)
    categories = [c.value for c in Category]
    hub_ids = [f"org{i % 97}/dataset-{i:05d}" for i in range(entries)]
    with store.open_session(engine) as session:
        campaign = store.create_campaign(session, categories=categories, offline=True, backends=["offline"])
        runs = {c: store.start_run(session, campaign_id=campaign.id, category=c).id for c in categories}
        for i, hub_id in enumerate(hub_ids):
            category = categories[i % len(categories)]
            blocking = rng.random() < 0.15
            reasons = [{"code": "license_restricted", "detail": "other", "blocking": True}] if blocking else [
                {"code": "size_unknown", "detail": "no size stated", "blocking": False}]
            candidate = store.add_candidate(session, campaign_id=campaign.id, run_id=runs[category], category=category,
                                            candidate={
                "hub_id": hub_id, "title": f"Dataset {i}", "description": f"{category} data, part {i}",
                "relevance": round(rng.random(), 3), "format_guess": "sharegpt",
                "metadata": {"license": rng.choice(LICENSES), "num_rows": rng.randint(100, 10**6),
                             "sha": uuid.uuid4().hex},
                "evidence": [{"backend": "offline", "query": f"{category} dataset", "rank": 1 + i % 20, "score": 1.5}],
            })
            store.add_verdict(session, campaign_id=campaign.id, decision="reject" if blocking else "accept",
                              reasons=reasons, candidate_id=candidate.id)
            store.upsert_entry(session, candidate=candidate, decision="reject" if blocking else "accept",
                               reasons=reasons)
        for run_id in runs.values():
            store.finish_run(session, run_id=run_id, status="succeeded", planner="deterministic", queries=[],
                             results_per_backend={"offline": entries // len(categories)}, candidates_found=1,
                             candidates_accepted=1, error=None, reasons=[])
        store.set_campaign_status(session, campaign_id=campaign.id, status="succeeded")
    engine.dispose()
    return hub_ids


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(url: str, home: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "DATAHUNT_DATABASE_URL": url, "DATAHUNT_HOME": str(home), "DATAHUNT_OFFLINE": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--factory", "server.app:create_app", "--host", "127.0.0.1",
         "--port", str(port), "--log-level", "warning", "--no-access-log"],
        cwd=ROOT, env=env,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(base + "/catalog?limit=1", timeout=2).status_code == 200:
                return process, base
        except httpx.HTTPError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError("server did not start")


async def hammer(base: str, paths: list[str], clients: int, seconds: float) -> dict[str, Any]:
    """Run `clients` concurrent request loops over `paths` for `seconds`; return throughput and latency."""
    latencies: list[float] = []
    errors: Counter[str] = Counter()
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=30) as http:
        stop = time.perf_counter() + seconds

        async def loop(worker: int) -> None:
            rng = random.Random(worker)
            while time.perf_counter() < stop:
                start = time.perf_counter()
                try:
                    response = await http.get(rng.choice(paths))
                    kind = None if response.status_code == 200 else f"HTTP {response.status_code}"
                except httpx.HTTPError as exc:
                    kind = type(exc).__name__
                latencies.append(time.perf_counter() - start)
                if kind:
                    errors[kind] += 1

        began = time.perf_counter()
        await asyncio.gather(*(loop(i) for i in range(clients)))
        elapsed = time.perf_counter() - began
    ordered = sorted(latencies)
    return {
        "requests": len(latencies),
        "errors": sum(errors.values()),
        "error_kinds": dict(errors),
        "seconds": round(elapsed, 2),
        "requests_per_s": round(len(latencies) / elapsed, 1),
        "p50_ms": round(1000 * statistics.median(ordered), 1),
        "p99_ms": round(1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 1),
    }


def scenarios(hub_ids: list[str]) -> dict[str, list[str]]:
    rng = random.Random(3)
    categories = [c.value for c in Category]
    lists = [f"/catalog?limit=50&offset={rng.randrange(0, len(hub_ids) - 50)}" for _ in range(200)]
    lists += [f"/catalog?limit=50&category={rng.choice(categories)}" for _ in range(100)]
    details = [f"/catalog/{rng.choice(hub_ids)}" for _ in range(500)]
    return {"list": lists, "detail": details}


def run_backend(name: str, url: str, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as home:
        began = time.perf_counter()
        hub_ids = seed(url, args.entries)
        seeded_s = time.perf_counter() - began
        process, base = start_server(url, Path(home))
        try:
            results = {"seed_s": round(seeded_s, 1)}
            for scenario, paths in scenarios(hub_ids).items():
                asyncio.run(hammer(base, paths[:20], args.clients, 1.0))  # warm-up
                results[scenario] = asyncio.run(hammer(base, paths, args.clients, args.seconds))
                print(f"{name:10s} {scenario:6s} {results[scenario]}", flush=True)
        finally:
            process.terminate()
            process.wait(timeout=30)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--entries", type=int, default=2000)
    args = parser.parse_args()

    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        results["sqlite"] = run_backend("sqlite", f"sqlite:///{Path(tmp) / 'catalog.db'}", args)
    schema = f"dh_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        results["postgres"] = run_backend("postgres", PG_URL.format(schema=schema), args)
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    ratios = {
        scenario: {
            "rps_postgres_over_sqlite": round(results["postgres"][scenario]["requests_per_s"]
                                              / results["sqlite"][scenario]["requests_per_s"], 2),
            "p99_postgres_over_sqlite": round(results["postgres"][scenario]["p99_ms"]
                                              / results["sqlite"][scenario]["p99_ms"], 2),
        }
        for scenario in ("list", "detail")
    }
    report = {
        "benchmark": "api_load",
        "entries": args.entries, "clients": args.clients, "seconds_per_scenario": args.seconds,
        "machine": {"cpus": os.cpu_count(), "loadavg_1m_at_end": round(os.getloadavg()[0], 2),
                    "note": "one uvicorn worker; clients in a separate process on the same (shared) 2-core machine"},
        "results": results,
        "ratios": ratios,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "api_load.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = [
        "# api_load: catalog routes under load, SQLite vs PostgreSQL",
        "",
        f"{args.entries} catalog entries, {args.clients} concurrent clients, {args.seconds:g} s per scenario, one "
        f"uvicorn worker on loopback; {os.cpu_count()} CPUs shared with other work "
        f"(load {report['machine']['loadavg_1m_at_end']}).",
        "",
        "| database | route | requests/s | p50 ms | p99 ms | errors |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for db in ("sqlite", "postgres"):
        for scenario in ("list", "detail"):
            r = results[db][scenario]
            lines.append(f"| {db} | {scenario} | {r['requests_per_s']} | {r['p50_ms']} | {r['p99_ms']} "
                         f"| {r['errors']} |")
    lines += ["", "PostgreSQL / SQLite (same run):", ""]
    for scenario, ratio in ratios.items():
        lines.append(f"- {scenario}: requests/s x{ratio['rps_postgres_over_sqlite']}, "
                     f"p99 x{ratio['p99_postgres_over_sqlite']}")
    (RESULTS / "api_load.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
