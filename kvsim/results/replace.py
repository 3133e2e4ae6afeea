"""Saving a run over the earlier run in its folder so that an interrupt or a failure loses
neither.

``Results.save`` writes the new run's files into a hidden folder inside the target (same file
system: a rename moves each). Only then, holding a lock on the folder (another kvsim saving
there waits) and with Ctrl-C and SIGTERM held off for the few renames, are the new files moved over
the old ones and the earlier run's other files (``run_file_names``: the names its save listed)
removed. Ctrl-C while the tables are written leaves the earlier run whole (the hidden folder is
removed); a signal during the swap takes effect once the new run is whole; a rename that fails
leaves the new run's remaining files in the hidden folder, which the error names.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from kvsim.results.tables import RUN_MANIFEST, run_file_names

if TYPE_CHECKING:
    from kvsim.results.tables import Results

logger = logging.getLogger(__name__)

STAGING_PREFIX = ".kvsim-saving-"  # (hidden: a folder a save was cut short in is no user file)


def save_replacing(results: Results, folder: Path) -> list[str]:
    """Save ``results`` into ``folder`` in place of the run it holds (see the module docstring).

    Returns:
        the names of the earlier run's files replaced or removed (empty: there was none).

    Raises:
        OSError: a file that cannot be written (the earlier run is left whole), or moved or
            removed during the swap (the message names the hidden folder holding the rest of
            the new run).
    """
    folder.mkdir(parents=True, exist_ok=True)
    for left in sorted(folder.glob(f"{STAGING_PREFIX}*")):  # (a save killed mid-way)
        logger.warning(
            "%s: a save cut short left %s; remove it when no kvsim runs there", folder, left
        )
    staging = folder / f"{STAGING_PREFIX}{uuid.uuid4().hex[:8]}"
    try:
        results.save(staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    names = sorted(p.name for p in staging.iterdir())
    names.sort(key=lambda name: name != RUN_MANIFEST)  # the list first: a run's mark
    with _folder_lock(folder), signals_held():
        earlier = [n for n in run_file_names(folder) if _is_file(folder / n)]
        try:
            for name in names:  # over the old files of the same names, one rename each
                os.replace(staging / name, folder / name)
            for name in earlier:  # the earlier run's files the new one does not have
                if name not in names:
                    (folder / name).unlink(missing_ok=True)
        except OSError as err:
            raise OSError(
                err.errno,
                f"{err.strerror or err} ({err.filename}); the new run's files not yet moved in "
                f"are in {staging}",
            ) from None
        staging.rmdir()  # (before a held signal is delivered)
    return earlier


def _is_file(path: Path) -> bool:
    return path.is_symlink() or path.is_file()  # (a link itself, not what it points to)


@contextlib.contextmanager
def _folder_lock(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``folder`` (``flock`` of the folder itself, no lock file): two
    kvsim saving into one folder swap their runs in one after the other, never file by file
    together. Without ``fcntl`` (Windows) nothing is locked."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # (releases the lock)


HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold Ctrl-C (SIGINT) and SIGTERM off until the block ends, then deliver each that came
    to the handler that was in place (a KeyboardInterrupt, the end of the process, or nothing
    where it was ignored). Python runs signal handlers in the main thread only, so elsewhere
    nothing is held."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def note(signum: int, _frame: object) -> None:
        received.append(signum)

    # (a handler, not a blocked mask as kvsim.base.workers holds for its workers: a signal
    # blocked in the main thread goes to another thread, whose handler runs at once)
    previous = {s: signal.signal(s, note) for s in HELD_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for signum in dict.fromkeys(received):
            signal.raise_signal(signum)
