# fedmoo in two commands (README.md, "Quick start"):
#   make run    create .venv on first use, install fedmoo, run the default experiment
#   make test   create .venv on first use, install fedmoo with its test extras, run ruff and pytest
# Other targets: make test-fast (the quick loop: -m "not slow"), make lint, make setup, make clean-venv.
#
# Variables (make VAR=value ...):
#   PYTHON       interpreter that creates the virtualenv (Python >= 3.10; default python3)
#   VENV         virtualenv folder (default .venv; .ci/run passes its cached one)
#   TORCH_INDEX  pip index for torch, e.g. https://download.pytorch.org/whl/cpu for a CPU-only
#                build (without it pip installs PyPI's torch, the CUDA build on Linux, ~6 GB)
#   EXTRAS       extras installed by `make test` (default dev,launchers,flower,tensorboard,trackers)
#   JOBS         pytest-xdist workers (default auto: one per core, at most 4; 0 = no workers)
#   PYTEST_ARGS  more pytest arguments, e.g. PYTEST_ARGS="tests/report -x"
#   ARGS         overrides for `make run`, e.g. ARGS="algo=fedfv rounds=20"

PYTHON ?= python3
VENV ?= .venv
TORCH_INDEX ?=
EXTRAS ?= dev,launchers,flower,tensorboard,trackers
JOBS ?= auto
PYTEST_ARGS ?=
ARGS ?=

BIN := $(VENV)/bin
RUN_STAMP := $(VENV)/.fedmoo-run
TEST_STAMP := $(VENV)/.fedmoo-test
XDIST := $(if $(filter 0,$(JOBS)),-p no:xdist,-n $(JOBS) $(if $(filter auto,$(JOBS)),--maxprocesses 4))
PYTEST := OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -rs $(XDIST)

.PHONY: run test test-fast lint setup clean-venv

run: $(RUN_STAMP)
	$(BIN)/fedmoo run $(ARGS)

test: $(TEST_STAMP) lint
	$(PYTEST) $(PYTEST_ARGS)

test-fast: $(TEST_STAMP)
	$(PYTEST) -m "not slow" $(PYTEST_ARGS)

lint: $(TEST_STAMP)
	$(BIN)/ruff check .

setup: $(TEST_STAMP)

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "fedmoo needs Python >= 3.10; this is " + sys.version.split()[0] + " (make ... PYTHON=python3.11)")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# Reinstalled when pyproject.toml changes. torch first, so TORCH_INDEX can pick its build.
$(RUN_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q torch $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/python -m pip install -q -e .
	@touch $@

$(TEST_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q torch $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/python -m pip install -q -e ".[$(EXTRAS)]"
	@touch $@ $(RUN_STAMP)

clean-venv:
	rm -rf $(VENV)
