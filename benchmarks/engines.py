"""Acceptance of one draft measured by a real engine (vLLM, CPU build) and by datahunt's decoder, side by side.

For each eval set, the same prompts (rendered once by the target's chat template, sent as token ids), greedy,
the same chain length k and new-token limit:
- vLLM serving the target with the draft (`--speculative-config` method eagle3, the draft's vLLM layout written
  by `convert_export`): acceptance from its `/metrics` counters differenced around the set, tok/s of the run;
  then vLLM without speculation on the same prompts, for the speedup. Both in float32 (vLLM's greedy output
  is the same with and without speculation in float32; bf16's multi-token verify rounds differently).
- datahunt's own speculative decoder (`training.accept.evaluate`, float32 on the CPU) with the same draft.
They should agree within 15 %; a larger gap is a finding (numerics, layer ids, template). Writes
docs/results/engines.json and prints the table.

    python benchmarks/engines.py --target DIR --draft DIR --eval .carry/data/eval.jsonl --sets gsm8k humaneval
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
# Run as `python benchmarks/engines.py` on a GPU machine where the project is not installed.
sys.path.insert(0, str(REPO))


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Vllm:
    """A vLLM OpenAI server for the duration of a `with` block."""

    def __init__(self, python: Path, target: Path, draft: Path | None, k: int, log: Path) -> None:
        self.port = _port()
        self.url = f"http://127.0.0.1:{self.port}"
        argv = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(target), "--host",
                "127.0.0.1", "--port", str(self.port), "--max-model-len", "2048", "--dtype", "float32",
                "--gpu-memory-utilization", "0.25"]
        if draft is not None:
            argv += ["--speculative-config", json.dumps({"method": "eagle3", "model": str(draft),
                                                         "num_speculative_tokens": k})]
        self.argv, self.log = argv, log

    def __enter__(self) -> Vllm:
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "2"}
        self.process = subprocess.Popen(self.argv, stdout=self.log.open("w"), stderr=subprocess.STDOUT,
                                        start_new_session=True, env=env)
        started = time.monotonic()
        while time.monotonic() - started < 1200:
            if self.process.poll() is not None:
                raise SystemExit("vLLM exited:\n" + self.log.read_text()[-3000:])
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    print(f"vLLM up in {time.monotonic() - started:.0f} s "
                          f"({'draft' if '--speculative-config' in self.argv else 'no draft'})", flush=True)
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(3)
        raise SystemExit("vLLM did not start in 20 minutes")

    def __exit__(self, *exc: object) -> None:
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)


def _prompts(eval_file: Path, sets: list[str], per_set: int, renderer: Any) -> dict[str, list[list[int]]]:
    rows = [json.loads(line) for line in eval_file.read_text(encoding="utf-8").splitlines() if line.strip()]
    out: dict[str, list[list[int]]] = {}
    for name in sets:
        picked = [r for r in rows if r.get("set") == name][:per_set]
        if len(picked) < per_set:
            raise SystemExit(f"{eval_file} has {len(picked)} prompts of set {name!r}, fewer than {per_set}")
        out[name] = [renderer.render_ids([{"role": "user", "content": r["prompt"]}]) for r in picked]
    return out


def _write(args: argparse.Namespace, runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    doc = {"target": str(args.target.name), "draft": str(args.draft),
           "device": f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)",
           "dtype": "float32 (both)", "max_new_tokens": args.max_new, "greedy": True,
           "command": " ".join(["python", "benchmarks/engines.py", *sys.argv[1:]]),
           "runs": [{"draft": args.draft.name, **r} for r in runs.values()]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def main() -> None:
    from core.spec_counters import VllmSpecCounters
    from inference.chat_template import ChatRenderer
    from inference.served_acceptance import evaluate_vllm, run_completions
    from inference.server_info import get_server_info, get_vllm_counters
    from training.export import convert_export

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", type=Path, required=True)
    parser.add_argument("--draft", type=Path, required=True, help="A datahunt export (either engine's layout).")
    parser.add_argument("--eval", type=Path, required=True, help="JSONL rows {set, id, prompt}.")
    parser.add_argument("--sets", nargs="+", default=["gsm8k", "humaneval"])
    parser.add_argument("--prompts", type=int, default=24)
    parser.add_argument("--max-new", type=int, default=128)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--vllm-python", type=Path, default=REPO / ".venv-vllm" / "bin" / "python")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "results" / "engines.json")
    parser.add_argument("--skip-datahunt", action="store_true")
    parser.add_argument("--reuse-engine", action="store_true",
                        help="Take the vLLM half from --out (written as soon as it is measured); run datahunt's.")
    args = parser.parse_args()

    renderer = ChatRenderer.load(args.target)
    prompts = _prompts(args.eval, args.sets, args.prompts, renderer)
    work = Path(tempfile.mkdtemp(prefix="engines-"))
    draft_vllm = convert_export(args.draft, work / "draft-vllm", "vllm")
    runs: dict[str, dict[str, Any]] = {name: {"eval_set": name, "prompts": len(p), "k": args.k} for name, p in
                                       prompts.items()}

    if args.reuse_engine:
        for row in json.loads(args.out.read_text())["runs"]:
            if row["eval_set"] in runs:
                runs[row["eval_set"]].update({k: v for k, v in row.items() if k.startswith("engine") or k == "speedup"})
    else:
        with Vllm(args.vllm_python, args.target, draft_vllm, args.k, work / "vllm_spec.log") as server:
            info = get_server_info(server.url)
            model = str(info.raw.get("served_model_name") or info.model_path)
            for name, ids in prompts.items():
                def read() -> VllmSpecCounters | None:
                    return get_vllm_counters(server.url)
                report = evaluate_vllm(server.url, model, ids, read, max_new_tokens=args.max_new)
                runs[name].update(engine="vllm", engine_version=info.version,
                                  engine_accept_length=report["accept_length"],
                                  engine_per_position_accept=report["per_position_accept"],
                                  engine_spec_tok_s=report["speculative_tok_s"],
                                  engine_completion_tokens=report["completion_tokens"])
                print(name, json.dumps(report), flush=True)
        with Vllm(args.vllm_python, args.target, None, args.k, work / "vllm_base.log") as server, \
                httpx.Client(timeout=600) as client:
            for name, ids in prompts.items():
                base = run_completions(client, server.url, model, ids, args.max_new)
                runs[name]["engine_baseline_tok_s"] = round(base.tokens_per_s, 2)
                runs[name]["speedup"] = round(runs[name]["engine_spec_tok_s"] / base.tokens_per_s, 3)
                print(name, "baseline", round(base.tokens_per_s, 2), flush=True)
        _write(args, runs)  # the engine's half is kept even if datahunt's fails

    if not args.skip_datahunt:
        import torch

        from inference.decoding.hidden_states import target_embeddings
        from training.accept import evaluate
        from training.export import load_draft
        from training.trainer import load_target

        model_t, tokenizer = load_target(args.target, torch.device("cpu"))
        draft, layers = load_draft(args.draft, target_embeddings(model_t).cpu(),
                                   target_layers=model_t.config.num_hidden_layers)
        draft = draft.to(dtype=model_t.dtype)
        for name, ids in prompts.items():
            report = evaluate(model_t, draft, layers, ids, max_new=args.max_new, k=args.k,
                              eos={tokenizer.eos_token_id}, baseline=False)
            runs[name]["datahunt_accept_length"] = round(report.accept_length, 4)
            runs[name]["datahunt_per_position_accept"] = [round(r, 4) for r in report.position_rates]
            runs[name]["engine_over_datahunt"] = round(runs[name]["engine_accept_length"] / report.accept_length, 4)
            print(name, "datahunt", round(report.accept_length, 4), flush=True)

    doc = _write(args, runs)
    print(f"{'set':<10} {'vLLM AL':>8} {'datahunt AL':>11} {'ratio':>6} {'vLLM speedup':>12}")
    for r in doc["runs"]:
        print(f"{r['eval_set']:<10} {r['engine_accept_length']:>8.3f} "
              f"{r.get('datahunt_accept_length', float('nan')):>11.3f} "
              f"{r.get('engine_over_datahunt', float('nan')):>6.3f} {r['speedup']:>12.3f}")


if __name__ == "__main__":
    main()
