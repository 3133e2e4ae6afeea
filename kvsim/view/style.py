"""kvsim's matplotlib style (``kvsim/data/kvsim.mplstyle``), applied to every figure it draws.

``styled`` wraps a figure function in ``matplotlib.style.context`` so the style holds while the
figure is built (rcParams are read when artists are created) and nothing leaks into the caller's
own plots. A ``"C1"`` colour string is read when the figure is drawn, after that context has
ended (matplotlib's default colours then): ``style_color`` gives the style's own colour.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from importlib.resources import files
from typing import ParamSpec, TypeVar

import matplotlib
import matplotlib.style
from matplotlib.colors import to_rgb

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


@functools.cache
def _cycle() -> tuple[str, ...]:
    params = matplotlib.rc_params_from_file(STYLE, use_default_template=False)
    return tuple(params["axes.prop_cycle"].by_key()["color"])


def style_color(i: int) -> tuple[float, float, float]:
    """The ``i``-th colour of kvsim's colour cycle (``axes.prop_cycle``, from 0, wrapping) as
    RGB in 0..1, whatever style is active when the figure is drawn."""
    cycle = _cycle()
    return to_rgb(cycle[i % len(cycle)])
