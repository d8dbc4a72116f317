# Quick start: `make demo` and `make test`. Each target sets up .venv on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_WORKERS ?= 2

.PHONY: demo test bench lint fmt clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[dev,parity,tools,agentgym]"
	@touch $(STAMP)

$(VENV)/.bench: $(STAMP)
	$(BIN)/python -m pip install -q -e ".[bench]"
	@touch $@

demo: $(STAMP)
	$(BIN)/python -m experiments.demo

test: $(STAMP)
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadgroup -q tests

bench: $(VENV)/.bench
	@for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

lint: $(STAMP)
	$(BIN)/ruff check jgem tests bench experiments
	$(BIN)/ruff format --check jgem tests bench experiments

fmt: $(STAMP)
	$(BIN)/ruff format jgem tests bench experiments
	$(BIN)/ruff check --fix jgem tests bench experiments

clean:
	rm -rf $(VENV) runs .pytest_cache
