# One runner for people and CI (STYLE 11). Every target creates the virtual
# environment and installs what it needs on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

CHROMIUM := /usr/bin/chromium

.PHONY: help venv sysdeps test lint fmt up conformance bench clean

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

# Browser tests drive Debian's chromium through Playwright; never a downloaded browser.
$(CHROMIUM):
	@if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  echo "installing Debian's chromium for the browser tests"; \
	  apt-get install -y -q chromium >/dev/null 2>&1 || \
	  (apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null); \
	else \
	  echo "chromium is missing: install Debian's 'chromium' package (sudo apt-get install chromium)"; \
	  exit 1; \
	fi

sysdeps: $(CHROMIUM)

# pytest-xdist workers, two a core up to eight: the suite waits on subprocesses, fsync and
# a browser as much as it computes (on 2 cores: 59 % CPU busy with 2 workers, 16 min;
# 11 min with 4). Each test file runs whole on one worker (loadfile), so
# a module's shared stack starts once. Files with a slow test are handed out first:
# tests/conftest.py orders them, and --no-loadscope-reorder keeps that order.
# TEST_JOBS=0 runs in this process, without xdist.
TEST_JOBS ?= $(shell n=$$(( $$(nproc 2>/dev/null || echo 1) * 2 )); [ $$n -gt 8 ] && n=8; echo $$n)

# The suite starts hundreds of Python processes: with PYTHONDONTWRITEBYTECODE set (some
# machines set it), each would compile the project's modules again. Compiled once here,
# into the ignored __pycache__ directories, and every process reads them.
test: $(STAMP) sysdeps
	env -u PYTHONDONTWRITEBYTECODE $(PY) -m compileall -q airlock services webapp devstack bench eval tests
	env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest $(if $(filter 0,$(TEST_JOBS)),,-n $(TEST_JOBS) --dist loadfile --no-loadscope-reorder) $(PYTEST_ARGS)

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
