"""Running a reproduction: its experiment through the sweep engine, then its comparison."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

from kvsim.study.paper import fig2, fig12, fig13, fig15, fig17, fig18b, preemption, prefix
from kvsim.study.paper.context import Context, Reproduction


def _registry() -> dict[str, tuple[str, Callable[[Context], Reproduction]]]:
    return {
        "fig2": (fig2.DESCRIPTION, fig2.run),
        "fig12": (fig12.DESCRIPTION, fig12.run),
        "fig12-66b": (
            "Figure 12, OPT-66B on 4 GPUs: sustainable ShareGPT rate and ratios",
            lambda ctx: fig12.run(ctx, "fig12-66b"),
        ),
        "fig12-175b": (
            "Figure 12, OPT-175B on 8 GPUs: sustainable ShareGPT rate and ratios",
            lambda ctx: fig12.run(ctx, "fig12-175b"),
        ),
        **{
            f"fig12{size}-alpaca": (
                f"Figure 12, {model}: sustainable Alpaca rate and ratios (no published numbers)",
                functools.partial(fig12.run, name=f"fig12{size}-alpaca", figure_key=None),
            )
            for size, model in (
                ("", "OPT-13B"),
                ("-66b", "OPT-66B on 4 GPUs"),
                ("-175b", "OPT-175B on 8 GPUs"),
            )
        },
        "fig13": (fig13.DESCRIPTION, fig13.run),
        "fig14": (
            "Figure 14: sustainable Alpaca rate, basic sampling and beam width 6, vLLM / Orca",
            lambda ctx: fig12.run(ctx, "fig14", "fig14"),
        ),
        "fig15": (fig15.DESCRIPTION, fig15.run),
        "fig16": (
            "Figure 16: shared few-shot prefix (translation), vLLM / Orca (Oracle)",
            lambda ctx: fig12.run(ctx, "fig16", "fig16"),
        ),
        "fig17": (fig17.DESCRIPTION, fig17.run),
        "fig18b": (fig18b.DESCRIPTION, fig18b.run),
        "preemption": (preemption.DESCRIPTION, preemption.run),
        "prefix-caching": (prefix.DESCRIPTION, prefix.run),
    }


REPRODUCTIONS = (
    "fig2",
    "fig12",
    "fig12-66b",
    "fig12-175b",
    "fig12-alpaca",
    "fig12-66b-alpaca",
    "fig12-175b-alpaca",
    "fig13",
    "fig14",
    "fig15",
    "fig16",
    "fig17",
    "fig18b",
    "preemption",
    "prefix-caching",
)


def describe(name: str) -> str:
    """One line on what a reproduction shows."""
    return _registry()[name][0]


def reproduce(
    name: str,
    out_root: str | Path | None = None,
    *,
    jobs: int = 1,
    quick: bool = False,
    scheduler: str | None = None,
    progress: bool = False,
    say: Callable[[str], None] | None = None,
) -> Reproduction:
    """Run reproduction ``name`` (one of ``REPRODUCTIONS``) and write its CSV and PNG under
    ``out_root`` (default: the checkout's ``results/``, else ``./results``).

    Raises:
        ValueError: unknown name, or a point failed.
        DataNotFoundError: a trace it needs is not in ``KVSIM_DATA`` (and has no fallback).
    """
    registry = _registry()
    if name not in registry:
        raise ValueError(f"reproduce: unknown {name!r}; choose from {', '.join(REPRODUCTIONS)}")
    if out_root is None:
        from kvsim.study.sweep import default_results_root

        out_root = default_results_root()
    ctx = Context(Path(out_root), jobs, quick, scheduler, progress, say or (lambda _m: None))
    rep = registry[name][1](ctx)
    if quick:  # the bands are the full runs' claims
        rep.notes.append("quick run (the experiment's [quick] sizes): a smoke test, not the result")
    return rep
