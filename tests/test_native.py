"""The compiled engine (``kvsim.native``): identical results to the Python sources, and a build
that is never used once its sources have changed."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kvsim import native
from kvsim.config import config_from_dict
from kvsim.engine import simulate
from kvsim.request import RequestSpec
from tests.test_lazy_equivalence import CASES, _config

ROOT = Path(__file__).resolve().parents[1]
NEEDS_BUILD = pytest.mark.skipif(
    not native.native_loaded(), reason="the compiled engine is not built (make native)"
)


def _extra_cases():
    """Runs beyond the lazy-equivalence cases: the aggregate core, SimPy's int clock, tensor
    parallelism, chunked prefill off, step resolution, the step-by-step path."""
    base = {"cache": {"kv_cache_gib": 2}, "workload": {"rate_per_s": 6.0, "num_requests": 120}}
    ints = [  # int arrival times: SimPy's clock stays int until a duration is added
        RequestSpec(
            req_id=i, arrival_time_s=i // 3, prompt_tokens=40 + i, output_tokens=9, max_tokens=9
        )
        for i in range(9)
    ]
    numpy_ints = [  # a caller's arrays: numpy ints where Python ints are annotated
        RequestSpec(i, 0.5 * i, np.int32(300 - 40 * i), np.int64(90), np.int64(90))
        for i in range(5)
    ]
    # Llama-3.1-8B: 128 KiB of KV per token, so 0.1 GiB hold 819 slots: these preempt
    small = {
        "model": "llama-3.1-8b",
        "gpu": "a100-80gb",
        "scheduler": {"max_model_len": 512, "max_num_batched_tokens": 64, "max_num_seqs": 8},
    }
    tiny_caching = {**small, "cache": {"kv_cache_gib": 0.1, "enable_prefix_caching": True}}
    nested_caching = {
        **small,
        "scheduler": {"max_model_len": 2048},
        "cache": {"kv_cache_gib": 0.5, "enable_prefix_caching": True},
    }
    hashes = np.array([[1, 2, 3], [1, 2, 4], [1, 5, 6]])
    nested = [  # numpy ints inside tuples, lists for tuples, a Fraction for a time
        RequestSpec(0, Fraction(1, 3), 1200, 40, 40, prefix_hash_ids=tuple(hashes[0])),
        RequestSpec(1, 0.5, 1200, 40, 40, prefix_hash_ids=list(hashes[1])),
        RequestSpec(2, 0.75, 1200, 40, 40, prefix_hash_ids=hashes[2].tolist()),
        RequestSpec(3, 1.0, 600, 30, 30, token_segments=[("sys", np.int64(300)), ("u", 300)]),
        RequestSpec(4, 1.25, 600, 30, 30, token_segments=(("sys", np.int32(300)), ("v", 300))),
    ]
    tiny_radix = {**small, "cache": {"kv_cache_gib": 0.1, "allocator": "radix"}}
    return {
        "numpy_ints": (config_from_dict(tiny_caching), {"requests": numpy_ints}),
        "numpy_ints_radix": (config_from_dict(tiny_radix), {"requests": numpy_ints}),
        "nested_numpy": (config_from_dict(nested_caching), {"requests": nested}),
        "nested_numpy_radix": (
            config_from_dict({**nested_caching, "cache": {"allocator": "radix"}}),
            {"requests": nested},
        ),
        "aggregate_core": (config_from_dict(base), {}),
        "aggregate_core_caching": (
            config_from_dict({**base, "cache": {"kv_cache_gib": 2, "enable_prefix_caching": True}}),
            {},
        ),
        "int_arrivals": (config_from_dict({}), {"requests": ints}),
        "int_arrivals_first_fit": (
            config_from_dict({"cache": {"allocator": "first_fit"}}),
            {"requests": ints},
        ),
        "tp2_llama70b": (
            config_from_dict(
                {
                    "model": "llama-2-70b",
                    "gpu": "a100-80gb",
                    "parallel": {"tensor_parallel_size": 2},
                    "workload": {"num_requests": 150, "rate_per_s": 4.0},
                }
            ),
            {},
        ),
        "no_chunked_prefill": (
            config_from_dict({**base, "scheduler": {"enable_chunked_prefill": False}}),
            {},
        ),
        "step_resolution": (config_from_dict({**base, "memory_resolution": "step"}), {}),
        "step_by_step": (config_from_dict(base), {"lazy_decodes": False}),
    }


def all_cases():
    """Every case as ``name -> (config, simulate's keyword arguments)``."""
    cases = {
        f"lazy_{i}_{engine}_{cache['allocator']}": (_config(engine, cache, sched, work, 0), {})
        for i, (engine, cache, sched, work, _) in enumerate(CASES)
    }
    return {**cases, **_extra_cases()}


def _tables(results):
    return results.requests, results.memory, results.summary


def run_all(out: str) -> None:
    """Simulate every case in this process and pickle the tables to ``out`` (run with
    ``KVSIM_PURE_PYTHON=1`` by the test below)."""
    tables = {name: _tables(simulate(cfg, **kw)) for name, (cfg, kw) in all_cases().items()}
    Path(out).write_bytes(pickle.dumps(tables))


@NEEDS_BUILD
def test_the_compiled_engine_gives_the_python_sources_tables_exactly(tmp_path):
    out = tmp_path / "pure.pkl"
    code = f"from tests.test_native import run_all; run_all({str(out)!r})"
    env = {**os.environ, native.PURE_PYTHON_ENV: "1"}
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env=env)
    pure = pickle.loads(out.read_bytes())
    for name, (cfg, kw) in all_cases().items():
        requests, memory, summary = _tables(simulate(cfg, **kw))
        pure_requests, pure_memory, pure_summary = pure[name]
        pd.testing.assert_frame_equal(requests, pure_requests, check_exact=True, obj=name)
        pd.testing.assert_frame_equal(memory, pure_memory, check_exact=True, obj=name)
        assert list(summary) == list(pure_summary), name
        for key, value in summary.items():  # repr: exact floats, and NaN equals NaN
            assert repr(value) == repr(pure_summary[key]), (name, key)


