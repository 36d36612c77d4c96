# kvdev developer entry points. `make test` works from a fresh checkout: it builds its own
# virtualenv in .venv (Python >= 3.11) and runs every check CI runs.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: help demo example test check lint typecheck imports unit bench bench-api clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "kvdev needs Python >= 3.11")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[host,dev]'
	touch $@

demo: $(STAMP)  ## (root) the agent configures real links for the bundled example, in a throwaway netns
	packaging/demo/netns-demo.sh $(BIN)/kvdev-agent

example: $(STAMP)  ## validate the bundled example metadata tree, hints and config drive
	$(BIN)/kvdev metadata validate packaging/examples/dra-device-attributes packaging/examples/config-drive/openstack/latest/meta_data.json

test: check unit  ## everything CI runs: lint, types, import contracts, tests

check: lint typecheck imports  ## static checks only

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

imports: $(STAMP)
	$(BIN)/lint-imports

unit: $(STAMP)
	$(BIN)/pytest

bench: $(STAMP)  ## (root) agent benchmarks on real links, not timing-asserted; BENCH_ARGS=--quick
	$(BIN)/python tests/bench/bench_agent.py $(BENCH_ARGS)

bench-api: $(STAMP)  ## (root) GET /v1/status latency and req/s vs two floors; BENCH_ARGS=--quick
	$(BIN)/python tests/bench/bench_api.py $(BENCH_ARGS)

clean:  ## remove the virtualenv and caches
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis build agent/*.egg-info
