# kiban: `make demo` and `make test` bootstrap everything they need from nothing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: setup demo test lint typecheck unit clean

setup: $(STAMP)
	# kiban is installed editable, and CI (and this repository's tools) run with
	# PYTHONDONTWRITEBYTECODE=1: without this, every `kiban` call compiles the sources it
	# imports (tens of ms of `kiban ls`; kiban bench cli reports it). A stale cache is found by
	# its mtime and the source compiled again, so edits stay correct; this refreshes them.
	$(BIN)/python -m compileall -q src/kiban
	bash scripts/build-web.sh
	bash scripts/ensure-openmpi.sh || echo "(optional: MPI jobs need Open MPI: openmpi-bin)"
	$(BIN)/python -m kiban.devtools.router_native || echo "(optional: needs a C compiler)"

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,demo,notebooks]'
	touch $(STAMP)

demo: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" bash scripts/demo.sh

lint: setup
	$(BIN)/ruff check src tests examples
	$(BIN)/lint-imports --no-logo

typecheck: setup
	$(BIN)/mypy

test: setup
	bash scripts/ensure-postgres.sh
	bash scripts/ensure-openmpi.sh
	bash scripts/ensure-mpich.sh
	bash scripts/ensure-kube.sh
	bash scripts/ensure-prometheus.sh
	bash scripts/ensure-chromium.sh
	$(BIN)/ruff check src tests examples
	$(BIN)/lint-imports --no-logo
	$(BIN)/mypy
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/pytest
	KIBAN_ROUTER_NATIVE=0 $(BIN)/pytest -q tests/serving/router

unit: setup
	$(BIN)/pytest -m "not e2e and not postgres and not kube and not prometheus and not browser"

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
