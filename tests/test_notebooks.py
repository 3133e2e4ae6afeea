"""The notebooks run top to bottom in quick mode and draw their figures as PNG outputs.

Each notebook in ``notebooks/`` is executed with nbclient (kernel ``python3``, working directory
``notebooks/``, ``KVSIM_QUICK=1``, results in a fresh temporary folder through
``KVSIM_RESULTS``) under one time budget for the whole notebook. A plotting cell that shows
``<Figure size ... with 1 Axes>`` instead of a picture fails, whatever its exit status: every
code cell tagged ``figure`` must produce an ``image/png`` output. The stored notebooks carry no
outputs (the test executes them), so the repository stays small.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbformat import NotebookNode

NOTEBOOKS_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
NOTEBOOK_TIMEOUT_S = 120  # whole notebook with kernel start; quick: 3-7 s alone, <20 s in make test
FIGURE_TAG = "figure"
PNG = "image/png"
FIGURE_REPR = re.compile(r"<Figure size [^>]* with \d+ Axes>")


def _code_cells(nb: NotebookNode) -> list[tuple[int, NotebookNode]]:
    return [(i, cell) for i, cell in enumerate(nb.cells) if cell.cell_type == "code"]


def _mime_types(cell: NotebookNode) -> set[str]:
    return {mime for out in cell.get("outputs", []) for mime in out.get("data", {})}


def _execute(path: Path, results_dir: Path, monkeypatch: pytest.MonkeyPatch) -> NotebookNode:
    """Run ``path`` in quick mode (the kernel inherits this process's environment)."""
    monkeypatch.setenv("KVSIM_QUICK", "1")
    monkeypatch.setenv("KVSIM_RESULTS", str(results_dir))
    nb = nbformat.read(path, as_version=4)
    deadline_s = time.monotonic() + NOTEBOOK_TIMEOUT_S
    client = NotebookClient(
        nb,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOKS_DIR)}},
        # nbclient's timeout is per cell: give each cell what is left of the notebook's budget
        timeout_func=lambda _cell: max(1, round(deadline_s - time.monotonic())),
    )
    client.execute()  # raises CellExecutionError on the first cell that raises
    return nb


each_notebook = pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])


def test_there_are_notebooks() -> None:
    assert NOTEBOOKS, f"no notebooks in {NOTEBOOKS_DIR}"


@each_notebook
def test_notebook_is_stored_clean(notebook: Path) -> None:
    """Opens with a markdown cell, has tagged figure cells, and carries no outputs."""
    nb = nbformat.read(notebook, as_version=4)
    nbformat.validate(nb)
    assert nb.cells, "empty notebook"
    assert nb.cells[0].cell_type == "markdown", "must open with a markdown cell"
    cells = _code_cells(nb)
    assert any(FIGURE_TAG in c.metadata.get("tags", []) for _, c in cells), (
        f"no code cell tagged {FIGURE_TAG!r}"
    )
    stored = [i for i, c in cells if c.outputs or c.execution_count is not None]
    assert not stored, f"cells {stored} were saved with outputs; clear them before saving"
    assert "%matplotlib inline" in cells[0][1].source, (
        "the first code cell needs %matplotlib inline"
    )


@each_notebook
@pytest.mark.full
def test_notebook_runs_and_draws_figures(
    notebook: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nb = _execute(notebook, tmp_path / "results", monkeypatch)
    cells = _code_cells(nb)
    errors = [
        f"cell {i}: {out.ename}: {out.evalue}"
        for i, cell in cells
        for out in cell.outputs
        if out.output_type == "error"
    ]
    assert not errors, errors
    assert any(PNG in _mime_types(cell) for _, cell in cells), "no image/png output at all"
    no_png = [
        i
        for i, cell in cells
        if FIGURE_TAG in cell.metadata.get("tags", []) and PNG not in _mime_types(cell)
    ]
    assert not no_png, f"cells {no_png} are tagged {FIGURE_TAG!r} but drew no image/png"
    bare_reprs = [
        i
        for i, cell in cells
        for out in cell.outputs
        if PNG not in out.get("data", {})
        and FIGURE_REPR.search(str(out.get("data", {}).get("text/plain", "")))
    ]
    assert not bare_reprs, f"cells {bare_reprs} show a Figure's text repr instead of a picture"
