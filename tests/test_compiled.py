"""The compiled engine (``KVSIM_COMPILE=1``: mypyc, as ``make native`` and ``make bench`` run it)
gives the same results as the Python sources, on runs that reach the per-block paths compilation
changes most: a CPU tier that evicts above a disk tier that promotes, Gemma-3-27B's hybrid groups
with prefix caching and preemptions, speculative decoding. Same config, same results on any
executor (the brief's determinism rule); a C type mypyc infers differently from the sources (an
``int`` narrowed to ``i64``, a vector passed by value) shows here as a different digest.

The compiled wheel takes a few minutes of one core to build (mypy and a C compiler)."""

from __future__ import annotations

import hashlib
import inspect
import json
import shutil
import subprocess

import pandas as pd
import pytest

from kvsim import SimConfig, simulate
from tests.wheel_env import install_wheel


def on_h100(
    model: str, kv_cache_gib: float, max_model_len: int, caching: bool | None, **sections: object
) -> dict[str, object]:
    """A config on one H100-80GB, seed 0, with ``sections`` (workload, offload ...);
    ``caching`` ``None``: the profile's default."""
    cache: dict[str, object] = {"kv_cache_gib": kv_cache_gib}
    if caching is not None:
        cache["enable_prefix_caching"] = caching
    config = {"model": model, "gpu": "h100-80gb", "seed": 0, "cache": cache}
    return {**config, "scheduler": {"max_model_len": max_model_len}, **sections}


CONFIGS = {
    # a 2 GiB CPU tier (1,024 blocks) that evicts, a 4 GiB disk tier below it that promotes
    "offload_disk": on_h100(
        "llama-3.1-8b",
        4.0,
        8000,
        True,
        workload={"preset": "multi_turn_chat", "rate_per_s": 1.0, "num_requests": 300},
        offload={"kv_offloading_size": 2, "disk_offloading_size": 4},
    ),
    # 7 KV cache groups sharing one pool, prefix hits in every group, preemptions
    "hybrid": on_h100(
        "gemma-3-27b",
        6.0,
        8000,
        True,
        workload={"preset": "multi_turn_chat", "rate_per_s": 2.0, "num_requests": 300},
    ),
    "spec": on_h100(
        "llama-3.1-8b",
        1.0,
        4096,
        None,
        workload={"preset": "alpaca_like", "num_requests": 300},
        speculative={"num_speculative_tokens": 3, "acceptance_rate": 0.7},
    ),
}


def digest(results) -> str:
    """The summary, memory and request tables of one run, hashed (its source is sent to the
    compiled install as it is: one rule for both)."""
    parts = [json.dumps(results.summary, sort_keys=True, default=str).encode()]
    for frame in (results.memory, results.requests):
        parts.append(pd.util.hash_pandas_object(frame, index=True).values.tobytes())
    return hashlib.sha1(b"|".join(parts)).hexdigest()


@pytest.mark.full(seconds=240)
@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to build the engine with")
def test_the_compiled_engine_gives_the_sources_results(tmp_path) -> None:
    bin_dir, env, work = install_wheel(tmp_path, compiled=True)
    script = (
        "import hashlib, json, sys\n"
        + "import pandas as pd\n"
        + inspect.getsource(digest)
        + "import kvsim.core.kv.offload as offload\n"
        + "from kvsim import SimConfig, simulate\n"
        + "assert offload.__file__.endswith('.so'), offload.__file__  # (compiled)\n"
        + "configs = json.loads(sys.argv[1])\n"
        + "print(json.dumps({n: digest(simulate(SimConfig.model_validate(c)))"
        + " for n, c in configs.items()}))\n"
    )
    result = subprocess.run(
        [str(bin_dir / "python"), "-c", script, json.dumps(CONFIGS)],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    compiled = json.loads(result.stdout.strip().splitlines()[-1])
    sources = {name: digest(simulate(SimConfig.model_validate(c))) for name, c in CONFIGS.items()}
    assert compiled == sources
