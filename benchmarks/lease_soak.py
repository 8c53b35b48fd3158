"""Leases under load: two live service replicas on one PostgreSQL database, CPU hogs, many real campaigns.

Two `datahunt serve` processes share a fresh schema; CPU hogs (busy loops, one process each) load the
machine; campaigns (the real offline pipeline) are launched alternately on the two replicas. While they run, a
monitor reads the lease table every 0.2 s and keeps the oldest heartbeat of a held lease, on the database's
clock. Then:

* **live phase**: every campaign must finish with no lease taken over (a takeover of a live replica's
  campaign is an audit row `lease taken_over` and a "takes it over" log line), and no finished campaign may
  change status afterwards (an audit row from a final status), watched for a lease time and a sweep more;
* **kill phase**: more campaigns on replica A, A SIGKILLed once it runs some; B must take each of A's
  unfinished campaigns over within the lease time plus the sweep interval (the lease time), and finish them.

Run: `.venv/bin/python benchmarks/lease_soak.py [--campaigns 20] [--ttl 30] [--hogs 2] [--kill-campaigns 6]`
writes `benchmarks/results/lease_soak.{json,md}`; tests/server/test_lease_soak.py runs the same code at a
small scale. `--code DIR` runs the replicas from another tree (an older commit's, to compare).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
ADMIN = "host=127.0.0.1 port=5432 user=postgres dbname=test"
URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test?options=-csearch_path%3D{schema}"
TOKEN = "soak-token"
FINAL = {"succeeded", "partial", "failed", "interrupted"}


@dataclass
class Replica:
    """One `datahunt serve` process (its own process group) and where its log goes."""

    name: str
    port: int
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def takeover_lines(self) -> int:
        return sum("takes it over" in line for line in self.log.read_text(errors="replace").splitlines())


@dataclass
class Monitor:
    """Reads the lease table every `every_s` seconds: the oldest heartbeat of a held lease, and each lease's
    owners in the order seen."""

    schema: str
    every_s: float = 0.2
    max_age_s: float = 0.0
    owners: dict[str, list[tuple[float, str]]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        with psycopg.connect(ADMIN, autocommit=True, options=f"-csearch_path={self.schema}") as conn:
            while not self._stop.wait(self.every_s):
                rows = conn.execute("SELECT name, owner, EXTRACT(EPOCH FROM now() - heartbeat_at) FROM lease"
                                    " WHERE owner <> ''").fetchall()
                now = time.time()
                for name, owner, age in rows:
                    self.max_age_s = max(self.max_age_s, float(age))
                    seen = self.owners.setdefault(name, [])
                    if not seen or seen[-1][1] != owner:
                        seen.append((now, owner))

    @contextmanager
    def watching(self) -> Iterator[Monitor]:
        thread = threading.Thread(target=self.run, name="lease-monitor", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            thread.join()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_replica(name: str, *, code: Path, schema: str, ttl_s: float, folder: Path) -> Replica:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DATAHUNT_")}
    env.update(PYTHONPATH=str(code), DATAHUNT_HOME=str(folder / name), DATAHUNT_OFFLINE="1",
               DATAHUNT_DATABASE_URL=URL.format(schema=schema), DATAHUNT_LEASE_TTL_S=str(ttl_s),
               DATAHUNT_API_TOKEN=TOKEN, DATAHUNT_CONFIG=str(folder / "none.toml"), HF_HUB_OFFLINE="1")
    log = folder / f"{name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-c", "from server.cli import app; app()", "serve", "--port", str(port),
             "--log-level", "warning"], cwd=code, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    replica = Replica(name=name, port=port, process=process, log=log)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"replica {name} exited: {log.read_text(errors='replace')[-2000:]}")
        try:
            if httpx.get(f"{replica.base}/campaigns", headers=_auth(), timeout=5).status_code == 200:
                return replica
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    replica.kill()
    raise RuntimeError(f"replica {name} did not answer within 180 s")


def _auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKEN}"}


def launch(replica: Replica) -> str:
    answer = httpx.post(f"{replica.base}/campaigns", json={"offline": True}, headers=_auth(), timeout=120)
    answer.raise_for_status()
    return str(answer.json()["id"])


def statuses(conn: psycopg.Connection[Any], ids: list[str]) -> dict[str, str]:
    rows = conn.execute("SELECT id, status FROM campaign WHERE id = ANY(%s)", (ids,)).fetchall()
    return {str(i): str(s) for i, s in rows}


def wait_final(conn: psycopg.Connection[Any], ids: list[str], timeout_s: float) -> dict[str, str]:
    deadline = time.monotonic() + timeout_s
    while True:
        now = statuses(conn, ids)
        if all(now.get(i) in FINAL for i in ids) or time.monotonic() > deadline:
            return now
        time.sleep(0.5)


def audit_counts(conn: psycopg.Connection[Any], ids: list[str]) -> dict[str, int]:
    leases = [f"campaign:{i}" for i in ids]
    has_lease_audit = conn.execute("SELECT count(*) FROM auditevent WHERE entity = 'lease'").fetchone()
    taken = conn.execute("SELECT count(*) FROM auditevent WHERE entity = 'lease' AND action = 'taken_over'"
                         " AND entity_id = ANY(%s)", (leases,)).fetchone()
    changed = conn.execute("SELECT count(*) FROM auditevent WHERE entity = 'campaign' AND action = 'status_changed'"
                           " AND entity_id = ANY(%s) AND from_status = ANY(%s)", (ids, list(FINAL))).fetchone()
    return {"taken_over": int(taken[0] if taken else 0), "finished_changed": int(changed[0] if changed else 0),
            "lease_audit_rows": int(has_lease_audit[0] if has_lease_audit else 0)}


def soak(*, campaigns: int, ttl_s: float, hogs: int, kill_campaigns: int, code: Path = ROOT,
         timeout_s: float = 1800) -> dict[str, Any]:
    """Run both phases and return what was measured (see the module docstring)."""
    schema = f"dh_soak_{uuid.uuid4().hex[:10]}"
    started = time.monotonic()
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
    hog_procs: list[subprocess.Popen[bytes]] = []
    replicas: list[Replica] = []
    try:
        with tempfile.TemporaryDirectory(prefix="lease-soak-") as tmp, \
                psycopg.connect(ADMIN, autocommit=True, options=f"-csearch_path={schema}") as conn:
            folder = Path(tmp)
            # One replica first: it migrates the schema and creates the checkpoint tables; then the second.
            replicas.append(start_replica("a", code=code, schema=schema, ttl_s=ttl_s, folder=folder))
            replicas.append(start_replica("b", code=code, schema=schema, ttl_s=ttl_s, folder=folder))
            a, b = replicas
            hog_procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
                         for _ in range(hogs)]
            monitor = Monitor(schema)
            with monitor.watching():
                launched = {launch(replicas[i % 2]): replicas[i % 2] for i in range(campaigns)}
                live = list(launched)
                live_status = wait_final(conn, live, timeout_s)
                live_done = time.monotonic()
                time.sleep(2 * ttl_s + 1)  # a lease time and a sweep more: late takeovers would land now
                live_audit = audit_counts(conn, live)
                live_after = statuses(conn, live)
                live_lines = a.takeover_lines() + b.takeover_lines()
                live_age = monitor.max_age_s
                moved = moved_campaigns(monitor, launched)
                kill = kill_phase(conn, monitor, a, b, kill_campaigns, ttl_s, timeout_s) if kill_campaigns else None
            result: dict[str, Any] = {
                "config": {"replicas": 2, "campaigns": campaigns, "ttl_s": ttl_s, "sweep_s": ttl_s, "hogs": hogs,
                           "kill_campaigns": kill_campaigns, "cpus": os.cpu_count(),
                           "load_at_start": os.getloadavg()[0]},
                "live": {
                    "final": sum(s in ("succeeded", "partial") for s in live_status.values()),
                    "statuses": _count(live_status.values()), "changed_after_final": live_status != live_after,
                    "finished_changed": live_audit["finished_changed"], "takeovers": live_audit["taken_over"],
                    "takeover_log_lines": live_lines, "moved_to_the_other_replica": moved,
                    "max_heartbeat_age_s": round(live_age, 2),
                    "wall_s": round(live_done - started, 1),
                },
                "kill": kill,
                "wall_s": round(time.monotonic() - started, 1),
            }
            return result
    finally:
        for hog in hog_procs:
            os.killpg(hog.pid, signal.SIGKILL)
            hog.wait()
        for replica in replicas:
            replica.kill()
        with psycopg.connect(ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def moved_campaigns(monitor: Monitor, launched: dict[str, Replica]) -> int:
    """How many campaigns a replica other than the one that accepted them held at some point (a takeover of
    a live campaign, whether or not the code under test logs or audits it)."""
    moved = 0
    for campaign_id, replica in launched.items():
        pids = {owner.split(":")[1] for _, owner in monitor.owners.get(f"campaign:{campaign_id}", [])}
        moved += bool(pids - {str(replica.process.pid)})
    return moved


def kill_phase(conn: psycopg.Connection[Any], monitor: Monitor, a: Replica, b: Replica, count: int, ttl_s: float,
               timeout_s: float) -> dict[str, Any]:
    """Launch `count` campaigns on A, SIGKILL A once one runs, and time B's takeover of each unfinished one."""
    ids = [launch(a) for _ in range(count)]
    deadline = time.monotonic() + timeout_s
    while "running" not in statuses(conn, ids).values() and time.monotonic() < deadline:
        time.sleep(0.1)
    a.kill()
    killed_at = time.time()
    at_kill = statuses(conn, ids)
    orphans = [i for i in ids if at_kill.get(i) not in FINAL]
    b_pid = f":{b.process.pid}:"
    final = wait_final(conn, ids, timeout_s)
    delays = []
    for campaign_id in orphans:
        seen = monitor.owners.get(f"campaign:{campaign_id}", [])
        taken = [t for t, owner in seen if b_pid in owner and t >= killed_at]
        delays.append(round(taken[0] - killed_at, 2) if taken else None)
    limit = 2 * ttl_s  # the lease time plus the sweep interval (one lease time)
    return {
        "orphans": len(orphans), "taken_over": sum(d is not None for d in delays),
        "takeover_s": delays, "max_takeover_s": max((d for d in delays if d is not None), default=None),
        "limit_s": limit, "within_limit": all(d is not None and d <= limit for d in delays),
        "statuses": _count(final.values()), "all_finished": all(s in FINAL for s in final.values()),
    }


