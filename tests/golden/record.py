"""Record (or check) golden results: ``python tests/golden/record.py OUT [--check]``.

Writes one JSON file per case under ``OUT``: the run's summary and a SHA-1 per column of its
request and memory tables (and memory-map frames where taken). Cases: ``cases.VARIED`` and
``cases.MAPPED`` simulated here; ``--bench`` adds ``make bench``'s workloads (traces needed);
``--harvest DIR`` reads the points of sweeps and paper reproductions written under ``DIR``
(``kvsim reproduce NAME --out DIR``, ``kvsim sweep ... --out DIR``), keyed by experiment and
the point's swept values.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[2]))  # benchmarks/


def column_digests(frame: pd.DataFrame | None) -> dict[str, str] | None:
    """``column -> sha1(dtype, values)``; ``None`` for no frame."""
    if frame is None:
        return None
    out = {}
    for name in frame.columns:
        values = frame[name].to_numpy()
        if values.dtype == object:
            data = json.dumps([None if v is None else str(v) for v in values]).encode()
        else:
            data = np.ascontiguousarray(values).tobytes()
        out[str(name)] = f"{values.dtype}:{len(values)}:" + hashlib.sha1(data).hexdigest()
    return out


def plain(value: Any) -> Any:
    """JSON-safe summary values (NaN and inf as strings, numpy scalars as Python)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    return value


def record_results(results: Any) -> dict[str, Any]:
    return {
        "summary": plain(results.summary),
        "requests": column_digests(results.requests),
        "memory": column_digests(results.memory),
        "mapframes": column_digests(results.mapframes),
        "frames": column_digests(results.frames),
    }


def simulate_case(
    config: dict[str, Any], map_every_s: float | None = None, tables: Path | None = None
) -> dict[str, Any]:
    """Simulate one case and record it; with ``tables``, also write its tables there as
    ``requests.parquet`` and ``memory.parquet`` (for comparisons within a float tolerance)."""
    from kvsim import config_from_dict, simulate

    # the goldens were recorded with kvsim's cost defaults of then, now the 'lean' preset (the
    # fitted table became the default in issue 33); a case's own cost is kept
    config = {"cost": "lean", **config}
    results = simulate(config_from_dict(config), map_every_s=map_every_s)
    if tables is not None:
        tables.mkdir(parents=True, exist_ok=True)
        results.requests.to_parquet(tables / "requests.parquet")
        results.memory.to_parquet(tables / "memory.parquet")
    return record_results(results)


def harvest(root: Path) -> dict[str, dict[str, Any]]:
    """Every point under ``root`` (quick and full), by experiment and swept values."""
    out: dict[str, dict[str, Any]] = {}
    for point_json in sorted(root.rglob("points/*/point.json")):
        folder = point_json.parent
        experiment = folder.parent.parent.relative_to(root).as_posix()
        point = json.loads(point_json.read_text())
        config = json.loads((folder / "config.json").read_text())
        entry: dict[str, Any] = {"point": plain(point), "config": config}
        summary = folder / "summary.json"
        if summary.exists():
            entry["summary"] = json.loads(summary.read_text())
        for table in ("requests", "memory", "snapshot"):
            path = folder / f"{table}.parquet"
            entry[table] = column_digests(pd.read_parquet(path)) if path.exists() else None
        key = json.dumps(config, sort_keys=True)
        out.setdefault(experiment, {})[hashlib.sha1(key.encode()).hexdigest()[:16]] = entry
    for csv in sorted(root.rglob("*.csv")):
        rel = csv.relative_to(root).as_posix()
        out.setdefault("_tables", {})[rel] = csv.read_text()
    return out


def _tables(root: Path | None, name: str) -> Path | None:
    return None if root is None else root / name


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--bench", action="store_true")
    parser.add_argument("--varied", action="store_true")
    parser.add_argument("--harvest", type=Path)
    parser.add_argument("--tables", type=Path, help="also write each case's tables under here")
    parser.add_argument("--only", nargs="*", help="only these case names")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.varied:
        from cases import MAPPED, VARIED

        for name, config in VARIED.items():
            if args.only and name not in args.only:
                continue
            print(name, flush=True)
            data = simulate_case(config, None, _tables(args.tables, f"varied_{name}"))
            (args.out / f"varied_{name}.json").write_text(json.dumps(data, indent=1))
        for name, (config, every) in MAPPED.items():
            if args.only and name not in args.only:
                continue
            print(name, flush=True)
            data = simulate_case(config, every, _tables(args.tables, f"varied_{name}"))
            (args.out / f"varied_{name}.json").write_text(json.dumps(data, indent=1))
    if args.bench:
        from benchmarks.bench import GROUPS

        for group in GROUPS.values():
            for name, spec in group.items():
                print(name, flush=True)
                data = simulate_case(spec, None, _tables(args.tables, f"bench_{name}"))
                (args.out / f"bench_{name}.json").write_text(json.dumps(data, indent=1))
    if args.harvest:
        for experiment, points in harvest(args.harvest).items():
            name = experiment.replace("/", "__")
            (args.out / f"sweep_{name}.json").write_text(json.dumps(points, indent=1))


if __name__ == "__main__":
    main()
