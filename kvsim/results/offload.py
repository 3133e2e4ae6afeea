"""The CPU and disk tiers' occupancy beside the memory time series (KV offloading,
``[offload]``).

One row per engine event, as the memory table: each tier's blocks by category at the row's
``time_s`` (``kvsim.core.kv.offload.CpuTier.occupancy``, ``kvsim.core.kv.disk_tier.DiskTier.
occupancy``). Every block of a tier is in exactly one category, so the four CPU columns sum to
``cpu_tier_blocks`` and the three disk columns to ``disk_tier_blocks`` on every row.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

TIER_COLUMNS = (
    "cpu_tier_stored_blocks",  # copied to the CPU, loadable
    "cpu_tier_storing_blocks",  # GPU->CPU copy in flight: neither loadable nor evictable
    "cpu_tier_loading_blocks",  # read by a CPU->GPU load, or a CPU->disk write: not evictable
    "cpu_tier_free_blocks",
)


def tier_arrays(samples: Iterable[int]) -> dict[str, npt.NDArray[Any]]:
    """The ``TIER_COLUMNS`` (blocks, int64) of ``samples``, flat: ``stored, storing, loading,
    free`` of one memory row after another (``Engine.tier_samples``), to join the memory
    table's columns (``memory_frame`` keeps them)."""
    return _columns(samples, TIER_COLUMNS)


DISK_COLUMNS = (
    "disk_tier_stored_blocks",  # written, readable
    "disk_tier_writing_blocks",  # CPU->disk write in flight: a lookup misses them
    "disk_tier_free_blocks",
)


def disk_arrays(samples: Iterable[int]) -> dict[str, npt.NDArray[Any]]:
    """The ``DISK_COLUMNS`` (blocks, int64) of ``samples``, flat: ``stored, writing, free`` of
    one memory row after another (``Engine.disk_samples``)."""
    return _columns(samples, DISK_COLUMNS)


def _columns(samples: Iterable[int], names: Sequence[str]) -> dict[str, Any]:
    """``samples`` (flat, ``len(names)`` a row) as int64 columns named ``names``."""
    table = np.fromiter(samples, dtype=np.int64).reshape(-1, len(names))
    return {name: table[:, i].copy() for i, name in enumerate(names)}
