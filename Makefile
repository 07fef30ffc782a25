# The README's commands. Every target installs what it needs into .venv first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PKGS   := -p convstore.domain -p convstore.adapters -p convstore.projections -p convstore.storage

.PHONY: install test lint soak scale demo bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Strict editable mode links each module into a tree mypy can read; re-run after adding files.
install: $(BIN)/python
	$(BIN)/python -m pip install -q --disable-pip-version-check \
		--config-settings editable_mode=strict -e '.[test]'

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy $(PKGS)

test: lint
	$(BIN)/pytest

# The slow reliability scenarios (kill -9 loops, full-size concurrency); .ci/run runs them too.
soak: install
	$(BIN)/pytest -m soak

# A million events on PostgreSQL with eight writers and the followers; prints a table of figures.
scale: install
	$(BIN)/python -m benchmarks.scale

demo: install
	rm -rf .demo && mkdir -p .demo
	$(BIN)/python -m convstore.adapters.cli.demo .demo

bench: install
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) build .demo .pytest_cache .mypy_cache .ruff_cache
