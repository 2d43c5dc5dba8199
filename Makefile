# One runner for people and CI (STYLE 11). Every target creates the virtual
# environment and installs what it needs on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: help venv test lint fmt up conformance bench clean

help:
	@echo "make up           run the whole system locally (SQLite, devcloud)"
	@echo "make test         run the test suite"
	@echo "make lint         ruff, mypy (strict), import-linter"
	@echo "make conformance  run the protocol conformance vectors"
	@echo "make bench        run the benchmarks in bench/"

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

fmt: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

conformance: $(STAMP)
	$(PY) -m eval

bench: $(STAMP)
	$(PY) -m bench

up: $(STAMP)
	$(VENV)/bin/airlock up

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
