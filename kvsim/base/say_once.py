"""Warnings and notes said once per process: a sweep or a plan builds many configs and workloads
alike, and each would repeat the same line."""

from __future__ import annotations

import logging

SAID: set[str] = set()


def warn_once(logger: logging.Logger, fmt: str, *args: object) -> None:
    """Log ``fmt % args`` (``fmt`` as it is without args) as a warning on ``logger``, unless
    this exact message was already said in this process."""
    _say_once(logger, logging.WARNING, fmt, args)


def note_once(logger: logging.Logger, fmt: str, *args: object) -> None:
    """``warn_once`` at the INFO level: a count the user asked for (a filter's dropped rows),
    not a warning."""
    _say_once(logger, logging.INFO, fmt, args)


def _say_once(logger: logging.Logger, level: int, fmt: str, args: tuple[object, ...]) -> None:
    message = fmt % args if args else fmt
    if message not in SAID:
        SAID.add(message)
        logger.log(level, message)
