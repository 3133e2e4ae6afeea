"""``make bench``: simulator speed and memory, each figure printed beside its target (issue 28).

Runs (Llama-3.1-8B on an A100-80GB unless said otherwise; the profile's defaults, so ``paged``
under ``vllm-v1`` caches prefixes):

* ``azure_conv_100k``: 100,000 requests resampled from the Azure LLM inference 2023 conversation
  trace's lengths, Poisson arrivals at the trace's mean rate (19,366 requests in 3,502 s), paged,
  full accounting (one memory row per engine event).
* ``azure_conv_100k_v0``: the same workload under the ``vllm-v0`` profile (the paper's engine).
* ``fig2``: the 16 points of ``make reproduce`` (``experiments/fig2.toml``: 4 seeds x 4 systems of
  5,000 requests), their simulations' CPU time summed (``make reproduce``'s simulation time).
* ``azure_conv_10k_<allocator>``: the trace's first 10,000 requests with their real arrivals under
  every allocator (contiguous ones with the Pow2 reservation), timed in one process beside
  ``paged`` (``cpu_ratio_to_paged``).
* ``mooncake_conv_<policy>``: the whole Mooncake conversation trace (512-token prefix
  ``hash_ids``; the 9,206 of its 12,031 requests within the runs' ``scheduler.max_model_len``,
  16,384 tokens, the rest skipped with a warning) on ``paged`` without prefix caching,
  ``shared_prefix`` (paged with automatic prefix caching) and ``radix``, each with
  ``cpu_ratio_to_paged``.
* ``kv2026_<policy>``: the KV-in-2026 policies, each in a group beside its ``*_paged`` reference on
  the same workload: ``vattention`` (64 KiB pages) and ``spec_eagle3`` (speculative decoding,
  EAGLE with 3 drafts at acceptance 0.7) on the Azure 10k run; ``offload_cpu256`` (a 256 GiB
  CPU tier, vLLM's native offloading) and ``offload_disk1024`` (a 1 TiB disk tier below a
  64 GiB CPU tier) beside paged with prefix caching on the Mooncake trace's first 3,000
  requests; ``hybrid_groups`` (vLLM v1's hybrid KV cache groups) on the Azure 10k run
  with Gemma-3-27B on an H100-80GB, beside the same model with every layer full attention.
* ``vidur_v1``, ``vidur_v0``: Vidur's common benchmark workload under each engine profile: 10,000
  requests, Poisson 2 req/s, total length uniform in 256-2,048 tokens split 3:1
  prefill:decode, Llama-2-70B with tensor parallel 2 on A100-80GB and a KV pool of 3,328 blocks
  of 16 tokens per GPU, max_num_seqs 128, max_num_batched_tokens 4,096; ``vidur_v1_process``
  times a whole fresh interpreter (imports, workload, simulation) on it.
* ``fleet_16x100k`` (``--large``): a fleet of 16 replicas (one A100-80GB each, least
  outstanding requests routing) serving 100,000 requests of the Azure conversation lengths at 16
  times the trace's mean rate, every engine in one process and one SimPy environment.
* ``--large`` (``make bench-large``): ``azure_conv_1m_paged`` and ``azure_conv_1m_shared_prefix``
  (the 100k run's workload at 1,000,000 requests; the latter with a 256-token system prompt
  shared by every request, so every block is keyed and cached), for peak RSS and t(1M)/t(100k).

Each group of runs goes to a fresh process (``spawn``), so ``peak_rss_bytes`` is that process's
peak and no run inherits another's heap. Times cover the simulation only, from ``simulate``'s
``on_start`` (workload generation, the runnable check and, with prefix caching, the reading of
which token runs other requests repeat, ``note_shared_tokens``, excluded), except
``vidur_v1_process``;
the peak RSS covers the whole run, workload included, as ``kvsim run`` holds it (one copy).
``cpu_s`` is the process's CPU time (user + system). Each group runs ``--repeat`` times (3 by
default), each time in a fresh process, and every figure is the fastest trial's (``cpu_s_trials``
keeps them all; ``fastest_of``): on a machine shared with other work a trial can only be slowed
down, by as much as a third on this project's 2-core guests. A ratio to paged is the two
fastest trials'; ``cpu_ratio_trials`` keeps each trial's own (the policy and its reference
back to back), whose spread shows how far the machine moved the ratio itself.
``--sweep`` (and ``make bench``) also times ``experiments/block-size.toml`` with 1 and 2 workers
(``benchmarks.bench_sweep``, the median of 9 alternating runs each), beside the machine's own
2-process ceiling measured between them. Results go to ``OUT/bench.json``.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import multiprocessing
import platform
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

AZURE_RATE_PER_S = 19_366 / 3_502  # trace README: 19,366 requests over 3,502 s
LLAMA2_70B_TP2_BYTES_PER_TOKEN = 2 * 80 * (8 // 2) * 128 * 2  # one GPU's share at TP 2
LLAMA_A100 = {"model": "llama-3.1-8b", "gpu": "a100-80gb", "scheduler": {"max_model_len": 16384}}
VIDUR_WORKLOAD: dict[str, Any] = {
    "lengths": "uniform",
    "min_total_tokens": 256,
    "max_total_tokens": 2048,
    "prefill_decode_ratio": 3.0,
    "arrival": "poisson",
    "rate_per_s": 2.0,
    "num_requests": 10_000,
}
AZURE_10K = {"trace": "azure_conv", "arrival": "trace", "num_requests": 10_000}


def azure_resampled(num_requests: int, **extra: Any) -> dict[str, Any]:
    """The Azure conversation trace's lengths at its mean rate, ``num_requests`` requests."""
    return {
        **LLAMA_A100,
        "workload": {
            "trace": "azure_conv",
            "sample": "resample",
            "arrival": "poisson",
            "rate_per_s": AZURE_RATE_PER_S,
            "num_requests": num_requests,
            **extra,
        },
    }


