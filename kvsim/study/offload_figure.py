"""``results/NAME/figures/offload.png`` of an offload sweep (``make offload``, ``make
offload-disk``): the summary's points and the tier series of its largest tier at the middle
bandwidth. A sweep that varies ``offload.disk_offloading_size`` is drawn against the disk tier,
any other against the CPU tier."""

from __future__ import annotations

from pathlib import Path

from kvsim.study.load import load_sweep
from kvsim.view.labels import field_unit, field_value
from kvsim.view.offload_plots import CPU_AXES, DISK_AXES, offload_figure


def save_offload_figure(folder: str | Path) -> Path:
    """Draw an offload sweep's figure into ``folder/figures/offload.png``; returns the path.

    Raises:
        ValueError: ``folder`` is not a sweep folder (``kvsim.study.load.load_sweep``).
        ValueError: the sweep varies neither the disk tier's size and read bandwidth nor the
            CPU tier's size and link bandwidth.
    """
    sweep = load_sweep(folder)
    summary = sweep.summary
    axes_of = DISK_AXES if DISK_AXES.size in summary.columns else CPU_AXES
    size, bandwidth = axes_of.size, axes_of.bandwidth
    missing = [c for c in (size, bandwidth) if c not in summary.columns]
    if missing:
        raise ValueError(f"{folder}: not an offload sweep (no {', '.join(missing)} column)")
    bandwidths = sorted(summary[bandwidth].unique())
    middle = bandwidths[len(bandwidths) // 2]
    largest = summary[size].max()
    row = summary[(summary[size] == largest) & (summary[bandwidth] == middle)].iloc[0]
    memory = sweep.results(str(row["config_key"])).memory if largest else None
    drive = f"{field_value(bandwidth, middle)} {field_unit(bandwidth)}"  # (GB/s)
    title = f"{axes_of.tier}, {largest:g} GiB at {drive}"
    fig = offload_figure(summary, memory, tier_title=title, axes_of=axes_of)
    out = Path(folder) / "figures" / "offload.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    return out