def _count(values: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return dict(sorted(counts.items()))


def write_results(result: dict[str, Any], stem: str = "lease_soak") -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n")
    live, kill, cfg = result["live"], result["kill"], result["config"]
    lines = [
        f"# Leases under load: {cfg['replicas']} replicas, {cfg['hogs']} CPU hogs, {cfg['campaigns']} campaigns, "
        f"lease {cfg['ttl_s']:g} s ({cfg['cpus']} CPUs, load {cfg['load_at_start']:.1f} at the start)",
        "",
        "| live phase | |", "|---|---:|",
        f"| campaigns finished (succeeded or partial) | {live['final']} of {cfg['campaigns']} |",
        f"| takeovers of live campaigns (audit / log lines) | {live['takeovers']} / {live['takeover_log_lines']} |",
        f"| campaigns held by the replica that did not accept them | {live['moved_to_the_other_replica']} |",
        f"| finished campaigns changed afterwards | {live['finished_changed']} |",
        f"| oldest heartbeat of a held lease (database clock) | {live['max_heartbeat_age_s']} s |",
    ]
    if kill:
        lines += [
            "", "| kill phase (replica A SIGKILLed) | |", "|---|---:|",
            f"| A's unfinished campaigns at the kill | {kill['orphans']} |",
            f"| taken over by B | {kill['taken_over']} |",
            f"| slowest takeover after the kill | {kill['max_takeover_s']} s (limit {kill['limit_s']:g} s) |",
            f"| all finished afterwards | {kill['all_finished']} ({kill['statuses']}) |",
        ]
    lines += ["", f"Wall time {result['wall_s']} s. Written by `benchmarks/lease_soak.py`."]
    (RESULTS / f"{stem}.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--campaigns", type=int, default=20)
    parser.add_argument("--ttl", type=float, default=30.0, help="DATAHUNT_LEASE_TTL_S of both replicas")
    parser.add_argument("--hogs", type=int, default=2)
    parser.add_argument("--kill-campaigns", type=int, default=6)
    parser.add_argument("--code", type=Path, default=ROOT, help="the tree the replicas run (default: this one)")
    parser.add_argument("--stem", default="lease_soak", help="results file name (without extension)")
    args = parser.parse_args()
    result = soak(campaigns=args.campaigns, ttl_s=args.ttl, hogs=args.hogs, kill_campaigns=args.kill_campaigns,
                  code=args.code)
    print(json.dumps(result, indent=1))
    write_results(result, args.stem)


if __name__ == "__main__":
    main()
