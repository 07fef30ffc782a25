# The README's commands. Every target installs what it needs into .venv first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PKGS   := -p convstore.domain -p convstore.adapters -p convstore.projections -p convstore.storage

.PHONY: install test lint soak scale demo bench bench-peers package clean

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

# The program alone: no lint or test toolchain.
demo: $(BIN)/python
	$(BIN)/python -m pip install -q --disable-pip-version-check -e .
	rm -rf .demo && mkdir -p .demo
	$(BIN)/python -m convstore.adapters.cli.demo .demo

bench: install
	$(BIN)/python -m benchmarks

# Figure 11 alone: convstore beside the llm package and LangGraph's SqliteSaver.
bench-peers: install
	$(BIN)/python -m benchmarks --only peers

# The package as a user gets it: a wheel and an sdist built, the wheel installed into a
# fresh venv (nothing of the checkout on its path), then `--version` and an ingest; then
# with its `web` extra, `serve` (templates and stylesheet from the wheel).
CAPTURE := examples/anthropic/web_search_citations
package: $(BIN)/python
	rm -rf dist .package
	$(BIN)/python -m pip install -q --disable-pip-version-check build
	$(BIN)/python -m build -q --outdir dist . > /dev/null
	$(PYTHON) -m venv .package
	.package/bin/python -m pip install -q --disable-pip-version-check dist/*.whl
	cd .package && bin/convstore --version
	cd .package && bin/convstore --db store.db ingest --provider anthropic \
		--request ../$(CAPTURE)/1.request.json ../$(CAPTURE)/1.response.sse
	cd .package && bin/convstore --db store.db list
	.package/bin/python -m pip install -q --disable-pip-version-check "$$(ls dist/*.whl)[web]"
	cd .package && bin/python ../tests/packaged_viewer.py

clean:
	rm -rf $(VENV) build dist .package .demo .pytest_cache .mypy_cache .ruff_cache
