# Quick start: `make demo` and `make test`. Each target sets up .venv on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
BASE := $(VENV)/.base
STAMP := $(VENV)/.installed
PYTEST_WORKERS ?= 2

.PHONY: demo test bench lint fmt clean libtpu chromium

# The demo needs jgem alone (BASE); tests, lint and the benchmarks add the extras (STAMP).
$(BASE): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e .
	@touch $(BASE)

$(STAMP): $(BASE)
	$(BIN)/python -m pip install -q -e ".[dev,parity,tools,agentgym,wandb,web]"
	@touch $(STAMP)

# The web envs drive a headless Chromium (jgem/envs/web/chromium.py finds it). Only what needs it installs it
# (`make test`, `make chromium`; the demo does not): where none is on PATH and $JGEM_CHROMIUM is unset, root
# installs Debian's `chromium`; anyone else is told how to get one (the rest of jgem works without it).
CHROMIUM_SETUP = [ -n "$$JGEM_CHROMIUM" ] || command -v chromium >/dev/null || command -v chromium-browser >/dev/null \
	|| command -v google-chrome >/dev/null \
	|| { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
	     && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } \
	|| { echo "make: the web envs need Chromium and none was found: install it as root (apt-get install chromium)," \
	          "or set JGEM_CHROMIUM to a chromium binary (see docs/environments.md)" >&2; }

# libtpu for ahead-of-time TPU compilation on this machine (experiments/tpu_pod/aot.py): installed with
# --target into .libtpu/, off .venv's path, so jax in .venv never tries to start a TPU backend. Only the AOT
# command puts it on sys.path. The version is the one jax's own `tpu` extra pins.
LIBTPU := .libtpu
LIBTPU_PIN = $$($(BIN)/python -c 'import importlib.metadata as m; print(next(r.split(";")[0].strip() for r in m.requires("jax") if r.startswith("libtpu")))')

$(LIBTPU)/.installed: $(STAMP)
	$(BIN)/python -m pip install -q --no-deps --upgrade --target $(LIBTPU) "$(LIBTPU_PIN)"
	@touch $@

libtpu: $(LIBTPU)/.installed

$(VENV)/.bench: $(STAMP)
	$(BIN)/python -m pip install -q -e ".[bench]"
	@touch $@

demo: $(BASE)
	$(BIN)/python -m experiments.demo

chromium:
	@$(CHROMIUM_SETUP)

test: $(STAMP) $(LIBTPU)/.installed chromium
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadgroup -q --durations=15 tests

bench: $(VENV)/.bench
	@for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

lint: $(STAMP)
	$(BIN)/ruff check jgem tests bench experiments scripts
	$(BIN)/ruff format --check jgem tests bench experiments scripts
	$(BIN)/lint-imports --no-cache

fmt: $(STAMP)
	$(BIN)/ruff format jgem tests bench experiments scripts
	$(BIN)/ruff check --fix jgem tests bench experiments scripts

clean:
	rm -rf $(VENV) $(LIBTPU) runs .pytest_cache
