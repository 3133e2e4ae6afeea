"""Run one of ``make bench``'s runs in this process, once, for a profiler to watch.

    cd .venv-native && bin/python ../benchmarks/profile_one.py kv2026_hybrid_paged

Run it from ``.venv-native`` (the compiled build), as ``make bench`` does. Logs the run's
simulation CPU seconds (``run_benchmark``'s ``cpu_s``); docs/speed.md names the ``perf``
commands that read where they go. An unknown run name exits 2 with the list of runs.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent.parent))

from benchmarks.bench import GROUPS, run_benchmark

logger = logging.getLogger("kvsim.bench")


def main(argv: list[str] | None = None) -> None:
    runs = {name: spec for group in GROUPS.values() for name, spec in group.items()}
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", choices=sorted(runs), metavar="RUN", help="a make bench run")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    result = run_benchmark(args.run, runs[args.run])
    logger.info("%s: %.3f s CPU", args.run, result["cpu_s"])


if __name__ == "__main__":
    main()