def with_cache(spec: dict[str, Any], **cache: Any) -> dict[str, Any]:
    return {**spec, "cache": {**spec.get("cache", {}), **cache}}


VIDUR_V1: dict[str, Any] = {
    "model": "llama-2-70b",
    "gpu": "a100-80gb",
    "parallel": {"tensor_parallel_size": 2},
    "cache": {"kv_cache_bytes": 3_328 * 16 * LLAMA2_70B_TP2_BYTES_PER_TOKEN},
    "scheduler": {"max_model_len": 4096, "max_num_seqs": 128, "max_num_batched_tokens": 4096},
    "workload": VIDUR_WORKLOAD,
}
MOONCAKE = {**LLAMA_A100, "workload": {"trace": "mooncake_conversation", "arrival": "trace"}}
AZURE_10K_SPEC = {**LLAMA_A100, "workload": AZURE_10K}
GEMMA_FULL_10K = {
    "model": {"preset": "gemma-3-27b", "attention": {"hybrid_kv_cache": False}},
    "gpu": "h100-80gb",
    "scheduler": {"max_model_len": 16384},
    "workload": AZURE_10K,
}
# the Mooncake trace's first 3,000 requests, rows over max_model_len dropped (prefix caching on:
# vLLM v1's default)
MOONCAKE_3K = {
    **LLAMA_A100,
    "scheduler": {"max_model_len": 32768},
    "workload": {
        "trace": "mooncake_conversation",
        "arrival": "trace",
        "num_requests": 3000,
        "overflow": "drop",
    },
}

