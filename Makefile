# kvsim — every target creates its own virtual environment on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
KVSIM := $(VENV)/bin/kvsim
STAMP := $(VENV)/.installed

EXPERIMENTS := block-size kv-budget long-outputs parallel-sampling contiguous-default \
               bookstore traces v0-vs-v1
PAPER := fig2 fig12 fig12-66b fig12-175b fig12-alpaca fig12-66b-alpaca fig12-175b-alpaca fig13 fig14 fig15 fig16 fig17 fig18b preemption prefix-caching
JOBS ?= 2
SCHEDULER ?=
SWEEP_FLAGS ?=
SWEEP := $(KVSIM)

.PHONY: native reproduce test test-vllm test-gpu bench bench-large bench-sweep lint type clean figures experiments $(EXPERIMENTS) \
        $(PAPER) paper calibrate calibrate-gpu sharing

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,sweep]'
	touch $(STAMP)

# The engine compiled by mypyc (kvsim.native): about twice as fast, identical results; rebuilt
# when a compiled source changed (about 1.5 min), a no-op otherwise; without a C compiler the
# Python sources run.
native: $(STAMP)
	$(PY) -m kvsim.native_build

reproduce: native
	$(KVSIM) reproduce fig2 -j $(JOBS)

# The tests that patch the engine run on its Python sources (skipped in the first pass where
# the compiled engine is loaded).
test: native
	KVSIM_QUICK=1 $(PY) -m pytest -q -n 2 --dist worksteal -m "not gpu and not vllm" tests
	KVSIM_QUICK=1 KVSIM_PURE_PYTHON=1 $(PY) -m pytest -q -m "python_sources and not gpu and not vllm" tests

# kvsim's vllm-v1 profile (both scheduler paths) diffed step by step against vLLM's own v1
# Scheduler on 1,000 seeded workloads (tests/vllm/, about 1 min); builds .venv-vllm/ first
# (scripts/vllm_venv.sh: vLLM 0.34.0 on the CPU, about 2 min and 1.8 GB, once).
# VLLM_WORKLOADS=N runs N workloads.
VLLM_WORKLOADS ?= 1000
test-vllm: native
	scripts/vllm_venv.sh
	KVSIM_VLLM_WORKLOADS=$(VLLM_WORKLOADS) $(PY) -m pytest -q -s -p no:cacheprovider -m vllm tests/vllm

test-gpu: $(STAMP)
	$(PY) -m pip install --quiet -e '.[gpu]'
	$(PY) -m pytest -q -m gpu

bench: native
	$(PY) -m kvsim.bench --out results/bench --sweep

# The 1 M-request runs (peak RSS, t(1M)/t(100k)); merged into results/bench/bench.json.
bench-large: native
	$(PY) -m kvsim.bench --out results/bench --large --only azure_conv_100k azure_conv_1m_paged azure_conv_1m_shared_prefix

# Experiments: `make fig2`, `make kv-budget JOBS=4`, `make traces SCHEDULER=tcp://host:8786`
# (SCHEDULER=local starts a local Dask cluster); results in results/NAME/, resumable.
$(EXPERIMENTS): native
	$(SWEEP) sweep experiments/$@.toml -j $(JOBS) $(if $(SCHEDULER),--scheduler $(SCHEDULER)) $(SWEEP_FLAGS)

experiments: $(EXPERIMENTS)

# PNGs under results/NAME/figures/ for every experiment that has results.
figures: $(STAMP)
	@found="$(patsubst %/summary.parquet,%,$(wildcard $(addsuffix /summary.parquet,$(addprefix results/,$(EXPERIMENTS) $(PAPER)))))"; \
	if [ -z "$$found" ]; then echo "no results yet: run e.g. make fig2"; exit 1; fi; \
	$(SWEEP) plot $$found

bench-sweep: native
	$(PY) -m kvsim.bench_sweep

lint: $(STAMP)
	$(VENV)/bin/ruff check kvsim tests
	$(VENV)/bin/ruff format --check kvsim tests

type: $(STAMP)
	$(VENV)/bin/mypy kvsim

# Paper results (kvsim/paper): each an experiment run by the sweep engine and compared with the
# published numbers (kvsim/data/paper/); writes results/NAME/ with NAME.csv and NAME.png.
$(PAPER): native
	$(KVSIM) reproduce $@ -j $(JOBS) $(if $(SCHEDULER),--scheduler $(SCHEDULER))

paper: $(PAPER)

sharing: fig15 prefix-caching

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
	rm -rf $(VENV) results .pytest_cache build kvsim/_native.json
	find kvsim -name "*.so" -delete
