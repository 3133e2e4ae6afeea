"""kvsim's ``vllm-v1`` profile diffed step by step against vLLM's own v1 Scheduler.

``python -m tests.vllm.compare [-n 1000]`` (``make test-vllm`` runs ``test_vllm_diff.py``, which
calls it) generates seeded workloads (``workloads.py``), runs them through vLLM in ``.venv-vllm``
(``vllm_driver.py``, a subprocess) and, at the same time, through kvsim here (``kvsim_steps.py``),
with the decode cohort's members taking their blocks one by one (``ids``: block ids readable at
any time, as with a memory map) and in bulk (``pooled``: the engine's runs), and compares the
per-step records; it prints the match counts and, for each mismatch, the first differing step with
both records. Exit status 1 on any mismatch.

A step's record (both sides write the same JSON):

- ``step``: the step index (an idle engine skips to the next arrival; requests arriving at
  step ``i`` are added before step ``i`` is scheduled);
- ``scheduled``: ``[req_id, num_scheduled_tokens]`` in scheduling order (running first);
- ``preempted``, ``finished``: sorted request ids preempted while scheduling the step, and
  finished by its output (they free their blocks then);
- ``hits``: ``{req_id: tokens}`` prefix-cache hit of each newly scheduled request (admitted
  from the waiting queue, first time or after a preemption), 0 for a miss;
- ``free_blocks``: free blocks (cached ones included) right after scheduling the step.

A workload matches when both sides' records are equal and show every request finished (two runs
stuck alike at ``max_steps`` are a mismatch too).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.vllm.kvsim_steps import run_workload
from tests.vllm.workloads import FAMILIES, workload

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-vllm"
DRIVER = Path(__file__).with_name("vllm_driver.py")


def vllm_python(venv: Path = VENV) -> Path | None:
    """The interpreter of the vLLM virtual environment, or ``None`` if it is not built."""
    python = venv / "bin" / "python"
    return python if python.exists() else None


def run_vllm(
    workloads: list[dict[str, Any]], python: Path, meanwhile: Callable[[], Any]
) -> tuple[list[dict[str, Any]], Any]:
    """vLLM's results for ``workloads`` (in order), and what ``meanwhile()`` returned: it runs
    here while the driver runs in its own process."""
    with tempfile.TemporaryDirectory(prefix="kvsim-vllm-diff-") as tmp:
        paths = [Path(tmp) / name for name in ("workloads.jsonl", "steps.jsonl", "stderr.txt")]
        paths[0].write_text("".join(json.dumps(w, separators=(",", ":")) + "\n" for w in workloads))
        with paths[0].open("rb") as fin, paths[1].open("wb") as fout, paths[2].open("wb") as ferr:
            proc = subprocess.Popen([str(python), str(DRIVER)], stdin=fin, stdout=fout, stderr=ferr)
            try:
                ours = meanwhile()
            finally:
                proc.wait()
        if proc.returncode != 0:
            log = paths[2].read_text()[-4000:]
            raise RuntimeError(f"vllm_driver failed (exit {proc.returncode}):\n{log}")
        lines = paths[1].read_text().splitlines()
    return [json.loads(line) for line in lines if line], ours


def first_difference(
    ours: list[dict[str, Any]], theirs: list[dict[str, Any]]
) -> tuple[int, dict[str, Any] | None, dict[str, Any] | None] | None:
    """``(index, kvsim's record, vLLM's record)`` of the first step that differs, or ``None``
    (a run that ends earlier has ``None`` there)."""
    for i in range(max(len(ours), len(theirs))):
        a = ours[i] if i < len(ours) else None
        b = theirs[i] if i < len(theirs) else None
        if a != b:
            return i, a, b
    return None


PATHS = ("ids", "pooled")  # how the cohort's members take blocks: one by one, or in bulk


def compare(
    num: int,
    start: int = 0,
    python: Path | None = None,
    paths: tuple[str, ...] = PATHS,
    family: str = "base",
) -> dict[str, list[dict[str, Any]]]:
    """Run workloads ``start .. start + num - 1`` of ``family`` (``workloads.FAMILIES``)
    through vLLM once and through each of kvsim's ``paths``; per path, the mismatches, each
    with its workload and first differing step."""
    python = python or vllm_python()
    if python is None:
        raise FileNotFoundError(f"{VENV} is missing: run scripts/vllm_venv.sh")
    workloads = [workload(family, seed) for seed in range(start, start + num)]

    def kvsim_runs() -> dict[str, list[dict[str, Any]]]:
        return {path: [run_workload(w, path == "pooled") for w in workloads] for path in paths}

    theirs, ours = run_vllm(workloads, python, kvsim_runs)
    return {path: mismatches(workloads, ours[path], theirs) for path in paths}


def mismatches(
    workloads: list[dict[str, Any]], ours: list[dict[str, Any]], theirs: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The workloads whose records differ, or that do not finish every request."""
    out = []
    for work, a, b in zip(workloads, ours, theirs, strict=True):
        diff = first_difference(a["steps"], b["steps"])
        if diff is not None:
            index, rec_a, rec_b = diff
            out.append({"workload": work, "index": index, "kvsim": rec_a, "vllm": rec_b})
        elif num_finished(b["steps"]) != len(work["requests"]):  # stuck alike is no match
            last = b["steps"][-1] if b["steps"] else None
            out.append({"workload": work, "index": len(b["steps"]), "kvsim": last, "vllm": last})
    return out


def num_finished(steps: list[dict[str, Any]]) -> int:
    """Requests a run's records show finished."""
    return sum(len(step["finished"]) for step in steps)


def describe(mismatch: dict[str, Any]) -> str:
    """A mismatch for a person: the workload's knobs and requests, then both records."""
    work = mismatch["workload"]
    reqs = "\n".join(
        f"    {r['id']}: arrives {r['arrival_step']}, prompt {r['segments']}, "
        f"output {r['output_tokens']}"
        for r in work["requests"]
    )
    return (
        f"{work['name']}: first difference at record {mismatch['index']}\n"
        f"  config {json.dumps(work['config'])}\n  requests:\n{reqs}\n"
        f"  kvsim {json.dumps(mismatch['kvsim'])}\n  vLLM  {json.dumps(mismatch['vllm'])}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--num", type=int, default=1000, help="workloads (default 1000)")
    parser.add_argument("--start", type=int, default=0, help="first workload seed")
    parser.add_argument("--show", type=int, default=3, help="mismatches printed in full")
    parser.add_argument("--json", type=Path, help="write every mismatch to this file")
    parser.add_argument("--path", choices=PATHS, help="only this kvsim path (default: both)")
    parser.add_argument("--family", choices=FAMILIES, default="base", help="workload family")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    paths = (args.path,) if args.path else PATHS
    found = compare(args.num, args.start, paths=paths, family=args.family)
    for path, missed in found.items():
        for mismatch in missed[: args.show]:
            print(f"[{path}] {describe(mismatch)}")
    if args.json:
        args.json.write_text(json.dumps(found))
    print(summary(found, args.num, args.family) + f" ({time.perf_counter() - t0:.0f} s)")
    return 1 if any(found.values()) else 0


def summary(found: dict[str, list[dict[str, Any]]], num: int, family: str = "base") -> str:
    """The match counts, one per kvsim path."""
    counts = ", ".join(f"{path} {num - len(missed)}/{num}" for path, missed in found.items())
    return f"vllm-diff [{family}]: workloads step-identical to vLLM's Scheduler: {counts}"


if __name__ == "__main__":
    sys.exit(main())
