"""A fresh virtual environment outside the clone holding kvsim only from its wheel (the Python
sources, or compiled by mypyc with ``KVSIM_COMPILE=1``, as ``make native`` builds it), for the
tests that run kvsim as an installed library (``test_wheel``, ``test_compiled``).

Its third-party dependencies come from the test's own environment through a ``.pth`` line (no
download), which adds that folder to ``sys.path`` without running the editable install's hooks,
so the clone is never imported.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def install_wheel(tmp: Path, *, compiled: bool = False) -> tuple[Path, dict[str, str], Path]:
    """Build kvsim's wheel in ``tmp`` and install it into a fresh environment there; returns
    ``(its bin folder, an environment for it with no trace data, a working folder outside the
    clone)``. ``compiled``: build with ``KVSIM_COMPILE=1`` (mypy and a C compiler; minutes)."""
    dist = tmp / "dist"
    build_env = {k: v for k, v in os.environ.items() if k != "KVSIM_COMPILE"}
    if compiled:
        build_env["KVSIM_COMPILE"] = "1"
    pip = [sys.executable, "-m", "pip"]
    subprocess.run(
        [*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist), str(ROOT)],
        check=True,
        env=build_env,
        cwd=tmp,  # (mypyc writes its C sources under the working folder's build/)
    )
    (wheel,) = dist.glob("kvsim-*.whl")
    env_dir = tmp / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    bin_dir = env_dir / "bin"
    python = str(bin_dir / "python")
    paths = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    purelib = Path(
        subprocess.run(
            [python, "-c", paths], check=True, capture_output=True, text=True
        ).stdout.strip()
    )
    (purelib / "kvsim_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], check=True
    )
    work = tmp / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["KVSIM_DATA"] = str(tmp / "no-data")
    env["MPLBACKEND"] = "Agg"
    return bin_dir, env, work
