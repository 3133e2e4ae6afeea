"""``results/NAME/figures/offload.png`` of an offload sweep (``make offload``): the summary's
points and the CPU-tier series of its largest buffer at the middle link bandwidth."""

from __future__ import annotations

from pathlib import Path

from kvsim.study.load import load_sweep
from kvsim.view.offload_plots import BANDWIDTH, SIZE, offload_figure


def save_offload_figure(folder: str | Path) -> Path:
    """Draw an offload sweep's figure into ``folder/figures/offload.png``; returns the path.

    Raises:
        FileNotFoundError: no sweep results in ``folder``.
        ValueError: the sweep does not vary ``offload.kv_offloading_size`` and the bandwidth.
    """
    sweep = load_sweep(folder)
    summary = sweep.summary
    missing = [c for c in (SIZE, BANDWIDTH) if c not in summary.columns]
    if missing:
        raise ValueError(f"{folder}: not an offload sweep (no {', '.join(missing)} column)")
    bandwidths = sorted(summary[BANDWIDTH].unique())
    middle = bandwidths[len(bandwidths) // 2]
    largest = summary[SIZE].max()
    row = summary[(summary[SIZE] == largest) & (summary[BANDWIDTH] == middle)].iloc[0]
    memory = sweep.results(str(row["config_key"])).memory if largest else None
    title = f"CPU tier, {largest:g} GiB at {middle / 1e9:g} GB/s"
    fig = offload_figure(summary, memory, tier_title=title)
    out = Path(folder) / "figures" / "offload.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    return out
