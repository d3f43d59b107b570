# The dev loop, one command each (CONTRIBUTING.md). Every target runs the tools of .venv, as
# ./install.sh makes it; `make` alone lists the targets.
VENV ?= .venv
BIN := $(VENV)/bin
PYTHON := $(BIN)/python
# the snapshot tests `make snapshot-update` takes again (any test file with snap_compare)
SNAPSHOT_TESTS ?= tests/test_tui_snapshots.py

.DEFAULT_GOAL := help
.PHONY: help install lint format format-check types contracts test-quick test bench-smoke snapshot-update docs check

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  make %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

install: ## set up .venv for this machine (torch, the project, its test extras)
	./install.sh

lint: ## ruff check: the lint rules of pyproject.toml
	$(BIN)/ruff check .

format: ## ruff format: rewrite the files into the project's format
	$(BIN)/ruff format .

format-check: ## ruff format --check: fail where a file is not formatted
	$(BIN)/ruff format --check .

types: ## mypy, as pyproject's [tool.mypy] sets it (files, strict)
	$(BIN)/mypy

contracts: ## the import contracts of pyproject's [tool.importlinter] (lint-imports)
	$(BIN)/lint-imports

test-quick: ## the fast tests: all but those that run the real trainer (-m "not slow")
	$(PYTHON) -m pytest -q -m "not slow"

test: ## the whole suite: the README's test command
	$(PYTHON) -m pytest -q

bench-smoke: ## the smoke runs of the bench/ scripts (-m bench), kept out of the suite for its time
	$(PYTHON) -m pytest -q -m bench

snapshot-update: ## take the snapshots of SNAPSHOT_TESTS again; read snapshot_report.html first
	$(PYTHON) -m pytest $(SNAPSHOT_TESTS) --snapshot-update

docs: ## write the generated tables of docs/config.md and docs/protocol.md
	$(PYTHON) scripts/gen_docs.py

check: lint format-check types contracts test bench-smoke ## lint, format-check, types, contracts, test, bench-smoke