# One group per process; the first run of an allocator group is the paged reference.
GROUPS: dict[str, dict[str, dict[str, Any]]] = {
    "azure_conv_100k": {"azure_conv_100k": with_cache(azure_resampled(100_000), allocator="paged")},
    "azure_conv_100k_v0": {
        "azure_conv_100k_v0": {
            **with_cache(azure_resampled(100_000), allocator="paged"),
            "scheduler": {"max_model_len": 16384, "engine": "vllm-v0"},
        }
    },
    "azure_conv_10k": {
        "azure_conv_10k_paged": with_cache(AZURE_10K_SPEC, allocator="paged"),
        **{
            f"azure_conv_10k_{name}": with_cache(AZURE_10K_SPEC, allocator=name, reservation="pow2")
            for name in ("first_fit", "best_fit", "buddy")
        },
        "azure_conv_10k_radix": with_cache(AZURE_10K_SPEC, allocator="radix"),
    },
    "mooncake_conv": {
        "mooncake_conv_paged": with_cache(MOONCAKE, allocator="paged", enable_prefix_caching=False),
        "mooncake_conv_shared_prefix": with_cache(
            MOONCAKE, allocator="paged", enable_prefix_caching=True
        ),
        "mooncake_conv_radix": with_cache(MOONCAKE, allocator="radix"),
    },
    # the KV-in-2026 policies, each beside paged on the same workload (cpu_ratio_to_paged <= 2)
    "kv2026_vattention": {
        "kv2026_vattention_paged": with_cache(AZURE_10K_SPEC, allocator="paged"),
        "kv2026_vattention_64k": with_cache(
            AZURE_10K_SPEC, allocator="vattention", page_size_bytes=65536
        ),
    },
    "kv2026_spec": {
        "kv2026_spec_paged": with_cache(AZURE_10K_SPEC, allocator="paged"),
        "kv2026_spec_eagle3": {
            **with_cache(AZURE_10K_SPEC, allocator="paged"),
            "speculative": {"num_speculative_tokens": 3, "acceptance_rate": 0.7},
        },
    },
    "kv2026_hybrid": {  # Gemma-3-27B on an H100: every layer full (paged) vs hybrid groups
        "kv2026_hybrid_paged": GEMMA_FULL_10K,
        "kv2026_hybrid_groups": {**GEMMA_FULL_10K, "model": "gemma-3-27b"},
    },
    "kv2026_offload": {
        "kv2026_offload_paged": with_cache(MOONCAKE_3K, allocator="paged"),
        "kv2026_offload_cpu256": {
            **with_cache(MOONCAKE_3K, allocator="paged"),
            "offload": {"kv_offloading_size": 256},
        },
        "kv2026_offload_disk1024": {
            **with_cache(MOONCAKE_3K, allocator="paged"),
            "offload": {"kv_offloading_size": 64, "disk_offloading_size": 1024},
        },
    },
    "vidur": {
        "vidur_v1": VIDUR_V1,
        "vidur_v0": {**VIDUR_V1, "scheduler": {**VIDUR_V1["scheduler"], "engine": "vllm-v0"}},
    },
}
FLEET_16X100K = {
    **azure_resampled(100_000),
    "fleet": {"replicas": 16, "router": "least_requests"},
}
FLEET_16X100K["workload"] = {**FLEET_16X100K["workload"], "rate_per_s": 16 * AZURE_RATE_PER_S}
LARGE_GROUPS: dict[str, dict[str, dict[str, Any]]] = {
    "fleet_16x100k": {"fleet_16x100k": FLEET_16X100K},
    "azure_conv_1m_paged": {
        "azure_conv_1m_paged": with_cache(azure_resampled(1_000_000), allocator="paged")
    },
    "azure_conv_1m_shared_prefix": {
        "azure_conv_1m_shared_prefix": with_cache(
            azure_resampled(1_000_000, shared_prefix_tokens=256),
            allocator="paged",
            enable_prefix_caching=True,
        )
    },
}


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def peak_rss_bytes() -> int:
    """This process's peak resident set size (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run_benchmark(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Simulate one benchmark and time it; returns its bench.json entry."""
    from kvsim.config import config_from_dict
    from kvsim.fleet import simulate  # one engine, or a fleet

    config = config_from_dict(spec)
    start: list[float] = []
    collections: list[int] = []

    def workload_ready(_: int) -> None:  # generated and checked: the simulation starts
        collections.extend(g["collections"] for g in gc.get_stats())
        start.extend((time.perf_counter(), _cpu_s()))

    # simulate draws the workload itself, as `kvsim run` does (no second copy of it alive)
    results = simulate(config, on_start=workload_ready)
    wall_s, cpu_s = time.perf_counter() - start[0], _cpu_s() - start[1]
    gc_runs = [g["collections"] - n for g, n in zip(gc.get_stats(), collections, strict=True)]
    summary = results.summary
    num_requests = summary["num_requests"]
    decode_tokens = summary["generation_tokens_total"]
    return {
        "requests": num_requests,
        "decode_tokens": decode_tokens,
        "wall_s": wall_s,
        "cpu_s": cpu_s,
        "requests_per_s": num_requests / wall_s,
        "decode_tokens_per_s": decode_tokens / wall_s,
        "decode_tokens_per_cpu_s": decode_tokens / cpu_s,
        "peak_rss_bytes": peak_rss_bytes(),
        "simulated_s": summary["duration_s"],
        "num_events": len(results.memory),
        "num_steps": summary["num_steps"],
        "num_requests_running_mean": summary.get("num_requests_running_mean"),
        "num_preemptions": summary["num_preemptions"],
        # the garbage collector's collections over ``cpu_s``'s span, by generation (youngest
        # first)
        "gc_collections": gc_runs,
    }


