"""The notebooks' stored outputs and the fingerprint of the inputs that produced them.

Each notebook in ``notebooks/`` is committed with the outputs of its quick run (``KVSIM_QUICK=1``:
every experiment's ``[quick]`` points, seconds a notebook), figures embedded as PNG, so that they
show where the notebook is read (GitHub renders them). Its metadata's ``kvsim`` entry records
what produced them: the SHA-256 of the notebook's own cells (sources only, not outputs), of every
shipped experiment, plan and workload preset it runs (found by name: a quoted name of a shipped
preset in a cell, and in turn in that preset's TOML), and the kvsim version of
``pyproject.toml``. ``tests/test_notebooks.py`` checks, without executing anything, that the
stored fingerprint is the one the inputs give today; ``make notebooks`` re-executes them and
stores the new outputs and fingerprint:

    python -m tests.notebook_tools refresh [NAME ...]   # make notebooks
    python -m tests.notebook_tools check                # exit status 1 naming stale notebooks

A refresh runs each notebook with nbclient (kernel ``python3``, working directory ``notebooks/``)
with its results in a fresh ``results/notebooks/`` (so no point is reused from an older run), and
records no execution times. Folders of the machine that ran it are written as the notebook
would reach them: the trace folder as ``$KVSIM_DATA``, the repository as ``..`` (the notebook's
folder is ``notebooks/``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import sys
import time
import tomllib
from collections.abc import Iterable
from pathlib import Path

import nbformat
from nbformat import NotebookNode

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS_DIR = ROOT / "notebooks"
PRESETS = ROOT / "kvsim" / "presets"
PRESET_DIRS = (PRESETS / "experiments", PRESETS / "plans", PRESETS / "workloads")
RESULTS = ROOT / "results" / "notebooks"  # a refresh's results (git-ignored), emptied first
METADATA_KEY = "kvsim"
NOTEBOOK_TIMEOUT_S = 300  # whole notebook with kernel start (quick: 3-20 s)
QUOTED = re.compile(r"""["']([A-Za-z0-9_.-]+?)(?:\.toml)?["']""")


def notebooks() -> list[Path]:
    return sorted(NOTEBOOKS_DIR.glob("*.ipynb"))


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def cells_text(nb: NotebookNode) -> str:
    """The notebook's cells as they are written (type and source), without outputs."""
    return "\n".join(f"# {cell.cell_type}\n{cell.source}" for cell in nb.cells)


def kvsim_version() -> str:
    """The version in ``pyproject.toml`` (the source's, whatever is installed)."""
    return str(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"])


def _presets_named(text: str) -> list[Path]:
    """The shipped presets (experiments, plans, workloads) whose name ``text`` quotes."""
    names = set(QUOTED.findall(text))
    return [
        d / f"{name}.toml"
        for d in PRESET_DIRS
        for name in sorted(names)
        if (d / f"{name}.toml").is_file()
    ]


def preset_inputs(text: str) -> list[Path]:
    """Every preset ``text`` names, and every preset those name in turn (a plan's experiment,
    an experiment's workloads), sorted."""
    found: set[Path] = set()
    todo = _presets_named(text)
    while todo:
        path = todo.pop()
        if path not in found:
            found.add(path)
            todo.extend(_presets_named(path.read_text(encoding="utf-8")))
    return sorted(found)


def fingerprint(nb: NotebookNode) -> dict[str, object]:
    """What the notebook's outputs depend on: ``{"sha256": of everything below, "inputs":
    {path: sha256}, "kvsim_version": ...}`` (paths relative to the repository)."""
    text = cells_text(nb)
    inputs = {"(cells)": _sha256(text.encode())}
    for path in preset_inputs(text):
        inputs[path.relative_to(ROOT).as_posix()] = _sha256(path.read_bytes())
    version = kvsim_version()
    whole = "\n".join([*(f"{k} {v}" for k, v in inputs.items()), f"kvsim {version}"])
    return {"sha256": _sha256(whole.encode()), "inputs": inputs, "kvsim_version": version}


def stale_reason(path: Path) -> str | None:
    """Why the stored outputs of the notebook at ``path`` are not current, or ``None``."""
    nb = nbformat.read(path, as_version=4)
    stored = nb.metadata.get(METADATA_KEY, {}).get("fingerprint")
    if not stored:
        return f"{path.name}: no stored fingerprint; run `make notebooks`"
    now = fingerprint(nb)
    if stored.get("sha256") == now["sha256"]:
        return None
    old, new = dict(stored.get("inputs", {})), dict(now["inputs"])  # type: ignore[call-overload]
    changed = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    if stored.get("kvsim_version") != now["kvsim_version"]:
        changed.append(f"kvsim {stored.get('kvsim_version')} -> {now['kvsim_version']}")
    return f"{path.name}: outputs are stale ({', '.join(changed)} changed); run `make notebooks`"


def execute(nb: NotebookNode, results: Path, env: dict[str, str] | None = None) -> NotebookNode:
    """Run ``nb`` top to bottom in quick mode from ``notebooks/``, results under ``results``
    (the kernel inherits this process's environment, with ``env`` over it).

    Raises:
        nbclient.exceptions.CellExecutionError: the first cell that raised.
    """
    from nbclient import NotebookClient

    saved = {
        k: os.environ.get(k)
        for k in ("KVSIM_QUICK", "KVSIM_RESULTS", "MPLBACKEND", "PYTHONPATH", *(env or {}))
    }
    # the kernel imports this checkout's kvsim, whatever the environment has installed
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    os.environ.update(
        {"KVSIM_QUICK": "1", "KVSIM_RESULTS": str(results), "PYTHONPATH": path, **(env or {})}
    )
    os.environ.pop("MPLBACKEND", None)  # %matplotlib inline, not a backend from outside
    deadline_s = time.monotonic() + NOTEBOOK_TIMEOUT_S
    try:
        NotebookClient(
            nb,
            kernel_name="python3",
            resources={"metadata": {"path": str(NOTEBOOKS_DIR)}},
            record_timing=False,
            # nbclient's timeout is per cell: give each cell what is left of the notebook's budget
            timeout_func=lambda _cell: max(1, round(deadline_s - time.monotonic())),
        ).execute()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return nb


def _machine_folders() -> list[tuple[str, str]]:
    """``(absolute folder, what the stored outputs say instead)``, longest first."""
    from kvsim.workload.catalog import DataNotFoundError, data_dir

    folders = [(str(ROOT), "..")]
    with contextlib.suppress(DataNotFoundError):
        folders.append((str(data_dir()), "$KVSIM_DATA"))
    return sorted(folders, key=lambda pair: -len(pair[0]))


def _without_machine_folders(nb: NotebookNode) -> None:
    folders = _machine_folders()

    def clean(text: str) -> str:
        for folder, said in folders:
            text = text.replace(folder, said)
        return text

    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if "text" in out:
                out["text"] = clean(out["text"])
            for mime, value in out.get("data", {}).items():
                if mime.startswith("text/") and isinstance(value, str):
                    out["data"][mime] = clean(value)


def refresh(paths: Iterable[Path]) -> None:
    """Execute each notebook in quick mode and store its outputs and fingerprint in place."""
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        shutil.rmtree(RESULTS, ignore_errors=True)
        RESULTS.mkdir(parents=True)
        started = time.monotonic()
        # relative to notebooks/, where the kernel runs: the outputs name no folder of this machine
        execute(nb, Path(os.path.relpath(RESULTS, NOTEBOOKS_DIR)))
        _without_machine_folders(nb)
        nb.metadata[METADATA_KEY] = {
            "outputs": "quick run (KVSIM_QUICK=1), stored by `make notebooks`",
            "fingerprint": fingerprint(nb),
        }
        nbformat.write(nb, path)
        print(f"{path.relative_to(ROOT)}: refreshed in {time.monotonic() - started:.0f} s")


def main(argv: list[str]) -> int:
    command, names = (argv[0] if argv else ""), argv[1:]
    if command == "refresh":
        chosen = [NOTEBOOKS_DIR / f"{Path(n).stem}.ipynb" for n in names] or notebooks()
        refresh(chosen)
        return 0
    if command == "check":
        reasons = [r for r in map(stale_reason, notebooks()) if r]
        print("\n".join(reasons) or f"{len(notebooks())} notebooks current")
        return 1 if reasons else 0
    print("usage: python -m tests.notebook_tools refresh [NAME ...] | check", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
