#!/usr/bin/env bash
# Reproduces docs/results/scaling.md from a fresh clone (SmolLM2-135M-Instruct target, one NVIDIA GPU).
#   CPU, repo root:   benchmarks/gpu_scaling.sh prepare          # curated mirror set, prompts, eval, GGUF parts
#   GPU, repo root:   benchmarks/gpu_scaling.sh setup            # wheels if missing, carried files into $WORK
#                     benchmarks/gpu_scaling.sh STAGE [ARGS]     # target | bench-regen | regen | write-prompts |
#                                                                # bench-train | curve
#   CPU, repo root:   benchmarks/gpu_scaling.sh report           # scaling.json, plot, forecast
#   CPU, repo root:   benchmarks/gpu_scaling.sh rehearse         # the whole plan at toy sizes, before device time
#   CPU, repo root:   benchmarks/gpu_scaling.sh prepare-distinct # new prompts of the enlarged mirror (issue #45)
#                     benchmarks/gpu_scaling.sh carry-check PATHS # what one call carries, against its 64 MiB
#   GPU:              benchmarks/gpu_scaling.sh regen-distinct   # one answer to each new prompt
# `gpu-tests` runs the CUDA tests; `probe` times the engine and trainer on a random-weight target of the same
# shape (needs only .carry/tok). Every GPU stage is resumable (state in $WORK/results.json) and sized to end
# within 10 minutes on one H200; run it again after a time-out and it continues.
set -euo pipefail
PY=${PY:-python3}
WORK=${WORK:-/tmp/dh}
RESULTS=${RESULTS:-$WORK/out}
CARRY=${CARRY:-.carry}  # what `prepare` writes and `setup` reads (the carried folders)
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
return_draft() {
  local ckpt run
  ckpt=$(ls -td "$WORK"/runs/*/checkpoints 2>/dev/null | head -1)
  [ -n "$ckpt" ] || return 0
  run=${ckpt%/checkpoints}
  rm -rf "$WORK/returned"
  $PY -c 'import sys; from pathlib import Path; from training.checkpoint_export import export_checkpoint as e
d = e(Path(sys.argv[1]), Path(sys.argv[2])); print(f"returned draft: {d.checkpoint} (step {d.step})")' \
    "$run" "$WORK/returned" || return 1
  cp "$WORK/returned/config.json" "$OUT/draft_config.json"
  split -n 3 -d "$WORK/returned/model.safetensors" "$OUT/draft_part"
  echo "$(basename "$run")" > "$OUT/draft_run.txt"
}
# Whatever happens (a time-out included), the results gathered so far go back in $OUT.
copy_results() {
  if [ -n "${OUT:-}" ] && [ -d "$RESULTS" ]; then cp "$RESULTS"/*.json "$RESULTS"/*.jsonl.xz "$OUT"/ 2>/dev/null || true; fi
}
trap copy_results EXIT
stage=${1:?stage}
shift || true
case "$stage" in
  prepare)
    .venv/bin/datahunt manifest from-mirror "${MIRROR:-../shared/mirror}" -o "$CARRY/manifest.json"
    .venv/bin/datahunt curate -m "$CARRY/manifest.json" -o "$CARRY/curated" --jsonl --mirror "${MIRROR:-../shared/mirror}"
    .venv/bin/python benchmarks/gpu_scaling.py prepare --curated "$CARRY/curated/samples.jsonl" \
      --mirror "${MIRROR:-../shared/mirror}" --carry "$CARRY" "$@"
    ;;
  setup)
    if ! $PY -c "import pydantic, gguf" 2>/dev/null && [ -d .whl ]; then
      $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    fi
    mkdir -p "$WORK/parts" "$WORK/data"
    for p in "$CARRY"/g*/part*; do [ -f "$p" ] && cp "$p" "$WORK/parts/"; done
    [ -d "$CARRY/data" ] && cp "$CARRY"/data/* "$WORK/data/"
    [ -d "$CARRY/tok" ] && mkdir -p "$WORK/tok" && cp "$CARRY"/tok/* "$WORK/tok/"
    # The regenerated set of an earlier session spares the regeneration (`regen` then only answers the overfit
    # and eval prompts); FRESH_REGEN=1 regenerates anyway.
    # Answers 2..N (regenerated_answers_s<k>.jsonl.xz, as `regen --answers N` returns them) join it the same way.
    saved=${SAVED_REGEN:-benchmarks/results/gpu_scaling}  # tracked: it travels with the tree
    if [ -z "${FRESH_REGEN:-}" ] && [ -f "$saved/regenerated_smollm2_16k.jsonl.gz" ] \
        && [ ! -f "$WORK/regen/regenerated.jsonl" ]; then
      mkdir -p "$WORK/regen" && zcat "$saved/regenerated_smollm2_16k.jsonl.gz" > "$WORK/regen/regenerated.jsonl"
      for more in "$saved"/regenerated_answers_s*.jsonl.xz; do
        [ -f "$more" ] && $PY -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)' \
          "$more" >> "$WORK/regen/regenerated.jsonl"
      done
      wc -l "$WORK/regen/regenerated.jsonl"
    fi
    # The target-written prompts (vetted) and their answers, as `write-prompts` returned them.
    if [ -z "${FRESH_REGEN:-}" ] && [ -f "$saved/written_answers.jsonl.xz" ] && [ ! -f "$WORK/written_rows.jsonl" ]; then
      mkdir -p "$WORK/written_regen"
      for name in written_prompts:written_rows.jsonl written_answers:written_regen/regenerated.jsonl; do
        $PY -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
          "$saved/${name%%:*}.jsonl.xz" "$WORK/${name#*:}"
      done
      wc -l "$WORK/written_rows.jsonl" "$WORK/written_regen/regenerated.jsonl"
    fi
    # The new prompts' answers, as `regen-distinct` returned them (tracked after the session that made them).
    if [ -z "${FRESH_REGEN:-}" ] && [ -f "$saved/distinct_answers.jsonl.xz" ] && [ ! -f "$WORK/distinct_regen/regenerated.jsonl" ]; then
      mkdir -p "$WORK/distinct_regen"
      $PY -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
        "$saved/distinct_answers.jsonl.xz" "$WORK/distinct_regen/regenerated.jsonl"
      wc -l "$WORK/distinct_regen/regenerated.jsonl"
    fi
    # SAVED_EVAL=1: the eval prompts' greedy answers from the tree (the tenth session's H200 and the eleventh's H100
    # made the same ones), so a curve-only session skips the `regen` stage.
    if [ -n "${SAVED_EVAL:-}" ] && [ -f "$saved/eval_greedy.jsonl.gz" ] && [ ! -f "$WORK/eval_greedy/regenerated.jsonl" ]; then
      mkdir -p "$WORK/eval_greedy" && zcat "$saved/eval_greedy.jsonl.gz" > "$WORK/eval_greedy/regenerated.jsonl"
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
    if command -v nvidia-smi >/dev/null; then
      nvidia-smi --query-gpu=name,memory.used,memory.total,clocks.sm --format=csv,noheader
    fi
    ls -la "$WORK/parts"
    ;;
  gpu-tests)
    # The top-level conftest needs the catalog stack; these tests need only torch and transformers.
    $PY -m pytest -q -p no:cacheprovider -W default --confcutdir=tests/training tests/training/test_gpu.py
    $PY -m pytest -q -p no:cacheprovider -W default --noconftest tests/inference/decoding/test_static_llama.py
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
  prepare-distinct)
    # The product's path over the enlarged mirror (CURATED=samples.jsonl skips it), then the vetted new prompts.
    curated=${CURATED:-}
    if [ -z "$curated" ]; then
      .venv/bin/datahunt manifest from-mirror "${MIRROR:-../shared/mirror}" -o "$CARRY/distinct/manifest.json"
      .venv/bin/datahunt curate -m "$CARRY/distinct/manifest.json" -o "$CARRY/distinct/curated" --jsonl \
        --mirror "${MIRROR:-../shared/mirror}"
      curated="$CARRY/distinct/curated/samples.jsonl"
    fi
    .venv/bin/python benchmarks/gpu_scaling.py prepare-distinct --curated "$curated" --mirror "${MIRROR:-../shared/mirror}" \
      --out "${DISTINCT_OUT:-benchmarks/results/gpu_scaling}" "$@"
    ;;
  carry-check)
    .venv/bin/python benchmarks/gpu_scaling.py carry-check --carry-paths "$@"
    ;;
  target|bench-regen|regen|write-prompts|bench-train|curve|regen-distinct)
    # In the background and waited for, so a time limit's TERM (`timeout 560 benchmarks/gpu_scaling.sh curve`)
    # reaches the Python process too: a foreground child would outlive this shell and keep training.
    $PY benchmarks/gpu_scaling.py "$stage" --work "$WORK" --out "$RESULTS" --data "$WORK/data" "$@" &
    child=$!
    # STOP_AT (epoch seconds, the call's own end: `STOP_AT=$(( $(date +%s) + 590 ))` as the call starts): the stage
    # is TERMed STOP_RESERVE_S (default 40) before it, which leaves the step in flight, its checkpoint and the
    # returned draft time to finish inside the call. The eleventh session's call gave them 12 s by hand-reckoning
    # and its call limit ended all three: no draft came back.
    watcher=
    if [ -n "${STOP_AT:-}" ]; then
      wait_s=$(( STOP_AT - ${STOP_RESERVE_S:-40} - $(date +%s) ))
      echo "the stage is stopped in $wait_s s (STOP_AT less ${STOP_RESERVE_S:-40} s)" >&2
      # Its own sleep is ended with it, and nothing holds the call's output open once the stage is done.
      ( trap 'kill "$nap" 2>/dev/null; exit 0' TERM; sleep "$(( wait_s > 0 ? wait_s : 0 ))" & nap=$!; wait "$nap"
        kill -TERM "$child" 2>/dev/null ) >/dev/null 2>&1 &
      watcher=$!
    fi
    # `|| true`: under `set -e` the child's non-zero status would end the script inside the trap, before the
    # draft below goes back (the ninth and tenth sessions' timed-out calls returned none). `trap ''` first:
    # `timeout` signals this script and then its whole group, and a late second copy (a loaded machine) would kill
    # the export below; ignored here, it is ignored by what the script starts from then on too.
    trap 'trap "" TERM INT; kill -TERM "$child" 2>/dev/null; wait "$child" || true' TERM INT
    rc=0; wait "$child" || rc=$?
    [ -z "$watcher" ] || kill -TERM "$watcher" 2>/dev/null || true
    # RETURN_DRAFT=1: the draft of the newest checkpoint of the run trained last goes back in $OUT (bf16, in three
    # parts under 16 MiB), finished or not: a machine lost before the next call leaves a draft to evaluate.
    if [ "$stage" = curve ] && [ -n "${RETURN_DRAFT:-}" ] && [ -n "${OUT:-}" ]; then return_draft || true; fi
    exit "$rc"
    ;;
  report)
    .venv/bin/python benchmarks/gpu_scaling.py report --raw benchmarks/results/gpu_scaling/scaling_raw.json \
      --out docs/results "$@"
    ;;
  rehearse)
    # Every stage of the device plan, in its order, at toy sizes on this machine's CPU (a few minutes): prepare
    # from the tests' trimmed mirror, setup, the real target cut to its first 3 layers, regen (two answers),
    # the curve (head-init choice, points, control, timing at k 5 and 3, split points, sampling, overfit) and
    # the report, all under $WORK; nothing lands in the published results. A stage that breaks here would have
    # cost device time.
    export CARRY="$WORK/carry" FRESH_REGEN=1 FRESH_CURVE=1 PY="${PY/#python3/.venv/bin/python}"
    rm -rf "$WORK" && mkdir -p "$WORK"
    MIRROR="${MIRROR:-tests/data/mirror}" bash "$0" prepare --parts 2
    bash "$0" setup
    bash "$0" target --layers 3
    toy=(--max-prompt-tokens 256 --max-tokens 16 --eval-per-set 2 --eval-max-new 12 --overfit-rows 8)
    bash "$0" regen "${toy[@]}" --rows 24 --slots 8 --answers 2
    bash "$0" write-prompts "${toy[@]}" --slots 8 --write-per-category 3 --write-max-tokens 64 \
      --write-categories math reasoning \
      --writer-target "$WORK/target_full"
    bash "$0" curve "${toy[@]}" --scales 8 32 --control-scales 8 --base 8 --overfit-epochs 2 --epochs 1 \
      --batch-tokens 1024 --max-length 320 --draft-vocab 512 --timed-prompts 2 --sampled-prompts 2 \
      --timed-ks 5 3 --split-points --head-init auto --budget-s 600
    mkdir -p "$WORK/returned_out"
    OUT="$WORK/returned_out" RETURN_DRAFT=1 bash "$0" curve "${toy[@]}" --source mixed --scales 40 --base 8 \
      --epochs 1 --batch-tokens 1024 --max-length 320 --draft-vocab 512 --points-only --head-init random --budget-s 600
    # The distinct-prompt arm (issue #45): new prompts of the curated set, one answer each, a point of each curve.
    CURATED="$CARRY/curated/samples.jsonl" DISTINCT_OUT="$RESULTS" bash "$0" prepare-distinct --max-prompt-tokens 256 \
      --old-answers "$WORK/regen/regenerated.jsonl" --written-prompts "$WORK/written_rows.jsonl"
    bash "$0" regen-distinct "${toy[@]}" --slots 8 --rows 12 --distinct-prompts "$RESULTS/distinct_prompts.jsonl.xz"
    for source in distinct distinct-mix; do
      bash "$0" curve "${toy[@]}" --source "$source" --scales 40 --base 8 --epochs 1 --batch-tokens 1024 \
        --max-length 320 --draft-vocab 512 --points-only --head-init random --budget-s 600
    done
    .venv/bin/python benchmarks/gpu_scaling.py report --raw "$RESULTS/scaling_raw.json" --out "$WORK/report"
    ;;
  *) echo "unknown stage $stage" >&2; exit 2 ;;
esac
