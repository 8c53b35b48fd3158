# datahunt: `make run` (offline campaign end to end) and `make test` work on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install -q --disable-pip-version-check -c constraints.txt

.PHONY: run test test-fast lint bench clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip

# Base install: what the campaign, catalog, service and curation need (no torch).
$(VENV)/.installed-base: $(VENV)/bin/python pyproject.toml constraints.txt
	$(PIP) -e .
	touch $@

# Everything: training (torch==2.13.0, the CPU wheel) and the test tools.
$(VENV)/.installed-all: $(VENV)/bin/python pyproject.toml constraints.txt
	$(PIP) torch==2.13.0
	$(PIP) -e '.[train,dev]'
	touch $@ $(VENV)/.installed-base

run: $(VENV)/.installed-base
	DATAHUNT_OFFLINE=1 $(VENV)/bin/datahunt campaign run --offline

test: $(VENV)/.installed-all
	$(PY) -m pytest -q -m "not realserver"

test-fast: $(VENV)/.installed-all
	$(PY) -m pytest -q -m "not realserver and not postgres and not browser and not slow"

lint: $(VENV)/.installed-all
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy core agents graph curation inference training server

clean:
	rm -rf $(VENV) .datahunt .pytest_cache
