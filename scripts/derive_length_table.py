"""Derive kvsim/data/lengths/TRACE.csv, the compact joint length table shipped for a trace.

    python scripts/derive_length_table.py sharegpt_opt alpaca_opt

Reads the trace from KVSIM_DATA (see kvsim/workload/catalog.py) and writes the table with its
provenance (source file, its SHA-256, rows, bins, levels, date) in the header. Only quantiles
of integer lengths are shipped, not the rows.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import sys
from pathlib import Path

import numpy as np

from kvsim.workload.catalog import resolve_trace
from kvsim.workload.length_table import LengthTable
from kvsim.workload.traces import load_trace

BINS, LEVELS = 128, 32


def derive(trace: str, out_dir: Path) -> Path:
    path, _info = resolve_trace(trace)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    rows = load_trace(path, _info.fmt if _info is not None else None)
    prompt = np.asarray(rows.prompt_tokens)
    output = np.asarray(rows.output_tokens)
    table = LengthTable.from_pairs(prompt, output, BINS, LEVELS)
    out = out_dir / f"{trace}.csv"
    table.to_csv(
        out,
        [
            f"joint length table of {path.name} (kvsim trace {trace!r}), unfiltered rows",
            f"sha256 {digest}, {prompt.size} rows, prompt mean {prompt.mean():.2f}, "
            f"output mean {output.mean():.2f}",
            f"{BINS} equal-count bins by prompt length, quantiles at 0, 1/{LEVELS}, ..., 1",
            f"derived by scripts/derive_length_table.py on {datetime.date.today().isoformat()}",
            "the trace's licence and source: see the data README (KVSIM_DATA/README.md)",
        ],
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("traces", nargs="+")
    parser.add_argument("--out", type=Path, default=Path("kvsim/data/lengths"))
    args = parser.parse_args()
    for trace in args.traces:
        sys.stdout.write(f"{derive(trace, args.out)}\n")


if __name__ == "__main__":
    main()
