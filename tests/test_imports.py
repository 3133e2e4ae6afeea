"""Start-up loads only what a run uses: the heavy libraries come in when something asks for them.

Each check runs in a fresh interpreter and reads ``sys.modules`` (no timing).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("pandas", "pyarrow", "matplotlib", "dask", "scipy")


def loaded_after(code: str) -> dict[str, bool]:
    """Which of ``HEAVY`` (and pydantic, simpy) a fresh interpreter holds after running ``code``."""
    probe = (
        f"{code}\nimport json, sys\n"
        f"print(json.dumps({{m: m in sys.modules for m in {[*HEAVY, 'pydantic', 'simpy']!r}}}))"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env=env,
        timeout=1200,
    ).stdout
    loaded: dict[str, bool] = json.loads(out.strip().splitlines()[-1])
    return loaded


@pytest.mark.parametrize(
    "code",
    [
        "import kvsim",
        "import kvsim.engine",
        "from kvsim import config_from_dict, simulate",
        "import kvsim.workload.catalog",
        "import kvsim.cli",
        "import kvsim.study.point",  # all a Dask worker of a sweep imports
    ],
)
def test_importing_loads_no_heavy_library(code: str) -> None:
    loaded = loaded_after(code)
    assert not any(loaded[m] for m in HEAVY), loaded


def test_allocators_load_only_the_request_records_of_the_workload_package() -> None:
    # the KV policies read requests and their token identity, not the generators or readers
    code = (
        "import json, sys\nimport kvsim.core.kv\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('kvsim.workload'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout
    loaded_workload = json.loads(out.strip().splitlines()[-1])
    assert loaded_workload == ["kvsim.workload", "kvsim.workload.request", "kvsim.workload.tokens"]
    loaded = loaded_after("import kvsim.core.kv")
    assert not loaded["pydantic"]
    assert not any(loaded[m] for m in HEAVY), loaded


def test_import_kvsim_loads_no_pydantic() -> None:
    assert not loaded_after("import kvsim")["pydantic"]


def test_cli_help_loads_no_heavy_library() -> None:
    code = (
        "import sys\nfrom kvsim.cli import app\n"
        "try:\n    app(['--help'])\nexcept SystemExit:\n    pass"
    )
    loaded = loaded_after(code)
    assert not any(loaded[m] for m in HEAVY), loaded
    assert not loaded["pydantic"]


def test_a_run_that_reads_only_its_summary_builds_no_dataframe() -> None:
    code = (
        "from kvsim import config_from_dict, simulate\n"
        "results = simulate(config_from_dict({'workload': {'num_requests': 30}}))\n"
        "assert results.summary['num_requests'] == 30"
    )
    loaded = loaded_after(code)
    assert not any(loaded[m] for m in HEAVY), loaded


def test_tables_built_on_first_use_match_the_summary() -> None:
    from kvsim import config_from_dict, simulate
    from kvsim.results.metrics import summarize

    config = config_from_dict({"workload": {"num_requests": 40}, "summary_window": "run"})
    results = simulate(config)
    assert len(results.requests) == 40  # built now
    assert results.memory["num_steps"].sum() == results.summary["num_steps"]
    again = summarize(
        results.memory,
        results.requests,
        capacity_slots=config.capacity_tokens,
        usable_capacity_slots=results.summary["usable_capacity_tokens"],
    )
    for key, value in again.items():
        expected = results.summary[key]
        assert value == expected or (math.isnan(value) and math.isnan(expected)), key


def test_every_lazy_name_resolves() -> None:
    import kvsim
    import kvsim.workload

    for package in (kvsim, kvsim.workload):
        for name in package.__all__:
            assert getattr(package, name) is not None, (package.__name__, name)
    assert set(kvsim.workload.__all__) == set(kvsim.workload._EXPORTS)


def test_kvsim_run_without_out_builds_no_dataframe() -> None:
    code = (
        "from kvsim.cli import app\n"
        "try:\n    app(['run', '--set', 'workload.num_requests=30'])\n"
        "except SystemExit as stop:\n    assert stop.code == 0, stop.code"
    )
    loaded = loaded_after(code)
    assert not any(loaded[m] for m in HEAVY), loaded
