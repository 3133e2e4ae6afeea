"""Run golden cases on the current code and compare: ``python tests/golden/compare.py [NAME ...]``.

Each case of ``tests/golden/data/`` (``varied_*`` and ``bench_*``, recorded by ``record.py`` on
the code before the one-engine rewrite) is simulated again; the summary must be identical and
each table column's digest equal. Prints one line per case and, for a difference, the fields
that differ (``--rtol`` accepts float summary values within a relative tolerance).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[2]))  # benchmarks/

from cases import MAPPED, VARIED
from record import simulate_case

DATA = Path(__file__).parent / "data"


def _config(name: str) -> tuple[dict[str, Any], float | None]:
    kind, _, rest = name.partition("_")
    if kind == "bench":
        from benchmarks.bench import GROUPS

        for group in GROUPS.values():
            if rest in group:
                return group[rest], None
        raise KeyError(name)
    if rest in MAPPED:
        return MAPPED[rest]
    return VARIED[rest], None


def _same(a: Any, b: Any, rtol: float) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) and math.isnan(b):
            return True
        return a == b or (rtol > 0 and math.isclose(a, b, rel_tol=rtol, abs_tol=1e-300))
    return a == b


# summary metrics added after the recording (issue 30: the answer in dollars); a run's other
# numbers decide them, so a record without them is compared on the rest
ADDED_SINCE_RECORDING = frozenset(
    {
        "usd_per_hour",
        "cost_usd",
        "usd_per_million_output_tokens",
        "slo_attainment",
        "goodput_requests_per_s",
        "goodput_requests_per_usd",
        "cost_source",  # issue 33: which cost table the run used
    }
)


def differences(old: dict[str, Any], new: dict[str, Any], rtol: float) -> list[str]:
    out = []
    added = ADDED_SINCE_RECORDING - set(old["summary"])
    for key in sorted(set(old["summary"]) | set(new["summary"]) - added):
        a, b = old["summary"].get(key, "<absent>"), new["summary"].get(key, "<absent>")
        if isinstance(a, str) and a in ("nan", "inf", "-inf"):
            a = float(a)
        if isinstance(b, str) and b in ("nan", "inf", "-inf"):
            b = float(b)
        if not _same(a, b, rtol):
            out.append(f"summary.{key}: {a!r} -> {b!r}")
    for table in ("requests", "memory", "mapframes", "frames"):
        a, b = old.get(table) or {}, new.get(table) or {}
        for column in sorted(set(a) | set(b)):
            if a.get(column) != b.get(column):
                out.append(f"{table}.{column}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("names", nargs="*")
    parser.add_argument("--rtol", type=float, default=0.0)
    parser.add_argument("--show", type=int, default=12)
    args = parser.parse_args()
    names = args.names or sorted(p.stem for p in DATA.glob("*.json") if p.stem[:6] != "sweep_")
    failed = 0
    for name in names:
        old = json.loads((DATA / f"{name}.json").read_text())
        config, every = _config(name)
        new = json.loads(json.dumps(simulate_case(config, every)))
        diff = differences(old, new, args.rtol)
        failed += bool(diff)
        print(f"{'DIFF' if diff else 'same'} {name}" + (f" ({len(diff)})" if diff else ""))
        for line in diff[: args.show]:
            print("    " + line)
    print(f"{len(names) - failed}/{len(names)} identical")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
