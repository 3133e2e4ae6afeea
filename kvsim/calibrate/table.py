"""Calibration tables: measured (or analytic) decode-attention times, contiguous vs paged layout.

A table has metadata (device name, driver, CuPy version, date, shape of the kernel) and one row per
grid point ``(batch_size, context_tokens, block_size_tokens)`` with the median kernel time of the
contiguous layout and of the paged layout at that block size. The cost model needs only the
paged/contiguous ratio per block size (``layout_factor``). Tables are CSV (metadata as leading
``# key: value`` comment lines) or JSON (``{"meta": {...}, "rows": [{...}, ...]}``).

``CalibrationTable.analytic()`` is the stand-in used when no measured table is given or shipped:
its metadata says ``source: analytic`` and its ratios come from ``analytic_layout_factor``.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from kvsim.base.say_once import warn_once
from kvsim.calibrate.columns import ROW_COLUMNS

logger = logging.getLogger(__name__)

META_KEYS = ("source", "device_name", "driver_version", "cupy_version", "date_utc")
SOURCES = ("measured", "analytic")

# Analytic default: factor(B) = 1 + ANALYTIC_BASE_OVERHEAD + ANALYTIC_PER_BLOCK_OVERHEAD / B.
# Source: Kwon et al. (SOSP 2023) report their paged kernel 20-26 % slower than a contiguous one at
# the default block size 16; we place B = 16 at the midpoint, 1.23. The split into a constant part
# (block-table indirection, less regular loads) and a part amortised over the B tokens of a block
# (one table lookup and one non-contiguous fetch per block) is an assumption: it makes block size 1
# about 2.6x slower and block size 256 about 1.14x, the shape of the paper's Figure 18a, not its
# numbers. A measured table replaces all of this.
ANALYTIC_PER_BLOCK_OVERHEAD = 1.5
ANALYTIC_BASE_OVERHEAD = 0.23 - ANALYTIC_PER_BLOCK_OVERHEAD / 16
ANALYTIC_BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def analytic_layout_factor(block_size_tokens: int) -> float:
    """Analytic paged/contiguous KV-read time ratio at a block size (see module constants).

    Args:
        block_size_tokens: tokens per KV block (>= 1).

    Returns:
        The ratio (> 1): 1.23 at 16 tokens, about 2.63 at 1 token.
    """
    if block_size_tokens < 1:
        raise ValueError(f"block_size_tokens: must be >= 1, got {block_size_tokens}")
    return 1.0 + ANALYTIC_BASE_OVERHEAD + ANALYTIC_PER_BLOCK_OVERHEAD / block_size_tokens


@dataclass
class CalibrationTable:
    """Decode-attention kernel times per grid point, with the metadata of where they came from.

    Attributes:
        meta: string metadata; ``META_KEYS`` are required, ``source`` is ``measured`` or
            ``analytic``.
        rows: one dict per grid point with ``ROW_COLUMNS`` (times in seconds, bytes of K+V read).
    """

    meta: dict[str, str]
    rows: list[dict[str, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        validate(self.meta, self.rows)

    @property
    def is_measured(self) -> bool:
        return self.meta["source"] == "measured"

    def describe(self) -> str:
        """One line: where the ratios come from."""
        if not self.is_measured:
            return "analytic default (not measured; run `kvsim calibrate` on a GPU)"
        return (
            f"measured on {self.meta['device_name']} (driver {self.meta['driver_version']}, "
            f"CuPy {self.meta['cupy_version']}, {self.meta['date_utc']})"
        )

    def ratios_by_block_size(self) -> dict[int, float]:
        """Median over the grid of ``paged_s / contiguous_s`` for each block size (tokens)."""
        by_block: dict[int, list[float]] = {}
        for row in self.rows:
            by_block.setdefault(int(row["block_size_tokens"]), []).append(
                row["paged_s"] / row["contiguous_s"]
            )
        return {b: float(np.median(v)) for b, v in sorted(by_block.items())}

    def layout_factor(self, block_size_tokens: int) -> float:
        """Paged/contiguous KV-read time ratio at ``block_size_tokens``.

        Interpolated linearly in log2(block size) between measured block sizes and clamped to the
        nearest one outside the measured range.
        """
        ratios = self.ratios_by_block_size()
        sizes = np.log2(np.array(list(ratios), np.float64))
        values = np.array(list(ratios.values()), np.float64)
        return float(np.interp(np.log2(block_size_tokens), sizes, values))

    @classmethod
    def analytic(cls) -> CalibrationTable:
        """The analytic stand-in: one row per block size of ``ANALYTIC_BLOCK_SIZES``."""
        meta = {
            "source": "analytic",
            "device_name": "none (analytic)",
            "driver_version": "n/a",
            "cupy_version": "n/a",
            "date_utc": "n/a",
            "note": "analytic_layout_factor(B) = 1 + base + per_block / B; not a measurement",
        }
        rows = [
            {
                "batch_size": 1.0,
                "context_tokens": 1.0,
                "block_size_tokens": float(b),
                "contiguous_s": 1.0,
                "paged_s": analytic_layout_factor(b),
                "kv_bytes": 0.0,
            }
            for b in ANALYTIC_BLOCK_SIZES
        ]
        return cls(meta, rows)

    # -- serialisation ----------------------------------------------------------------------
    def to_csv(self) -> str:
        """CSV text with ``# key: value`` metadata lines first."""
        buf = io.StringIO()
        for key in sorted(self.meta):
            buf.write(f"# {key}: {self.meta[key]}\n")
        writer = csv.DictWriter(buf, fieldnames=list(ROW_COLUMNS), lineterminator="\n")
        writer.writeheader()
        for row in self.rows:
            writer.writerow({c: _fmt(row[c]) for c in ROW_COLUMNS})
        return buf.getvalue()

    def to_json(self) -> str:
        return json.dumps({"meta": self.meta, "rows": self.rows}, indent=1, sort_keys=True)

    def save(self, path: str | Path) -> Path:
        """Write as CSV or JSON by the file's suffix (``.csv`` / ``.json``)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = self.to_json() if path.suffix == ".json" else self.to_csv()
        path.write_text(text)
        return path

    @classmethod
    def load(cls, path: str | Path) -> CalibrationTable:
        """Read a CSV or JSON table (by suffix).

        Raises:
            FileNotFoundError: no such file.
            ValueError: unreadable, bad JSON, a missing column or metadata key, a short row or a
                bad value (naming the file, the row, the column and the value).
        """
        from kvsim.calibrate.table_file import read_table_file  # pydantic: not in the runbook

        return cls(*read_table_file(Path(path)))


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def validate(meta: dict[str, str], rows: list[dict[str, float]]) -> None:
    """Check a table's schema.

    Raises:
        ValueError: naming the missing metadata key or column, or the bad value.
    """
    for key in META_KEYS:
        if key not in meta:
            raise ValueError(
                f"calibration table: metadata {key!r} is missing; need {list(META_KEYS)}"
            )
    if meta["source"] not in SOURCES:
        raise ValueError(
            f"calibration table: source must be one of {SOURCES}, got {meta['source']!r}"
        )
    if not rows:
        raise ValueError("calibration table: no rows")
    for i, row in enumerate(rows):
        missing = [c for c in ROW_COLUMNS if c not in row]
        if missing:
            raise ValueError(f"calibration table: row {i} lacks columns {missing}")
        times = (row["contiguous_s"], row["paged_s"])
        if row["block_size_tokens"] < 1 or not all(0 < t < math.inf for t in times):
            raise ValueError(
                f"calibration table: row {i} needs block_size_tokens >= 1 and "
                f"positive finite times, got {row}"
            )


def shipped_table_path(gpu_name: str) -> Path | None:
    """The measured table shipped for ``gpu_name`` (``kvsim/data/calibration/<name>.csv|json``)."""
    folder = resources.files("kvsim.data").joinpath("calibration")
    for suffix in (".csv", ".json"):
        candidate = folder.joinpath(gpu_name + suffix)
        if candidate.is_file():
            return Path(str(candidate))
    return None


@cache
def _load_cached(path: str, _mtime_ns: int) -> CalibrationTable:
    """The table at ``path``, read again once the file changes (its modification time)."""
    return CalibrationTable.load(path)


def resolve_table(calibration: str | None, gpu_name: str) -> CalibrationTable:
    """The table the cost model uses (see ``CostSpec.calibration``).

    Args:
        calibration: a table path, ``"analytic"``, or ``None`` (shipped table for the GPU, else
            analytic).
        gpu_name: the simulated GPU's preset name, e.g. ``"a100-40gb"``.
    """
    if calibration == "analytic":
        return CalibrationTable.analytic()
    given = calibration is not None
    path = Path(calibration).resolve() if calibration is not None else shipped_table_path(gpu_name)
    if path is None:
        return CalibrationTable.analytic()
    if given and not path.is_file():  # (the OS error named no field)
        what = "a folder" if path.is_dir() else "no such file"
        raise ValueError(
            f"cost.calibration: {calibration!r} is {what}; expected a calibration table "
            "(CSV or JSON, kvsim calibrate writes one) or 'analytic'"
        )
    table = _load_cached(str(path), path.stat().st_mtime_ns)
    if given and table.is_measured and gpu_name not in table.meta["device_name"].lower():
        warn_once(
            logger,
            "cost.calibration: the table measured on %s is applied to the simulated %s: its "
            "paged/contiguous ratios stand for this GPU's",
            table.meta["device_name"],
            gpu_name,
        )
    return table


def nvidia_driver_version(device_index: int) -> str | None:
    """The NVIDIA driver version ``nvidia-smi`` reports for a device, or ``None`` without it."""
    import subprocess

    try:
        return subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=driver_version",
                "--format=csv,noheader",
                f"-i={device_index}",
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=20,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def metadata_now(**extra: Any) -> dict[str, str]:
    """UTC date stamp plus ``extra`` metadata, all as strings (for a fresh measured table)."""
    import datetime as dt

    meta = {"date_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
    meta.update({k: str(v) for k, v in extra.items()})
    return meta
