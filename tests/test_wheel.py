"""kvsim as a library: the wheel, installed into a fresh virtual environment outside the clone
(``tests.wheel_env``), runs presets, experiments, a reproduction and a plan from another
directory, with no trace data.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.wheel_env import install_wheel


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], Path]:
    """``(venv bin folder, environment, working folder outside the clone)``."""
    return install_wheel(tmp_path_factory.mktemp("wheel"))


def _run(fresh: tuple[Path, dict[str, str], Path], *args: str) -> str:
    bin_dir, env, work = fresh
    result = subprocess.run(
        [str(bin_dir / args[0]), *args[1:]], cwd=work, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr


@pytest.mark.full
def test_library_api_from_the_wheel(fresh) -> None:
    script = (
        "import kvsim, pathlib\n"
        "from kvsim import SimConfig, simulate, load_config, open_experiment\n"
        "assert 'site-packages' in kvsim.__file__, kvsim.__file__\n"
        "results = simulate(SimConfig.model_validate({'workload': 'alpaca_like'}))\n"
        "print('requests', results.summary['num_requests'], kvsim.__version__)\n"
        "sweep = open_experiment('reservation-24gib', quick=True, out_root='results')\n"
        "print('points', len(sweep.summary))\n"
    )
    out = _run(fresh, "python", "-c", script)
    assert "requests 2000" in out  # the alpaca_like preset's num_requests
    assert "points 3" in out


@pytest.mark.full
def test_cli_presets_reproduce_and_plan_from_the_wheel(fresh) -> None:
    out = _run(fresh, "kvsim", "presets", "plans")
    assert "bursty-kv" in out
    out = _run(
        fresh,
        "kvsim",
        "run",
        "--set",
        "workload=azure_conv_bursty",
        "--set",
        "workload.fallback_synthetic=true",
        "--set",
        "workload.num_requests=50",
    )
    assert "token states" in out
    out = _run(fresh, "kvsim", "reproduce", "fig2", "--quick", "--out", "results")
    assert "joint length table shipped with kvsim" in " ".join(out.split())
    out = _run(fresh, "kvsim", "plan", "bursty-kv", "--quick", "--out", "results")
    assert "answer" in out
    work = fresh[2]
    assert (work / "results" / "plan" / "quick" / "bursty-kv" / "plan.png").stat().st_size > 10_000
