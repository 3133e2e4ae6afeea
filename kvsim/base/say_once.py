"""Warnings said once per process: a sweep or a plan builds many configs and workloads alike,
and each would repeat the same warning."""

from __future__ import annotations

import logging

SAID: set[str] = set()


def warn_once(logger: logging.Logger, fmt: str, *args: object) -> None:
    """Log ``fmt % args`` (``fmt`` as it is without args) as a warning on ``logger``, unless
    this exact message was already said in this process."""
    message = fmt % args if args else fmt
    if message not in SAID:
        SAID.add(message)
        logger.warning(message)
