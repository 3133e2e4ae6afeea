# kvsim — every target creates its own virtual environment on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
KVSIM := $(VENV)/bin/kvsim
STAMP := $(VENV)/.installed

EXPERIMENTS := fig2 block-size kv-budget long-outputs parallel-sampling contiguous-default \
               bookstore traces
JOBS ?= 2
SCHEDULER ?=
SWEEP_FLAGS ?=
SWEEP := $(PY) -m kvsim.cli_sweep

.PHONY: reproduce test test-gpu bench bench-sweep lint type clean figures experiments $(EXPERIMENTS)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,sweep]'
	touch $(STAMP)

reproduce: $(STAMP)
	$(KVSIM) fig2 --out results/fig2

test: $(STAMP)
	KVSIM_QUICK=1 $(PY) -m pytest -q -n 2 -m "not gpu" tests --nbmake notebooks

test-gpu: $(STAMP)
	$(PY) -m pip install --quiet -e '.[gpu]'
	$(PY) -m pytest -q -m gpu

bench: $(STAMP)
	$(PY) -m kvsim.bench --out results/bench

# Experiments: `make fig2`, `make kv-budget JOBS=4`, `make traces SCHEDULER=tcp://host:8786`
# (SCHEDULER=local starts a local Dask cluster); results in results/NAME/, resumable.
$(EXPERIMENTS): $(STAMP)
	$(SWEEP) sweep experiments/$@.toml -j $(JOBS) $(if $(SCHEDULER),--scheduler $(SCHEDULER)) $(SWEEP_FLAGS)

experiments: $(EXPERIMENTS)

# PNGs under results/NAME/figures/ for every experiment that has results.
figures: $(STAMP)
	@found="$(patsubst %/summary.parquet,%,$(wildcard $(addsuffix /summary.parquet,$(addprefix results/,$(EXPERIMENTS)))))"; \
	if [ -z "$$found" ]; then echo "no results yet: run e.g. make fig2"; exit 1; fi; \
	$(SWEEP) plot $$found

bench-sweep: $(STAMP)
	$(PY) -m kvsim.bench_sweep

lint: $(STAMP)
	$(VENV)/bin/ruff check kvsim tests
	$(VENV)/bin/ruff format --check kvsim tests

type: $(STAMP)
	$(VENV)/bin/mypy kvsim

clean:
	rm -rf $(VENV) results .pytest_cache
