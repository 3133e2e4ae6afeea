"""``make test-vllm``: kvsim's CPU tier against vLLM's own CPU offloading manager, operation by
operation.

Random runs of requests storing, looking up, loading and finishing over time go through
kvsim's ``CpuTier`` here and through vLLM 0.34.0's ``CPUOffloadingManager`` with its LRU policy
(``cpu_tier_driver.py``, in ``.venv-vllm``); every store's copied and evicted keys, every
lookup's held run (hits and ``HIT_PENDING``s) and, at each run's end, every held block's rank
must be the same. vLLM has no clock: a store's copy ends where kvsim's link says it does, and
the driver is told then (``complete_store``). Skipped unless ``.venv-vllm`` exists.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from librt.vecs import vec
from mypy_extensions import i64

from kvsim.core.kv.offload import CpuTier, TierAccess, TransferLink
from tests.vllm.compare import vllm_python

pytestmark = pytest.mark.vllm

DRIVER = Path(__file__).with_name("cpu_tier_driver.py")
BLOCK = 16  # tokens a block: the driver's positions


def instance_keys(serial: int, num: int) -> list[int]:
    """A request's block keys: 0-5 blocks of a prefix shared by its family (``serial % 4``),
    then its own."""
    shared = (serial * 7) % 6
    family = [1_000 * (serial % 4) + i for i in range(shared)]
    return (family + [100_000 + 100 * serial + i for i in range(num)])[:num]


def random_run(rng: np.random.Generator, num_blocks: int, num_ops: int) -> dict[str, Any]:
    """Random operations for the driver, and kvsim's results for them (evicted keys sorted)."""
    tier, link = CpuTier(num_blocks=num_blocks), TransferLink(3.0)
    now_s, ops, results = 0.0, [], []
    serials: dict[int, int] = {}
    access: dict[int, TierAccess] = {}
    pending: list[tuple[float, list[int]]] = []  # stores whose copies run: (ready_s, keys)
    loads: list[tuple[int, list[int]]] = []
    held: set[int] = set()
    for _ in range(num_ops):
        now_s += float(rng.exponential(0.3))
        while pending and pending[0][0] <= now_s:
            ops.append(["stored", pending.pop(0)[1]])
            results.append(None)
        req = int(rng.integers(0, 8))
        if req not in serials:
            serials[req] = len(ops)  # (a new request: a new serial)
        keys = instance_keys(serials[req], int(rng.integers(1, 9)))
        op = int(rng.integers(0, 5))
        if op == 0:
            first = int(rng.integers(0, 2)) * min(2, len(keys) - 1)  # from block 0 or 2
            offer = keys[first:]
            ops.append(["store", req, offer, first])
            mine = access.setdefault(req, TierAccess())
            new = tier.prepare_store(vec[i64](offer), now_s, mine, first)
            if new is None:
                results.append(None)
                continue
            ready_s = link.submit(len(new), now_s)
            tier.complete_store(new, ready_s)
            if len(new):
                pending.append((ready_s, list(new)))
            evicted = sorted(k for k in held if k not in tier)
            held = (held - set(evicted)) | set(new)
            results.append([list(new), evicted])
        elif op == 1:
            ops.append(["lookup", req, keys])
            results.append(list(tier.held_run(vec[i64](keys), now_s)[:2]))
        elif op == 2:
            n, storing, _ = tier.held_run(vec[i64](keys), now_s)
            if n and not storing:
                tier.prepare_load(vec[i64](keys[:n]), access.setdefault(req, TierAccess()), 0)
                ops.append(["load", req, keys[:n], 0])
                results.append(None)
                loads.append((req, keys[:n]))
        elif op == 3 and loads:
            owner, done = loads.pop(0)
            tier.complete_load(vec[i64](done))
            ops.append(["loaded", owner, done])
            results.append(None)
        elif op == 4 and req in access and all(owner != req for owner, _ in loads):
            tier.finish(access.pop(req))
            del serials[req]
            ops.append(["finish", req])
            results.append(None)
    ranks = sorted([k, *tier.rank_of(k)] for k in held)  # type: ignore[misc]
    return {"num_blocks": num_blocks, "ops": ops, "results": results, "ranks": ranks}


def test_cpu_tier_matches_vllm_manager(rng: np.random.Generator) -> None:
    python = vllm_python()
    if python is None:
        pytest.skip(".venv-vllm is not built (scripts/vllm_venv.sh, or make test-vllm)")
    runs = [random_run(rng, num_blocks, 3_000) for num_blocks in (4, 12, 40) for _ in range(10)]
    sent = [{"num_blocks": r["num_blocks"], "ops": r["ops"]} for r in runs]
    done = subprocess.run(
        [str(python), str(DRIVER)], input=json.dumps(sent), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = json.loads(done.stdout)
    num_stores = num_evictions = num_refused = 0
    for n, (ours, vllm) in enumerate(zip(runs, theirs, strict=True)):
        for i, (op, mine) in enumerate(zip(ours["ops"], ours["results"], strict=True)):
            their = vllm["results"][i] if i < len(vllm["results"]) else "nothing"
            if op[0] == "store" and their is not None:
                their = [their[0], sorted(their[1])]
                num_evictions += len(their[1])
            num_stores += op[0] == "store"
            num_refused += op[0] == "store" and their is None
            assert mine == their, f"run {n}, operation {i} {op}: kvsim {mine}, vLLM {their}"
        # ranks: vLLM's positions are tokens, kvsim's blocks
        assert [[k, r, p * BLOCK] for k, r, p in ours["ranks"]] == vllm["ranks"], f"run {n}"
    # the runs exercise what they are meant to
    counts = (num_stores, num_evictions, num_refused)
    assert num_evictions > 1_000, counts
    assert num_refused > 10, counts
