"""Regeneration client overhead: datahunt's async runner vs a SpecForge-style thread-pool client.

A local server that answers `/v1/chat/completions` instantly runs in its own process, so what is measured is
the client alone: sustained requests/s and process CPU seconds per request at concurrency 64, 256 and 1024.
Both clients do the same work per row: one chat-completion request, parse the answer, append one JSONL line.
datahunt runs its real `run_regeneration` (endpoint pool, journal, status file); the baseline is a
`ThreadPoolExecutor` with one `requests.Session` per thread and a lock around the output file, the shape of
SpecForge's regeneration script. Run: `.venv/bin/python benchmarks/regen_client.py [--rows N]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import platform
import resource
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

RESULTS = ROOT / "benchmarks" / "results"
ANSWER = json.dumps({
    "id": "chatcmpl-bench", "object": "chat.completion", "created": 0, "model": "bench",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "An instant answer of a few words."},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 8, "total_tokens": 20},
}).encode()


# --- the instant server (its own process) -----------------------------------------------------------------
async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(ANSWER)
    try:
        while True:
            request = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in request.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            if length:
                await reader.readexactly(length)
            if request.startswith(b"GET"):
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
            else:
                writer.write(head + ANSWER)
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


def _serve(port_queue: multiprocessing.Queue) -> None:
    async def main() -> None:
        server = await asyncio.start_server(_handle, "127.0.0.1", 0, backlog=4096)
        port_queue.put(server.sockets[0].getsockname()[1])
        await server.serve_forever()

    asyncio.run(main())


# --- the two clients ----------------------------------------------------------------------------------------
def _rows(path: Path, count: int) -> None:
    with path.open("w") as handle:
        for i in range(count):
            handle.write(json.dumps({"id": f"r{i}", "messages": [{"role": "user", "content": f"question {i}"}]}) + "\n")


def run_datahunt(url: str, rows: Path, out: Path, concurrency: int) -> int:
    from inference.generation import Sampling
    from inference.openai_api import OpenAIChatBackend
    from inference.runner import RunConfig, regenerate

    config = RunConfig(rows, out, [url], concurrency=concurrency, sampling=Sampling(max_tokens=16))
    summary = regenerate(config, OpenAIChatBackend(model="bench"))
    return summary.done


def run_threadpool(url: str, rows: Path, out: Path, concurrency: int) -> int:
    import requests

    from core.jsonl import read_jsonl

    local = threading.local()
    lock = threading.Lock()
    prompts = read_jsonl(rows)
    out.mkdir(parents=True, exist_ok=True)
    done = 0

    with (out / "regenerated.jsonl").open("w") as handle:

        def one(row: dict) -> None:
            nonlocal done
            session = getattr(local, "session", None)
            if session is None:
                session = local.session = requests.Session()
                adapter = requests.adapters.HTTPAdapter(pool_connections=1, pool_maxsize=1)
                session.mount("http://", adapter)
            body = {"model": "bench", "messages": row["messages"], "max_tokens": 16, "temperature": 0.7}
            answer = session.post(url + "/v1/chat/completions", json=body, timeout=600).json()
            text = answer["choices"][0]["message"]["content"]
            line = json.dumps({"id": row["id"],
                               "conversations": [*row["messages"], {"role": "assistant", "content": text}]})
            with lock:
                handle.write(line + "\n")
                handle.flush()
                done += 1

        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            list(pool.map(one, prompts))
    return done


def measure(client, url: str, rows: Path, count: int, concurrency: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        before = resource.getrusage(resource.RUSAGE_SELF)
        started = time.perf_counter()
        done = client(url, rows, Path(tmp) / "run", concurrency)
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert done == count, f"{client.__name__} finished {done} of {count}"
    return {"requests": done, "wall_s": round(wall, 3), "req_s": round(done / wall, 1),
            "cpu_ms_per_req": round(1000 * cpu / done, 3), "cores_at_1000_req_s": round(cpu / done * 1000, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=6000)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 256, 1024])
    args = parser.parse_args()

    ports: multiprocessing.Queue = multiprocessing.Queue()
    server = multiprocessing.Process(target=_serve, args=(ports,), daemon=True)
    server.start()
    url = f"http://127.0.0.1:{ports.get(timeout=30)}"
    results = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            rows = Path(tmp) / "rows.jsonl"
            _rows(rows, args.rows)
            measure(run_datahunt, url, rows, args.rows, 64)  # warm-up: imports, first connections
            for concurrency in args.concurrency:
                ours = measure(run_datahunt, url, rows, args.rows, concurrency)
                base = measure(run_threadpool, url, rows, args.rows, concurrency)
                ratio_rate = ours["req_s"] / base["req_s"]
                ratio_cpu = base["cpu_ms_per_req"] / ours["cpu_ms_per_req"]
                results.append({"concurrency": concurrency, "datahunt": ours, "threadpool": base,
                                "req_s_ratio": round(ratio_rate, 2), "cpu_per_req_ratio": round(ratio_cpu, 2)})
                print(f"c={concurrency:5d}  datahunt {ours['req_s']:8.1f} req/s "
                      f"{ours['cpu_ms_per_req']:.3f} ms CPU/req | "
                      f"thread pool {base['req_s']:8.1f} req/s {base['cpu_ms_per_req']:.3f} ms CPU/req | "
                      f"throughput ×{ratio_rate:.2f}, CPU per request ÷{ratio_cpu:.2f}", flush=True)
    finally:
        server.terminate()
        server.join()

    meta = {"rows_per_run": args.rows, "python": platform.python_version(), "cpus": multiprocessing.cpu_count(),
            "note": "server in a separate process on the same machine; the machine is shared with other work, "
                    "so absolute numbers are noisy; the ratios are measured side by side in one run"}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "regen_client.json").write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    lines = ["# Regeneration client overhead (instant local server)", "",
             f"{args.rows} single-turn rows per run; {meta['cpus']} CPUs, shared; {meta['note']}.", "",
             "| concurrency | datahunt req/s | datahunt CPU ms/req | thread pool req/s "
             "| thread pool CPU ms/req | req/s ratio | CPU/req ratio (pool ÷ ours) "
             "| datahunt cores at 1,000 req/s |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        o, b = r["datahunt"], r["threadpool"]
        lines.append(f"| {r['concurrency']} | {o['req_s']:.0f} | {o['cpu_ms_per_req']:.3f} | {b['req_s']:.0f} | "
                     f"{b['cpu_ms_per_req']:.3f} | {r['req_s_ratio']:.2f} | {r['cpu_per_req_ratio']:.2f} | "
                     f"{o['cores_at_1000_req_s']:.2f} |")
    (RESULTS / "regen_client.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
