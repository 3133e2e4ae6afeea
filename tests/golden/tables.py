"""Compare a case's tables with the ones recorded beside the golden files, within a tolerance:
``python tests/golden/tables.py TABLES_DIR NAME [...]`` (``record.py --tables``)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).parent))

from compare import _config


def main() -> None:
    from kvsim import config_from_dict, simulate

    root = Path(sys.argv[1])
    for name in sys.argv[2:]:
        config, every = _config(name)
        results = simulate(config_from_dict(config), map_every_s=every)
        for table in ("requests", "memory"):
            old = pd.read_parquet(root / name / f"{table}.parquet")
            new = getattr(results, table)
            if len(old) != len(new):
                print(f"{name}.{table}: {len(old)} rows -> {len(new)}")
                continue
            for column in old.columns:
                a, b = old[column].to_numpy(), new[column].to_numpy()
                if a.dtype.kind in "fi" and b.dtype.kind in "fi":
                    a, b = a.astype(float), b.astype(float)
                    same = (a == b) | (np.isnan(a) & np.isnan(b))
                    if same.all():
                        continue
                    rel = np.abs(a - b) / np.maximum(np.abs(a), 1e-300)
                    rel = rel[~same]
                    print(
                        f"{name}.{table}.{column}: {(~same).sum()} differ, max rel {rel.max():.2e}"
                    )
                elif not (old[column].astype(str) == new[column].astype(str)).all():
                    print(f"{name}.{table}.{column}: differs")


if __name__ == "__main__":
    main()
