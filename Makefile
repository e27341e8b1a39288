# Ledgerflow — the two commands a newcomer needs: `make run` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# One test database per checkout, so parallel checkouts on one machine never collide.
DB_TAG := $(shell basename "$(CURDIR)" | tr -c 'a-zA-Z0-9\n' '_' | tr 'A-Z' 'a-z')
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/ledgerflow_$(DB_TAG)
PYTEST_ARGS ?=

.PHONY: venv run test lint bench soak system-deps clean

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $@

# System packages the suite drives for real (CUPS, Chromium, Graphviz); installed from apt when missing.
system-deps:
	bash scripts/ensure_system_deps.sh

run: venv
	$(PY) scripts/run_dev.py

test: venv system-deps
	DATABASE_URL="$(TEST_DATABASE_URL)" CELERY_BROKER_URL="$${CELERY_BROKER_URL:-redis://127.0.0.1:6379/15}" \
		CELERY_TASK_DEFAULT_QUEUE="ledgerflow-test-$(DB_TAG)" \
		$(PY) -m pytest $(PYTEST_ARGS)

# The model-based protocol tests with a long search budget (make test runs them with a small one).
soak: venv
	DATABASE_URL="$(TEST_DATABASE_URL)" HYPOTHESIS_PROFILE=soak $(PY) -m pytest -q -k model_based $(PYTEST_ARGS)

lint: venv
	$(VENV)/bin/ruff check .

bench: venv
	$(PY) -m bench $(BENCH_ARGS)

clean:
	rm -rf var .pytest_cache