def run_group(runs: dict[str, dict[str, Any]], quiet: bool = False) -> dict[str, dict[str, Any]]:
    """Every run of a group in this process; allocator runs get ``cpu_ratio_to_paged`` against
    the group's ``*_paged`` run. A run whose trace is missing is left out (logged).
    ``quiet``: kvsim's own warnings are not shown (a repeated trial's, shown by the first)."""
    from kvsim.workload import DataNotFoundError

    if quiet:
        logging.getLogger("kvsim").setLevel(logging.ERROR)
    out: dict[str, dict[str, Any]] = {}
    for name, spec in runs.items():
        try:
            out[name] = run_benchmark(name, spec)
        except DataNotFoundError as err:
            logger.warning("%s skipped: %s", name, err)
    paged = next((v for k, v in out.items() if k.endswith("_paged")), None)
    if paged is not None and len(out) > 1:
        for entry in out.values():
            entry["cpu_ratio_to_paged"] = entry["cpu_s"] / paged["cpu_s"]
    return out


def run_group_in_fresh_process(
    runs: dict[str, dict[str, Any]], quiet: bool = False
) -> dict[str, dict[str, Any]]:
    """``run_group`` in a spawned interpreter (its own heap, so its own peak RSS)."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(run_group, (runs, quiet))


def fastest(entries: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """The entry with the least ``key`` (seconds), with every entry's as ``KEY_trials``: a
    machine shared with other work only ever slows a trial down, so the minimum is the run's
    own cost (as ``timeit``)."""
    return {**min(entries, key=lambda e: e[key]), f"{key}_trials": [e[key] for e in entries]}


def fastest_of(trials: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Each run's fastest entry over the trials of its group (``fastest``, by CPU time), its
    ratio to paged recomputed from the two minima; ``cpu_ratio_trials`` keeps each trial's
    own ratio (the two runs back to back in one process: how much the machine's load moved
    the ratio itself)."""
    out: dict[str, dict[str, Any]] = {}
    for name in trials[0]:
        out[name] = fastest([t[name] for t in trials if name in t], "cpu_s")
    paged_name = next((k for k in out if k.endswith("_paged")), None)
    if paged_name is not None and len(out) > 1:
        paged = out[paged_name]
        for name, entry in out.items():
            entry["cpu_ratio_to_paged"] = entry["cpu_s"] / paged["cpu_s"]
            entry["cpu_ratio_trials"] = [
                t[name]["cpu_s"] / t[paged_name]["cpu_s"]
                for t in trials
                if name in t and paged_name in t
            ]
    return out


def time_fig2() -> dict[str, Any]:
    """CPU seconds of the simulations of ``experiments/fig2.toml``'s 16 points (``make
    reproduce``'s runs, without their memory-map snapshot), in this process."""
    from kvsim.engine import simulate
    from kvsim.study.experiment import load_experiment
    from kvsim.study.sweep import experiments_dir

    cpu_s = 0.0
    points = load_experiment(experiments_dir() / "fig2.toml").points()
    starts: list[float] = []  # each run's start, noted by on_start once its workload is drawn
    for point in points:
        assert point.config is not None, point.error
        simulate(point.config, on_start=lambda _n: starts.append(_cpu_s()))
        cpu_s += _cpu_s() - starts[-1]
    return {"points": len(points), "cpu_s": cpu_s, "peak_rss_bytes": peak_rss_bytes()}


