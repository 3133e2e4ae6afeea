"""The CPU tier's occupancy beside the memory time series (KV offloading, ``[offload]``).

One row per engine event, as the memory table: the tier's blocks by category at the row's
``time_s`` (``kvsim.core.kv.offload.CpuTier.occupancy``). Every block of the tier is in exactly
one category, so the four columns sum to ``cpu_tier_blocks`` on every row.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

TIER_COLUMNS = (
    "cpu_tier_stored_blocks",  # copied to the CPU, loadable
    "cpu_tier_storing_blocks",  # GPU->CPU copy in flight: neither loadable nor evictable
    "cpu_tier_loading_blocks",  # read by a CPU->GPU load in flight: not evictable
    "cpu_tier_free_blocks",
)


def add_tier_columns(
    memory: pd.DataFrame, samples: Sequence[tuple[int, int, int, int]]
) -> pd.DataFrame:
    """``memory`` with the ``TIER_COLUMNS`` (blocks) of ``samples``, one per row.

    Raises:
        ValueError: ``samples`` and ``memory`` differ in length.
    """
    if len(samples) != len(memory):
        raise ValueError(
            f"samples: expected one CPU-tier sample per memory row ({len(memory)}), got "
            f"{len(samples)}"
        )
    columns = dict(zip(TIER_COLUMNS, zip(*samples, strict=True), strict=True))
    return memory.assign(**{name: list(values) for name, values in columns.items()})
