"""Warnings and notes said once per process: a sweep or a plan builds many configs and workloads
alike, and each would repeat the same line."""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Iterator

SAID: set[str] = set()


def warn_once(logger: logging.Logger, fmt: str, *args: object) -> None:
    """Log ``fmt % args`` (``fmt`` as it is without args) as a warning on ``logger``, unless
    this exact message was already said in this process."""
    _say_once(logger, logging.WARNING, fmt, args)


def note_once(logger: logging.Logger, fmt: str, *args: object) -> None:
    """``warn_once`` at the INFO level: a count the user asked for (a filter's dropped rows),
    not a warning."""
    _say_once(logger, logging.INFO, fmt, args)


@contextlib.contextmanager
def held_back() -> Iterator[None]:
    """Say nothing ``warn_once`` or ``note_once`` is asked to inside (a config built only to
    see whether it is valid, not run): the messages are not marked said, so a later real build
    says them. Held per thread and task (a ``ContextVar``): another thread's warnings are said."""
    token = _HELD.set(True)
    try:
        yield
    finally:
        _HELD.reset(token)


_HELD: contextvars.ContextVar[bool] = contextvars.ContextVar("kvsim_held_back", default=False)


def _say_once(logger: logging.Logger, level: int, fmt: str, args: tuple[object, ...]) -> None:
    if _HELD.get():
        return
    message = fmt % args if args else fmt
    if message not in SAID:
        SAID.add(message)
        logger.log(level, message)
