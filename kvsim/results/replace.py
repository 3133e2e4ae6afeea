"""Saving a run over the earlier run in its folder so that an interrupt loses neither.

``Results.save`` writes the new run's files into a hidden folder inside the target (same file
system: a rename moves each). Only then, with Ctrl-C held off for the few renames, are the
earlier run's files removed (``remove_run_files``: the names its save listed) and the new ones
moved in. Ctrl-C while the tables are written leaves the earlier run whole (the hidden folder is
removed); Ctrl-C during the swap takes effect once the new run is whole.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from kvsim.results.tables import RUN_MANIFEST, remove_run_files

if TYPE_CHECKING:
    from kvsim.results.tables import Results

STAGING_PREFIX = ".kvsim-saving-"  # (hidden: a folder a save was cut short in is no user file)


def save_replacing(results: Results, folder: Path) -> list[str]:
    """Save ``results`` into ``folder`` in place of the run it holds (see the module docstring).

    Returns:
        the names of the earlier run's files removed (empty: there was none).

    Raises:
        OSError: a file that cannot be written, removed or moved (the new run's files stay in
            their hidden folder only until then: it is removed).
    """
    folder.mkdir(parents=True, exist_ok=True)
    staging = folder / f"{STAGING_PREFIX}{uuid.uuid4().hex[:8]}"
    try:
        results.save(staging)
        names = sorted(p.name for p in staging.iterdir())
        names.sort(key=lambda name: name != RUN_MANIFEST)  # the list first: a run's mark
        with sigint_held():
            removed = remove_run_files(folder)
            for name in names:
                os.replace(staging / name, folder / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return removed


@contextmanager
def sigint_held() -> Iterator[None]:
    """Hold Ctrl-C (SIGINT) off until the block ends, then raise ``KeyboardInterrupt`` if one
    came; in the main thread only (elsewhere Python delivers no signal anyway)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, _frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        raise KeyboardInterrupt
