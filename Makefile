# kvsim — every target creates its own virtual environment on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
KVSIM := $(VENV)/bin/kvsim
STAMP := $(VENV)/.installed

.PHONY: reproduce test test-gpu bench lint type clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,sweep]'
	touch $(STAMP)

reproduce: $(STAMP)
	$(KVSIM) fig2 --out results/fig2

test: $(STAMP)
	$(PY) -m pytest -q -n 2 -m "not gpu"

test-gpu: $(STAMP)
	$(PY) -m pip install --quiet -e '.[gpu]'
	$(PY) -m pytest -q -m gpu

bench: $(STAMP)
	$(PY) -m kvsim.bench --out results/bench

lint: $(STAMP)
	$(VENV)/bin/ruff check kvsim tests
	$(VENV)/bin/ruff format --check kvsim tests

type: $(STAMP)
	$(VENV)/bin/mypy kvsim

clean:
	rm -rf $(VENV) results .pytest_cache
