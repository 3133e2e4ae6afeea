"""kvsim as a library: the wheel, installed into a fresh virtual environment outside the clone,
runs presets, experiments, a reproduction and a plan from another directory, with no trace data.

The fresh environment gets kvsim only from the wheel; its third-party dependencies come from the
test's own environment through a ``.pth`` line (no download), which adds that folder to
``sys.path`` without running the editable install's hooks, so the clone is never imported.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], Path]:
    """``(venv bin folder, environment, working folder outside the clone)``."""
    tmp = tmp_path_factory.mktemp("wheel")
    dist = tmp / "dist"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(dist),
            str(ROOT),
        ],
        check=True,
    )
    (wheel,) = dist.glob("kvsim-*.whl")
    env_dir = tmp / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    bin_dir = env_dir / "bin"
    purelib = Path(
        subprocess.run(
            [
                str(bin_dir / "python"),
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    (purelib / "kvsim_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [
            str(bin_dir / "python"),
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        check=True,
    )
    work = tmp / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["KVSIM_DATA"] = str(tmp / "no-data")
    env["MPLBACKEND"] = "Agg"
    return bin_dir, env, work


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
