# kvsim — every target creates its own virtual environment on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
KVSIM := $(VENV)/bin/kvsim
STAMP := $(VENV)/.installed
# The compiled package (mypyc, setup.py): its own environment, rebuilt when a source changes.
NATIVE_VENV ?= .venv-native
NATIVE_PY := $(NATIVE_VENV)/bin/python
NATIVE_STAMP := $(NATIVE_VENV)/.installed
ENGINE_SOURCES := $(shell find kvsim -name '*.py' 2>/dev/null) setup.py pyproject.toml

EXPERIMENTS := block-size kv-budget long-outputs parallel-sampling contiguous-default \
               bookstore traces v0-vs-v1 vattention spec-decode
PAPER := fig2 fig12 fig12-66b fig12-175b fig12-alpaca fig12-66b-alpaca fig12-175b-alpaca fig13 fig14 fig15 fig16 fig17 fig18b preemption prefix-caching
JOBS ?= 2
SCHEDULER ?=
SWEEP_FLAGS ?=

.PHONY: native reproduce test test-full test-vllm test-gpu bench bench-large bench-sweep lint type \
        clean figures experiments $(EXPERIMENTS) $(PAPER) paper calibrate calibrate-gpu sharing

$(STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,sweep]'
	touch $(STAMP)

# kvsim compiled by mypyc (about twice as fast, the same results) into .venv-native: about
# 2 minutes on 2 cores, again only when a source changed. `make bench` measures this build.
$(NATIVE_STAMP): $(ENGINE_SOURCES)
	$(PYTHON) -m venv $(NATIVE_VENV)
	$(NATIVE_PY) -m pip install --quiet --upgrade pip
	$(NATIVE_PY) -m pip install --quiet 'mypy>=2.4' 'setuptools>=77' wheel
	KVSIM_COMPILE=1 $(NATIVE_PY) -m pip install --quiet --no-build-isolation '.[sweep]'
	touch $(NATIVE_STAMP)

native: $(NATIVE_STAMP)

reproduce: $(STAMP)
	$(KVSIM) reproduce fig2 -j $(JOBS)

# The README's test command: unit, hand-worked, vLLM-mirror, hostile-input, property and quick
# reproduction tests, on the Python sources (no compile step).
test: $(STAMP)
	KVSIM_QUICK=1 $(PY) -m pytest -q -n 2 --dist worksteal -m "not full and not gpu and not vllm" tests

# The long tier: full paper reproductions, kill storms, notebooks, the browser page, the engine
# against the step-by-step reference on every workload, golden results. .ci/run runs it after
# `make test`.
test-full: $(STAMP)
	KVSIM_QUICK=1 $(PY) -m pytest -q -n 2 --dist worksteal -m "full and not gpu and not vllm" tests

# kvsim's vllm-v1 profile against vLLM's own v1 Scheduler, step by step (its own venv).
test-vllm: $(STAMP)
	bash scripts/vllm_venv.sh
	$(PY) -m pytest -q -m vllm tests/vllm

test-gpu: $(STAMP)
	$(PY) -m pip install --quiet -e '.[gpu]'
	$(PY) -m pytest -q -m gpu

bench: $(NATIVE_STAMP)
	$(NATIVE_PY) -m benchmarks.bench --out results/bench --sweep

# The 1 M-request runs (peak RSS, t(1M)/t(100k)); merged into results/bench/bench.json.
bench-large: $(NATIVE_STAMP)
	$(NATIVE_PY) -m benchmarks.bench --out results/bench --large --only azure_conv_100k azure_conv_1m_paged azure_conv_1m_shared_prefix

bench-sweep: $(NATIVE_STAMP)
	$(NATIVE_PY) -m benchmarks.bench_sweep

# Experiments: `make fig2`, `make kv-budget JOBS=4`, `make traces SCHEDULER=tcp://host:8786`
# (SCHEDULER=local starts a local Dask cluster); results in results/NAME/, resumable.
$(EXPERIMENTS): $(STAMP)
	$(KVSIM) sweep experiments/$@.toml -j $(JOBS) $(if $(SCHEDULER),--scheduler $(SCHEDULER)) $(SWEEP_FLAGS)

experiments: $(EXPERIMENTS)

# PNGs under results/NAME/figures/ for every experiment that has results.
figures: $(STAMP)
	@found="$(patsubst %/summary.parquet,%,$(wildcard $(addsuffix /summary.parquet,$(addprefix results/,$(EXPERIMENTS) $(PAPER)))))"; \
	if [ -z "$$found" ]; then echo "no results yet: run e.g. make fig2"; exit 1; fi; \
	$(KVSIM) plot $$found

lint: $(STAMP)
	$(VENV)/bin/ruff check kvsim tests benchmarks scripts
	$(VENV)/bin/ruff format --check kvsim tests benchmarks scripts

type: $(STAMP)
	$(VENV)/bin/mypy kvsim

# Paper results (kvsim/study/paper): each an experiment run by the sweep engine and compared
# with the published numbers (kvsim/data/paper/); writes results/NAME/ with NAME.csv and NAME.png.
$(PAPER): $(STAMP)
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
	rm -rf $(VENV) $(NATIVE_VENV) results .pytest_cache build *.egg-info
