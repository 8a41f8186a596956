# Every target bootstraps .venv from pyproject.toml on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PROMETHEUS := .tools/prometheus/usr/bin/prometheus

.PHONY: run test lint bench clean tools

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,dev]'
	touch $@

run: $(STAMP)
	$(BIN)/hami-collector demo

test: $(STAMP) $(PROMETHEUS)
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench: $(STAMP) $(PROMETHEUS)
	$(BIN)/python -m bench

tools: $(PROMETHEUS)

# A real Prometheus and promtool for the end-to-end tests: Debian's package,
# unpacked into the project, never installed or started as a service.
$(PROMETHEUS):
	scripts/fetch-prometheus .tools

clean:
	rm -rf $(VENV) .tools .mypy_cache .ruff_cache .pytest_cache .hypothesis *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
