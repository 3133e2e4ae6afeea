# kvsim — every target creates its own virtual environment on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
KVSIM := $(VENV)/bin/kvsim
STAMP := $(VENV)/.installed

.PHONY: reproduce test test-gpu bench lint type clean fig13 fig12 preemption calibrate calibrate-gpu sharing

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
	$(PY) -m kvsim.cli_sharing --out results/sharing

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