def test_pure_python_mode_loads_the_sources():
    code = (
        "import kvsim.engine, kvsim.allocators.paged as p; print(kvsim.engine.__file__, p.__file__)"
    )
    env = {**os.environ, native.PURE_PYTHON_ENV: "1"}
    done = _python(code, ROOT, env)
    assert [Path(f).name for f in done.stdout.split()] == ["engine.py", "paged.py"]


def _python(code: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``python -c code`` in a fresh interpreter; its output, which must be a success."""
    return subprocess.run(
        [sys.executable, "-c", code], check=True, cwd=cwd, env=env, capture_output=True, text=True
    )


def _package_copy(tmp_path: Path) -> Path:
    """The compiled sources in a package folder of their own (no build)."""
    package = tmp_path / "kvsim"
    for source in native.NATIVE_SOURCES:
        (package / source).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(native.PACKAGE_DIR / source, package / source)
    return package


def test_the_fingerprint_follows_every_source(tmp_path):
    package = _package_copy(tmp_path)
    first = native.fingerprint(package)
    assert native.fingerprint(package) == first
    for source in ("engine.py", "allocators/radix.py", "scheduler/v1.py"):
        path = package / source
        text = path.read_bytes()
        path.write_bytes(text + b"\n")
        assert native.fingerprint(package) != first, source
        path.write_bytes(text)
        assert native.fingerprint(package) == first


def test_build_state_says_what_import_loads(tmp_path, monkeypatch):
    monkeypatch.delenv(native.PURE_PYTHON_ENV, raising=False)
    package = _package_copy(tmp_path)
    assert native.build_state(package) == "absent"
    for path in native.built_files(package):  # stand-ins: only their presence is read
        path.write_bytes(b"")
    assert native.build_state(package) == "stale"  # no fingerprint recorded
    manifest = package / native.MANIFEST
    manifest.write_text(json.dumps({"fingerprint": native.fingerprint(package)}))
    assert native.build_state(package) == "current"
    monkeypatch.setenv(native.PURE_PYTHON_ENV, "1")
    assert native.build_state(package) == "disabled"
    monkeypatch.delenv(native.PURE_PYTHON_ENV)
    (package / "scheduler/v0.py").write_text("# edited\n", encoding="utf-8")
    assert native.build_state(package) == "stale"
    manifest.write_text(json.dumps({"fingerprint": native.fingerprint(package)}))
    native.built_files(package)[3].unlink()  # an incomplete build
    assert native.build_state(package) == "stale"
    manifest.write_text("{not json")
    assert native.build_state(package) == "stale"


@NEEDS_BUILD
def test_a_build_older_than_its_sources_is_not_used(tmp_path):
    """A copy of the built package with one compiled source edited: the sources run, and the
    process says so."""
    copy = tmp_path / "kvsim"
    shutil.copytree(native.PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    with (copy / "cost.py").open("a", encoding="utf-8") as f:
        f.write("\nEDITED_AFTER_THE_BUILD = True\n")
    code = (
        "import kvsim.engine, kvsim.cost; "
        "print(kvsim.engine.__file__, kvsim.cost.EDITED_AFTER_THE_BUILD)"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    env.pop(native.PURE_PYTHON_ENV, None)
    done = _python(code, tmp_path, env)
    engine_file, edited = done.stdout.split()
    assert Path(engine_file) == copy / "engine.py"
    assert edited == "True"
    assert "older than its sources" in done.stderr


def test_simulate_takes_flags_by_truth_and_numbers_by_value():
    # compiled, a parameter annotated bool or float would refuse these; the sources take them
    cfg = config_from_dict({"workload": {"num_requests": 30}})
    plain = simulate(cfg, strict=False, map_every_s=2.0, map_max_frames=8)
    loose = simulate(
        cfg,
        strict=0,
        map_every_s=np.float32(2.0),
        map_max_frames=np.int64(8),
        lazy_decodes=np.bool_(True),
    )
    for name in ("requests", "memory", "frames"):
        pd.testing.assert_frame_equal(getattr(loose, name), getattr(plain, name), check_exact=True)
    with pytest.raises(TypeError):
        simulate(cfg, map_every_s=2.0, map_max_frames=2.5)


def test_the_sources_shadow_any_extension_once_the_build_is_not_used():
    finder = native._SourceFinder(native.PACKAGE_DIR)
    spec = finder.find_spec("kvsim.metrics", None)  # a module never compiled: still its source
    assert spec is not None
    assert spec.origin == str(native.PACKAGE_DIR / "metrics.py")
    spec = finder.find_spec("kvsim.allocators.paged", None)
    assert spec is not None
    assert spec.origin == str(native.PACKAGE_DIR / "allocators/paged.py")
    assert finder.find_spec("kvsim.allocators", None) is None  # a package: the usual finders
    assert finder.find_spec("numpy", None) is None


@pytest.mark.parametrize(
    ("value", "asked"),
    [
        ("", False),
        ("0", False),
        ("false", False),
        ("No", False),
        (" off ", False),
        ("1", True),
        ("yes", True),
        ("TRUE", True),
    ],
)
def test_pure_python_values(monkeypatch, value, asked):
    monkeypatch.setenv(native.PURE_PYTHON_ENV, value)
    assert native.pure_python_asked() is asked


def test_a_stale_build_that_cannot_be_rebuilt_is_removed(tmp_path, monkeypatch):
    from kvsim import native_build

    monkeypatch.setenv(native.PURE_PYTHON_ENV, "1")  # the build ignores it
    package = _package_copy(tmp_path)
    for path in native.built_files(package):
        path.write_bytes(b"")
    (package / native.MANIFEST).write_text(json.dumps({"fingerprint": "0"}))
    assert native.build_state(package, honour_env=False) == "stale"
    monkeypatch.setitem(sys.modules, "mypyc.build", None)  # mypy not installed
    assert native_build.build(package) is False
    assert native.build_state(package, honour_env=False) == "absent"
    assert not (package / native.MANIFEST).exists()


def test_a_missing_source_makes_the_build_stale_not_a_crash(tmp_path, monkeypatch):
    monkeypatch.delenv(native.PURE_PYTHON_ENV, raising=False)
    package = _package_copy(tmp_path)
    for path in native.built_files(package):
        path.write_bytes(b"")
    (package / native.MANIFEST).write_text(json.dumps({"fingerprint": native.fingerprint(package)}))
    (package / "timing.py").unlink()
    assert native.build_state(package) == "stale"
