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
               reservation-24gib traces v0-vs-v1 vattention spec-decode hybrid-groups
PAPER := fig2 fig12 fig12-66b fig12-175b fig12-alpaca fig12-66b-alpaca fig12-175b-alpaca fig13 fig14 fig15 fig16 fig17 fig18b preemption prefix-caching
JOBS ?= 2
SCHEDULER ?=
SWEEP_FLAGS ?=

FLEET_EXPERIMENTS := fleet-routing fleet-disagg fleet-grid

.PHONY: offload offload-disk native reproduce test test-full test-vllm test-gpu bench bench-large bench-sweep lint type \
        clean figures notebooks experiments $(EXPERIMENTS) $(PAPER) paper calibrate calibrate-gpu calibrate-parts sharing \
        fleet $(FLEET_EXPERIMENTS) fleet-cheapest \
        validate calibrate-runs

$(STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'  # dev brings kvsim[all]: every extra the tests use
	touch $(STAMP)

# kvsim compiled by mypyc (about twice as fast, the same results) into .venv-native: about
# 2 minutes on 2 cores, again only when a source changed. `make bench` measures this build.
$(NATIVE_STAMP): $(ENGINE_SOURCES)
	$(PYTHON) -m venv $(NATIVE_VENV)
	$(NATIVE_PY) -m pip install --quiet --upgrade pip
	$(NATIVE_PY) -m pip install --quiet 'mypy>=2.4' 'setuptools>=77' wheel
	# the dependencies first: mypyc type-checks the engine against them (pydantic, numpy...)
	$(NATIVE_PY) -m pip install --quiet '.[all]'
	KVSIM_COMPILE=1 $(NATIVE_PY) -m pip install --quiet --no-build-isolation --no-deps --force-reinstall .
	touch $(NATIVE_STAMP)

native: $(NATIVE_STAMP)

reproduce: $(STAMP)
	$(KVSIM) reproduce fig2 -j $(JOBS)

# The README's test command: unit, hand-worked, vLLM-mirror, hostile-input, property and quick
# reproduction tests, on the Python sources (no compile step).
test: $(STAMP)
	KVSIM_QUICK=1 $(PY) -m pytest -q -rs -n 2 --dist worksteal -m "not full and not gpu and not vllm" tests

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

# The benchmarks run the compiled package of .venv-native: from inside that folder, with the
# repository appended to the path (for benchmarks/), so ./kvsim's sources do not shadow it.
# (the traces: KVSIM_DATA, else ../shared/data/traces beside the clone, as kvsim looks)
BENCH = cd $(NATIVE_VENV) && KVSIM_DATA="$${KVSIM_DATA:-$(CURDIR)/../shared/data/traces}" \
	bin/python -c "import sys; sys.path.append('$(CURDIR)'); \
	from benchmarks.bench import main; main(sys.argv[1:])"
bench: $(NATIVE_STAMP)
	$(BENCH) --out $(CURDIR)/results/bench --sweep

# The 1 M-request runs (peak RSS); merged into results/bench/bench.json.
bench-large: $(NATIVE_STAMP)
	$(BENCH) --out $(CURDIR)/results/bench --large --repeat 1 --only azure_conv_1m_paged azure_conv_1m_shared_prefix fleet_16x100k

bench-sweep: $(NATIVE_STAMP)
	cd $(NATIVE_VENV) && bin/python -c "import sys; sys.path.append('$(CURDIR)'); \
	from benchmarks.bench_sweep import main; main()"

# Experiments: `make fig2`, `make kv-budget JOBS=4`, `make traces SCHEDULER=tcp://host:8786`
# (SCHEDULER=local starts a local Dask cluster); results in results/NAME/, resumable, then the
# standard figures of `kvsim plot` in results/NAME/figures/ (SWEEP_FLAGS=--quick: results/quick/).
RESULTS_ROOT = results$(if $(findstring --quick,$(SWEEP_FLAGS)),/quick)
$(EXPERIMENTS): $(STAMP)
	$(KVSIM) sweep experiments/$@.toml -j $(JOBS) $(if $(SCHEDULER),--scheduler $(SCHEDULER)) $(SWEEP_FLAGS)
	$(KVSIM) plot $(RESULTS_ROOT)/$@

experiments: $(EXPERIMENTS) offload offload-disk

# KV offloading to CPU memory (docs/kv2026.md): CPU buffer size x link bandwidth on the Mooncake
# conversation trace (offload-disk: a disk tier's size x drive below a 64 GiB CPU tier), or on
# synthetic multi-turn chat when the trace is not in KVSIM_DATA (else ../shared/data/traces,
# where kvsim looks); then its figures, results/NAME/figures/ (offload.png is
# docs/kv2026-offload.png, and offload-disk's docs/kv2026-offload-disk.png).
OFFLOAD_TRACE = $${KVSIM_DATA:-$(CURDIR)/../shared/data/traces}/mooncake_conversation.jsonl
offload offload-disk: $(STAMP)
	@if [ -f "$(OFFLOAD_TRACE)" ]; then name=$@; else name=$@-synthetic; \
	  echo "$@: no $(OFFLOAD_TRACE) (set KVSIM_DATA to the traces' folder, or kvsim data fetch); running experiments/$$name.toml"; fi; \
	$(KVSIM) sweep experiments/$$name.toml -j $(JOBS) $(if $(SCHEDULER),--scheduler $(SCHEDULER)) $(SWEEP_FLAGS) && \
	$(KVSIM) plot $(RESULTS_ROOT)/$$name && \
	$(PY) -c "from kvsim.study.offload_figure import save_offload_figure as s; print(s('$(RESULTS_ROOT)/$$name'))"

# Fleets (docs/fleet.md): routers on the Mooncake trace, P/D splits against co-located replicas,
# then their figures (results/NAME/figures/fleet.png); the traces come from KVSIM_DATA (without
# them the sweep stops at once with one error saying where it looked and how to get them).
$(FLEET_EXPERIMENTS): $(STAMP)
	$(KVSIM) sweep experiments/$@.toml -j $(JOBS) $(if $(SCHEDULER),--scheduler $(SCHEDULER)) $(SWEEP_FLAGS)
	$(KVSIM) plot $(RESULTS_ROOT)/$@

# The cheapest fleet for Llama-3.1-70B on the Azure conversation lengths at 20 req/s (1,200
# requests: one minute of arrivals), p99 TTFT <= 2 s and p99 TPOT <= 50 ms, over H100/H200/A100
# x TP 2/4/8 x up to 32 replicas: results/plan/cheapest/ (answer.json, points.csv, frontier.png).
fleet-cheapest: $(STAMP)
	$(KVSIM) plan --cheapest --gpus h100-80gb,h200,a100-80gb --tp 2,4,8 --replicas 32 \
		--target "time_to_first_token_seconds_p99<=2" \
		--target "request_time_per_output_token_seconds_p99<=0.05" \
		--set model=llama-3.1-70b --set scheduler.max_model_len=16384 \
		--set workload=azure_conv --set workload.arrival=poisson --set workload.rate_per_s=20 \
		--set workload.num_requests=1200 -j $(JOBS) $(if $(SCHEDULER),--scheduler $(SCHEDULER))

fleet: $(FLEET_EXPERIMENTS) fleet-cheapest

# PNGs under results/NAME/figures/ for every experiment that has results.
figures: $(STAMP)
	@found="$(sort $(foreach f,summary.parquet summary.csv,$(patsubst %/$(f),%,$(wildcard $(addsuffix /$(f),$(addprefix results/,$(EXPERIMENTS) $(PAPER)))))))"; \
	if [ -z "$$found" ]; then echo "no results yet: run e.g. make fig2"; exit 1; fi; \
	$(KVSIM) plot $$found

# The notebooks' stored outputs: each notebook executed in quick mode (KVSIM_QUICK=1, seconds),
# its outputs (figures as PNG) and the fingerprint of its inputs saved in it
# (tests/notebook_tools.py; make test checks the fingerprints, make test-full executes them).
notebooks: $(STAMP)
	$(PY) -m tests.notebook_tools refresh

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

# GPU calibration (docs/calibration.md). `calibrate` writes the kernel table under results/;
# `calibrate-gpu` is the one-shot runbook for a GPU machine (kvsim/data/calibration/README.md):
# scripts/gpu_session.sh runs the GPU tests, the paged/contiguous kernel table and the step cost's
# parts (PyTorch) into $(GPU_OUT), each with its own time limit (about a minute on an H200).
# `calibrate-parts` fits the step cost on the shipped H200 steps and prints the report (no GPU).
GPU ?= h200
GPU_OUT ?= results/gpu
calibrate: $(STAMP)
	$(PY) -m kvsim.calibrate --out results/calibration/$(GPU).csv

calibrate-gpu:
	OUT=$(GPU_OUT) bash scripts/gpu_session.sh

calibrate-parts: $(STAMP)
	$(KVSIM) calibrate --fit-parts kvsim/data/calibration/parts/$(GPU) --out results/calibration/$(GPU)-steps.toml

# kvsim held against measured real-vLLM runs ($$KVSIM_REAL_VLLM, default ../shared/data/real-vllm):
# replays the validate split, the RTX 4090 run and the train runs, and writes the error table
# (kvsim beside BLIS and LLMServingSim) into docs/validate.md, its short form into README.md,
# and results/validate/ (3-6 min).
validate: $(STAMP)
	$(KVSIM) validate --table --docs docs/validate.md --readme README.md

# Refit the step cost on the train split (no GPU; about an hour on 2 cores, replays cached in
# results/calibrate/): writes kvsim/data/cost_fit.toml.
calibrate-runs: $(STAMP)
	$(KVSIM) calibrate --from-runs

clean:
	rm -rf $(VENV) $(NATIVE_VENV) results .pytest_cache build *.egg-info
