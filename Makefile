# kvsim — every target creates its own virtual environment on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
KVSIM := $(VENV)/bin/kvsim
STAMP := $(VENV)/.installed

EXPERIMENTS := fig2 block-size kv-budget long-outputs parallel-sampling contiguous-default \
               bookstore traces v0-vs-v1
JOBS ?= 2
SCHEDULER ?=
SWEEP_FLAGS ?=
SWEEP := $(KVSIM)

.PHONY: reproduce test test-gpu bench bench-sweep lint type clean figures experiments $(EXPERIMENTS) \
        fig13 fig12 preemption calibrate calibrate-gpu sharing

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

# Paper reproductions (kvsim.repro): Figure 13 batch sizes, Figure 12 rate ratios, §7.3 preemption.
fig13: $(STAMP)
	$(PY) -m kvsim.repro fig13 --out results/fig13

fig12: $(STAMP)
	$(PY) -m kvsim.repro fig12 --out results/fig12

preemption: $(STAMP)
	$(PY) -m kvsim.repro preemption --out results/preemption

# Sharing (issue 3): Figure 15 KV saved by parallel sampling / beam search -> results/sharing/
# savings.csv, Mooncake prefix-cache hit rates and the shared-prefix plot (hit_rates.png).
sharing: $(STAMP)
	$(KVSIM) sharing --out results/sharing

# GPU calibration of the paged/contiguous KV-read factor. `calibrate` writes under results/;
# `calibrate-gpu` is the one-shot runbook for a GPU machine (see kvsim/data/calibration/README.md):
# it needs only numpy, typer, pytest and CuPy in $(GPU_PY) (no venv, no network), runs the GPU
# tests, then writes the table the cost model ships for the GPU preset (GPU=h200; ~2-3 minutes).
GPU ?= h200
GPU_PY ?= python3
calibrate: $(STAMP)
	$(PY) -m kvsim.calibrate --out results/calibration/$(GPU).csv

calibrate-gpu:
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
	PYTHONPATH=. $(GPU_PY) -m pytest -q -p no:cacheprovider -m gpu tests/calibrate/test_kernel_gpu.py
	PYTHONPATH=. $(GPU_PY) -m kvsim.calibrate --out kvsim/data/calibration/$(GPU).csv

clean:
	rm -rf $(VENV) results .pytest_cache
