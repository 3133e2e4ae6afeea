"""Small finished sweeps for the figure tests: each point four 64-token prompts, 8 tokens out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvsim.study.experiment import parse_experiment
from kvsim.study.sweep import run_sweep

# each point's workload: four 64-token prompts, 8 tokens out
FOUR_SHORT_REQUESTS = {
    "lengths": "fixed",
    "fixed_prompt_tokens": 64,
    "fixed_output_tokens": 8,
    "num_requests": 4,
    "rate_per_s": 5.0,
}


def small_sweep(
    root: Path, grid: dict[str, Any], zips: dict[str, Any] | None = None, name: str = "s"
) -> Path:
    """Run the sweep of ``grid`` (and ``zips``) over ``FOUR_SHORT_REQUESTS`` on 2 GiB of KV
    under ``root``; returns its folder."""
    exp = parse_experiment(
        {
            "base": {"cache": {"kv_cache_gib": 2.0}, "workload": FOUR_SHORT_REQUESTS},
            "grid": grid,
            **({"zip": zips} if zips else {}),
        },
        name=name,
    )
    run_sweep(exp, root, progress=False)
    return root / name