def time_fig2_in_fresh_process() -> dict[str, Any]:
    """``time_fig2`` in a spawned interpreter."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(time_fig2)


def time_whole_process(spec: dict[str, Any]) -> dict[str, Any]:
    """Wall and CPU time of a fresh interpreter that imports kvsim and simulates ``spec``.

    kvsim's bytecode is compiled first, as ``pip install`` does: an environment that sets
    ``PYTHONDONTWRITEBYTECODE`` (this project's machines do) would otherwise compile every
    module changed since its last cached copy in each fresh process (about 50 ms).
    """
    import compileall

    import kvsim

    compileall.compile_dir(Path(kvsim.__file__).resolve().parent, quiet=1)
    code = (
        "import json, sys\nfrom kvsim import config_from_dict, simulate\n"
        "simulate(config_from_dict(json.loads(sys.argv[1])))"
    )
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code, json.dumps(spec)], check=True)
    wall_s = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    requests = spec["workload"]["num_requests"]
    return {"requests": requests, "wall_s": wall_s, "cpu_s": cpu_s}


@dataclass(frozen=True)
class Target:
    """One figure of issue 28's table: how to read it from bench.json, and the bound it must meet.

    Attributes:
        figure: what is measured, for people.
        value: reads the figure from the report (``None`` when its runs are missing).
        bound: the target; ``at_least`` says which side of it passes.
        unit: printed after the numbers.
    """

    figure: str
    value: Callable[[dict[str, Any]], float | None]
    bound: float
    at_least: bool
    unit: str = ""

    def check(self, report: dict[str, Any]) -> tuple[float | None, bool | None]:
        try:
            value = self.value(report)
        except (KeyError, TypeError, ZeroDivisionError):
            value = None
        if value is None:
            return None, None
        return value, value >= self.bound if self.at_least else value <= self.bound


def _max_ratio(report: dict[str, Any], prefix: str, names: tuple[str, ...]) -> float:
    return max(float(report[f"{prefix}_{n}"]["cpu_ratio_to_paged"]) for n in names)


def _kv2026_ratio(report: dict[str, Any]) -> float | None:
    """The worst ``cpu_ratio_to_paged`` of the KV-in-2026 policies (``kv2026_*`` runs that are not
    their group's paged reference), or ``None`` when none ran."""
    ratios = [
        float(entry["cpu_ratio_to_paged"])
        for name, entry in report.items()
        if name.startswith("kv2026_")
        and not name.endswith("_paged")
        and isinstance(entry, dict)
        and "cpu_ratio_to_paged" in entry
    ]
    return max(ratios) if ratios else None


TARGETS = (
    Target(
        "decode tokens per CPU-s, Azure conv 100k, paged, vllm-v1",
        lambda r: r["azure_conv_100k"]["decode_tokens_per_cpu_s"] / 1e6,
        10.0,
        True,
        " M",
    ),
    Target(
        "the same under vllm-v0 (the paper's engine)",
        lambda r: r["azure_conv_100k_v0"]["decode_tokens_per_cpu_s"] / 1e6,
        10.0,
        True,
        " M",
    ),
    Target(
        "prefix caching and radix on the Mooncake conversation trace, CPU vs paged, worst",
        lambda r: _max_ratio(r, "mooncake_conv", ("shared_prefix", "radix")),
        2.0,
        False,
        "x",
    ),
    Target(
        "every allocator on Azure 10k (contiguous: pow2), CPU vs paged, worst",
        lambda r: _max_ratio(r, "azure_conv_10k", ("first_fit", "best_fit", "buddy", "radix")),
        2.0,
        False,
        "x",
    ),
    Target(
        "make reproduce simulation time (Figure 2, 16 points), CPU",
        lambda r: r["fig2"]["cpu_s"],
        3.0,
        False,
        " s",
    ),
    Target(
        "Vidur's 10k workload (vllm-v1), whole process incl. start-up and imports",
        lambda r: r["vidur_v1_process"]["wall_s"],
        0.5,
        False,
        " s",
    ),
    Target(
        "the KV-in-2026 policies (vattention, ...), each CPU vs paged on its workload, worst",
        _kv2026_ratio,
        2.0,
        False,
        "x",
    ),
    Target(
        "peak RSS, 1 M requests, paged",
        lambda r: r["azure_conv_1m_paged"]["peak_rss_bytes"] / 2**30,
        1.0,
        False,
        " GiB",
    ),
    Target(
        "peak RSS, 1 M requests, prefix caching",
        lambda r: r["azure_conv_1m_shared_prefix"]["peak_rss_bytes"] / 2**30,
        1.0,
        False,
        " GiB",
    ),
    Target(
        "peak RSS, a fleet of 16 replicas x 100k requests in one process",
        lambda r: r["fleet_16x100k"]["peak_rss_bytes"] / 2**30,
        2.0,
        False,
        " GiB",
    ),
)


def target_lines(report: dict[str, Any]) -> list[str]:
    """One line per target: figure, measured value, target and verdict."""
    lines = [f"{'figure':<84} {'measured':>10} {'target':>10}  met"]
    for t in TARGETS:
        value, met = t.check(report)
        shown = "-" if value is None else f"{value:.2f}{t.unit}"
        bound = f"{'>=' if t.at_least else '<='} {t.bound:g}{t.unit}"
        verdict = "not run" if met is None else ("yes" if met else "NO")
        lines.append(f"{t.figure:<84} {shown:>10} {bound:>10}  {verdict}")
    return lines


def main(argv: list[str] | None = None) -> None:
    """Run the benchmarks and write ``OUT/bench.json`` (merged into an existing one)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/bench", type=Path)
    parser.add_argument(
        "--only", nargs="*", choices=sorted([*GROUPS, *LARGE_GROUPS, "process", "fig2"])
    )
    parser.add_argument("--large", action="store_true", help="also the 1 M-request runs")
    parser.add_argument("--sweep", action="store_true", help="also the 2-worker sweep speed-up")
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="fresh processes per group; each figure is the fastest (default 3)",
    )
    args = parser.parse_args(argv)
    repeat = max(1, args.repeat)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    path = args.out / "bench.json"
    report: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
    report.update(
        machine=platform.platform(),
        python=platform.python_version(),
        cpu_count=multiprocessing.cpu_count(),
        load_average_at_start=list(_load_average()),
    )
    groups = {**GROUPS, **(LARGE_GROUPS if args.large else {})}
    for group, runs in groups.items():
        if args.only and group not in args.only:
            continue
        trials = [run_group_in_fresh_process(runs, quiet=i > 0) for i in range(repeat)]
        for name, entry in fastest_of(trials).items():
            report[name] = entry
            logger.info(
                "%-30s %8d requests: %7.2f s CPU, %6.2f M decode tokens/CPU-s, "
                "peak RSS %5.0f MiB%s",
                name,
                entry["requests"],
                entry["cpu_s"],
                entry["decode_tokens_per_cpu_s"] / 1e6,
                entry["peak_rss_bytes"] / 2**20,
                f", {entry['cpu_ratio_to_paged']:.2f}x paged (trials "
                f"{min(entry['cpu_ratio_trials']):.2f}-{max(entry['cpu_ratio_trials']):.2f}x)"
                if "cpu_ratio_to_paged" in entry
                else "",
            )
    if not args.only or "fig2" in args.only:
        report["fig2"] = fastest([time_fig2_in_fresh_process() for _ in range(repeat)], "cpu_s")
        logger.info("%-30s 16 points: %.2f s CPU", "fig2", report["fig2"]["cpu_s"])
    if not args.only or "process" in args.only:
        whole = [time_whole_process(VIDUR_V1) for _ in range(repeat)]
        report["vidur_v1_process"] = fastest(whole, "wall_s")
        logger.info(
            "%-30s whole process %.2f s wall",
            "vidur_v1_process",
            report["vidur_v1_process"]["wall_s"],
        )
    if args.sweep:  # in a fresh process too, as `kvsim sweep` runs
        root = str(Path(__file__).resolve().parents[1])  # benchmarks/ after the installed kvsim
        code = (
            f"import json, sys\nsys.path.append({root!r})\n"
            "from benchmarks.bench_sweep import sweep_speedup\n"
            "print(json.dumps(sweep_speedup(repeats=9)))"  # ~1.5 s a repeat: the median of 9
        )
        done = subprocess.run(
            [sys.executable, "-c", code], check=True, capture_output=True, text=True
        )
        report["sweep_block_size"] = json.loads(done.stdout.strip().splitlines()[-1])
    report["load_average_at_end"] = list(_load_average())
    args.out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2))
    for line in target_lines(report):
        logger.info("%s", line)
    sweep = report.get("sweep_block_size") or {}
    if sweep.get("machine_ceiling"):
        logger.info(
            "the sweep's %.2fx against this machine's own 2-process ceiling of %.2fx while it "
            "ran (a pure-Python loop in 2 processes vs 1, between the sweeps): %.0f %%",
            sweep["speedup"],
            sweep["machine_ceiling"],
            100 * sweep["speedup"] / sweep["machine_ceiling"],
        )
    logger.info("wrote %s", path)


def _load_average() -> tuple[float, float, float]:
    try:
        import os

        return os.getloadavg()
    except OSError:  # not on this platform
        return (float("nan"),) * 3


if __name__ == "__main__":
    main()
