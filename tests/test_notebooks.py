"""The notebooks are committed with the outputs of their quick run, and those outputs are current.

Fast (``make test``), without executing anything: each notebook in ``notebooks/`` opens with a
markdown cell, every code cell holds the outputs of one top-to-bottom run with no error, every
code cell tagged ``figure`` shows an ``image/png`` picture (never a ``<Figure size ...>`` text in
its place), the first output says it is a quick run, no output names a folder of the machine
that ran it, and the fingerprint stored in the notebook's metadata is the one its inputs give
today (its cells, the presets it runs, kvsim's version: ``tests/notebook_tools.py``). A stale
notebook fails with the inputs that changed; ``make notebooks`` refreshes it.

Full (``make test-full``): each notebook is executed again in quick mode, in a fresh results
folder, and must run without error and draw every figure.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from nbformat import NotebookNode

from tests.notebook_tools import METADATA_KEY, execute, notebooks, stale_reason

NOTEBOOKS = notebooks()
FIGURE_TAG = "figure"
PNG = "image/png"
FIGURE_REPR = re.compile(r"<Figure size [^>]* with \d+ Axes>")
MACHINE_FOLDER = re.compile(r"(?<![\w.$])/(?:work|tmp|home|root|usr|opt|var)/")


def _code_cells(nb: NotebookNode) -> list[tuple[int, NotebookNode]]:
    return [(i, cell) for i, cell in enumerate(nb.cells) if cell.cell_type == "code"]


def _mime_types(cell: NotebookNode) -> set[str]:
    return {mime for out in cell.get("outputs", []) for mime in out.get("data", {})}


def _texts(cell: NotebookNode) -> list[str]:
    texts = []
    for out in cell.get("outputs", []):
        texts.append(str(out.get("text", "")))
        texts.extend(str(v) for k, v in out.get("data", {}).items() if k.startswith("text/"))
    return texts


def check_outputs(nb: NotebookNode) -> None:
    """The checks every run's outputs pass, stored or fresh (see the module docstring)."""
    cells = _code_cells(nb)
    errors = [
        f"cell {i}: {out.ename}: {out.evalue}"
        for i, cell in cells
        for out in cell.outputs
        if out.output_type == "error"
    ]
    assert not errors, errors
    no_png = [
        i
        for i, cell in cells
        if FIGURE_TAG in cell.metadata.get("tags", []) and PNG not in _mime_types(cell)
    ]
    assert not no_png, f"cells {no_png} are tagged {FIGURE_TAG!r} but show no image/png"
    bare_reprs = [
        i
        for i, cell in cells
        for out in cell.outputs
        if PNG not in out.get("data", {})
        and FIGURE_REPR.search(str(out.get("data", {}).get("text/plain", "")))
    ]
    assert not bare_reprs, f"cells {bare_reprs} show a Figure's text repr instead of a picture"


each_notebook = pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])


def test_there_are_notebooks() -> None:
    assert NOTEBOOKS, "no notebooks in notebooks/"


@each_notebook
def test_notebook_is_stored_with_its_quick_outputs(notebook: Path) -> None:
    nb = nbformat.read(notebook, as_version=4)
    nbformat.validate(nb)
    assert nb.cells[0].cell_type == "markdown", "must open with a markdown cell"
    cells = _code_cells(nb)
    assert "%matplotlib inline" in cells[0][1].source, (
        "the first code cell needs %matplotlib inline"
    )
    assert any(FIGURE_TAG in c.metadata.get("tags", []) for _, c in cells), (
        f"no code cell tagged {FIGURE_TAG!r}"
    )
    counts = [cell.execution_count for _, cell in cells]
    assert counts == list(range(1, len(cells) + 1)), (
        f"execution counts {counts}: not one top-to-bottom run; run `make notebooks`"
    )
    check_outputs(nb)
    assert "QUICK RUN (KVSIM_QUICK=1)" in "".join(_texts(cells[0][1]))
    assert "quick run" in nb.metadata[METADATA_KEY]["outputs"]
    named = [
        (i, m.group()) for i, c in cells for t in _texts(c) for m in MACHINE_FOLDER.finditer(t)
    ]
    assert not named, f"outputs name folders of the machine that ran them: {named[:3]}"


@each_notebook
def test_notebook_outputs_are_current(notebook: Path) -> None:
    assert stale_reason(notebook) is None, stale_reason(notebook)


@each_notebook
@pytest.mark.full
def test_notebook_runs_and_draws_figures(notebook: Path, tmp_path: Path) -> None:
    nb = nbformat.read(notebook, as_version=4)
    for _, cell in _code_cells(nb):
        cell.outputs, cell.execution_count = [], None
    check_outputs(execute(nb, tmp_path / "results"))
    assert any(PNG in _mime_types(cell) for _, cell in _code_cells(nb)), "no image/png at all"
