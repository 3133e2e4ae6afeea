"""What a results folder holds, so that a command given another kind of folder (a sweep to
``kvsim report``, a run to ``kvsim plot``) or none at all says so and names what reads it.

The kinds: a *run* (``kvsim run --out``: ``summary.json``, also each point of a sweep under
``points/``), a *sweep* (``kvsim sweep``: ``summary.parquet``) and a *plan* (``kvsim plan``:
``answer.json``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from kvsim.base.tablefile import stored_table
from kvsim.config.file_kinds import what_file

FolderKind = Literal["run", "sweep", "plan"]

_MARKER: dict[str, str] = {
    "run": "summary.json",
    "sweep": "summary.parquet",
    "plan": "answer.json",
}
_READ_BY: dict[str, str] = {
    "run": "kvsim report and kvsim compare read it",
    "sweep": "kvsim plot draws it; its points under points/ are run folders",
    "plan": "kvsim plan wrote it: its answer.json and points.csv, and a figure",
}


def read_by(kind: FolderKind) -> str:
    """What reads a results folder of ``kind`` (``"kvsim report and kvsim compare read it"``)."""
    return _READ_BY[kind]


def folder_kind(path: Path) -> FolderKind | None:
    """The kind of results folder ``path`` is, by the file it holds (``None``: none of them)."""
    if (path / _MARKER["run"]).is_file():
        return "run"
    if stored_table(path / _MARKER["sweep"]) is not None:  # (or its CSV twin, without pyarrow)
        return "sweep"
    return "plan" if (path / _MARKER["plan"]).is_file() else None


def check_folder(path: Path, expected: FolderKind, name: str) -> None:
    """Refuse a ``path`` that is no folder of the ``expected`` kind, saying what it is instead.

    Args:
        path: the folder as the user named it.
        expected: the kind the command reads.
        name: the argument, for the message (``RUN_DIR``, the folder itself).

    Raises:
        ValueError: no such folder; a file; a folder of another kind (naming what reads it);
            a folder of no kind (naming the file it lacks and the command that writes it).
    """
    if not path.exists():
        raise ValueError(f"{name}: no such folder")
    if not path.is_dir():
        if not path.is_file():  # (a named pipe, a socket, a device)
            raise ValueError(f"{name}: is not a folder (nor a regular file)")
        what = what_file(path)
        hint = f": {what}" if what else ""
        raise ValueError(f"{name}: is a file, expected a {expected} folder{hint}")
    kind = folder_kind(path)
    if kind == expected:
        return
    if kind is not None:
        marker = _MARKER[kind]
        if kind == "sweep":  # (its CSV twin, written without pyarrow)
            marker = getattr(stored_table(path / marker), "name", marker)
        raise ValueError(
            f"{name}: is a {kind} folder ({marker}), not a {expected} folder; {_READ_BY[kind]}"
        )
    writer = {"run": "kvsim run --out DIR", "sweep": "kvsim sweep", "plan": "kvsim plan"}
    raise ValueError(
        f"{name}: holds no {_MARKER[expected]} (a {expected} folder: {writer[expected]} writes one)"
    )
