#!/usr/bin/env bash
# Reproduces docs/results/scaling.md from a fresh clone (SmolLM2-135M-Instruct target, one NVIDIA GPU).
#   CPU, repo root:   benchmarks/gpu_scaling.sh prepare          # curated mirror set, prompts, eval, GGUF parts
#   GPU, repo root:   benchmarks/gpu_scaling.sh setup            # wheels if missing, carried files into $WORK
#                     benchmarks/gpu_scaling.sh STAGE [ARGS]     # target | bench-regen | regen | bench-train | curve
#   CPU, repo root:   benchmarks/gpu_scaling.sh report           # scaling.json, plot, forecast
# `gpu-tests` runs the CUDA tests; `probe` times the engine and trainer on a random-weight target of the same
# shape (needs only .carry/tok). Every GPU stage is resumable (state in $WORK/results.json) and sized to end
# within 10 minutes on one H200; run it again after a time-out and it continues.
set -euo pipefail
PY=${PY:-python3}
WORK=${WORK:-/tmp/dh}
RESULTS=${RESULTS:-$WORK/out}
[ -d /tmp/site ] && export PYTHONPATH=/tmp/site:$PWD
export PYTHONUNBUFFERED=1
random_target() {
    $PY - "$WORK" <<'EOF'
import sys, torch, shutil
from pathlib import Path
from safetensors.torch import save_model
from transformers import AutoConfig, AutoModelForCausalLM
work = Path(sys.argv[1]); tok = work / "tok"; target = work / "target"
if not (target / "model.safetensors").exists():
    target.mkdir(parents=True, exist_ok=True)
    cfg = AutoConfig.from_pretrained(tok)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16)
    save_model(model, str(target / "model.safetensors"))
    for f in tok.iterdir():
        shutil.copy(f, target / f.name)
print("random target ready")
EOF
}
# Whatever happens (a time-out included), the results gathered so far go back in $OUT.
copy_results() { if [ -n "${OUT:-}" ] && [ -d "$RESULTS" ]; then cp "$RESULTS"/*.json "$OUT"/ 2>/dev/null || true; fi; }
trap copy_results EXIT
stage=${1:?stage}
shift || true
case "$stage" in
  prepare)
    .venv/bin/datahunt manifest from-mirror "${MIRROR:-../shared/mirror}" -o .carry/manifest.json
    .venv/bin/datahunt curate -m .carry/manifest.json -o .carry/curated --jsonl --mirror "${MIRROR:-../shared/mirror}"
    .venv/bin/python benchmarks/gpu_scaling.py prepare --curated .carry/curated/samples.jsonl \
      --mirror "${MIRROR:-../shared/mirror}" "$@"
    ;;
  setup)
    if ! $PY -c "import pydantic, gguf" 2>/dev/null && [ -d .whl ]; then
      $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    fi
    mkdir -p "$WORK/parts" "$WORK/data"
    for p in .carry/g*/part*; do [ -f "$p" ] && cp "$p" "$WORK/parts/"; done
    [ -d .carry/data ] && cp .carry/data/* "$WORK/data/"
    [ -d .carry/tok ] && mkdir -p "$WORK/tok" && cp .carry/tok/* "$WORK/tok/"
    # The regenerated set of an earlier session spares the regeneration (`regen` then only answers the overfit
    # and eval prompts); FRESH_REGEN=1 regenerates anyway.
    saved=benchmarks/results/gpu_scaling/regenerated_smollm2_16k.jsonl.gz  # tracked: it travels with the tree
    if [ -z "${FRESH_REGEN:-}" ] && [ -f "$saved" ] && [ ! -f "$WORK/regen/regenerated.jsonl" ]; then
      mkdir -p "$WORK/regen" && zcat "$saved" > "$WORK/regen/regenerated.jsonl"
    fi
    # The points measured in earlier sessions (tracked) are not trained again: the curve skips what results.json
    # holds. The regeneration entries stay out: their files live only on the machine that made them.
    raw=benchmarks/results/gpu_scaling/scaling_raw.json
    if [ -z "${FRESH_CURVE:-}" ] && [ -f "$raw" ] && [ ! -f "$WORK/results.json" ]; then
      $PY - "$raw" "$WORK/results.json" <<'EOF'
import json, sys
from pathlib import Path
raw = json.loads(Path(sys.argv[1]).read_text())
local = ("regen", "regen_answers", "regen_greedy_overfit", "eval_greedy")
Path(sys.argv[2]).write_text(json.dumps({k: v for k, v in raw.items() if k not in local}, indent=1))
print(f"results.json seeded with {len(raw['runs'])} runs of earlier sessions")
EOF
    fi
    nvidia-smi --query-gpu=name,memory.used,memory.total,clocks.sm --format=csv,noheader
    ls -la "$WORK/parts"
    ;;
  gpu-tests)
    # The top-level conftest needs the catalog stack; these tests need only torch and transformers.
    $PY -m pytest -q -p no:cacheprovider -W default --confcutdir=tests/training tests/training/test_gpu.py
    $PY -m pytest -q -p no:cacheprovider -W default --noconftest tests/inference/test_static_llama.py
    ;;
  probe)
    random_target
    $PY benchmarks/gpu_scaling.py bench-regen --work "$WORK" --out "$RESULTS" --data "$WORK/data" \
      --max-tokens 128 --bench-rows 1024 "$@"
    $PY - "$WORK" <<'EOF'
import json, sys
from pathlib import Path
work = Path(sys.argv[1])
rows = [json.loads(l) for l in (work / "bench_engine_refill" / "regenerated.jsonl").read_text().split("\n") if l]
(work / "regen").mkdir(exist_ok=True)
(work / "regen" / "regenerated.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
EOF
    $PY benchmarks/gpu_scaling.py bench-train --work "$WORK" --out "$RESULTS" --data "$WORK/data" \
      --bench-train-rows 1024 --bench-train-steps 25
    ;;
  profile)
    [ -f "$WORK/target/model.safetensors" ] || random_target
    $PY benchmarks/gpu_profile.py --target "$WORK/target" --out "$RESULTS/gpu_profile.json" "$@"
    ;;
  target|bench-regen|regen|bench-train|curve)
    # In the background and waited for, so a time limit's TERM (`timeout 560 benchmarks/gpu_scaling.sh curve`)
    # reaches the Python process too: a foreground child would outlive this shell and keep training.
    $PY benchmarks/gpu_scaling.py "$stage" --work "$WORK" --out "$RESULTS" --data "$WORK/data" "$@" &
    child=$!
    trap 'kill -TERM "$child" 2>/dev/null; wait "$child"' TERM INT
    wait "$child"
    ;;
  report)
    .venv/bin/python benchmarks/gpu_scaling.py report --raw benchmarks/results/gpu_scaling/scaling_raw.json \
      --out docs/results "$@"
    ;;
  *) echo "unknown stage $stage" >&2; exit 2 ;;
esac
