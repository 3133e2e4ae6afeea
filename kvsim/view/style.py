"""kvsim's matplotlib style (``kvsim/data/kvsim.mplstyle``), applied to every figure it draws.

``styled`` wraps a figure function in ``matplotlib.style.context`` so the style holds while the
figure is built (rcParams are read when artists are created) and nothing leaks into the caller's
own plots.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from importlib.resources import files
from typing import ParamSpec, TypeVar

import matplotlib.style

STYLE = str(files("kvsim") / "data" / "kvsim.mplstyle")
P = ParamSpec("P")
R = TypeVar("R")


def styled(fn: Callable[P, R]) -> Callable[P, R]:
    """Run ``fn`` under kvsim's matplotlib style."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with matplotlib.style.context(STYLE):
            return fn(*args, **kwargs)

    return wrapper
