"""vLLM's own CPU offloading manager replaying a list of operations (runs inside ``.venv-vllm``).

Run as ``.venv-vllm/bin/python tests/vllm/cpu_tier_driver.py < runs.json``: a JSON list of runs
in, a JSON list of results out. It imports vLLM only, never kvsim: ``test_vllm_cpu_tier.py``
builds the runs and replays them on kvsim's ``CpuTier`` too.

A run is ``{"num_blocks": n, "ops": [...]}``, each operation a list:

- ``["store", req, keys, first]``: request ``req`` offers ``keys``, its blocks ``first`` on
  (``CPUOffloadingManager.prepare_store``); the result is ``[keys_to_store, evicted_keys]``, or
  ``None`` when vLLM refuses the store;
- ``["stored", keys]``: the copy of ``keys`` ended (``complete_store``);
- ``["lookup", req, keys]``: ``lookup`` of each key in turn until the first ``MISS``; the
  result is ``[how many were held, whether any was HIT_PENDING]``;
- ``["load", req, keys, first]`` and ``["loaded", req, keys]``: ``prepare_load`` and
  ``complete_load``;
- ``["finish", req]``: ``on_request_finished``; the request's id is free again.

Keys are integers (``make_offload_key`` of their decimal text, group 0); block ``i`` of a
request ends at token ``16 * (i + 1)`` (``ReqContext.set_offload_key_position``). A run's result
is the list of operation results and, at its end, each held key's rank ``[key, rank,
-position]`` from the LRU policy (``LRUCachePolicy._ranks``).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

from vllm.v1.kv_offload.base import LookupResult, ReqContext, make_offload_key
from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager

BLOCK = 16


def replay(run: dict[str, Any]) -> dict[str, Any]:
    manager = CPUOffloadingManager(num_chunks=run["num_blocks"], cache_policy="lru")
    contexts: dict[int, ReqContext] = {}
    names: dict[bytes, int] = {}

    def key(k: int) -> Any:
        offload_key = make_offload_key(str(k).encode(), 0)
        names[bytes(offload_key)] = k
        return offload_key

    def context(req: int) -> ReqContext:
        if req not in contexts:
            contexts[req] = ReqContext(req_id=f"{req}-{len(names)}")
            manager.on_new_request(contexts[req])
        return contexts[req]

    def keyed(req: int, keys: list[int], first: int) -> list[Any]:
        ctx = context(req)
        out = []
        for i, k in enumerate(keys):
            offload_key = key(k)
            ctx.set_offload_key_position(offload_key, BLOCK * (first + i + 1))
            out.append(offload_key)
        return out

    def step(op: list[Any], results: list[Any]) -> None:
        kind = op[0]
        if kind == "store":
            out = manager.prepare_store(keyed(op[1], op[2], op[3]), context(op[1]))
            results.append(
                None
                if out is None
                else [
                    [names[bytes(k)] for k in out.keys_to_store],
                    [names[bytes(k)] for k in out.evicted_keys],
                ]
            )
        elif kind == "stored":
            manager.complete_store([key(k) for k in op[1]], ReqContext(req_id="copy"))
            results.append(None)
        elif kind == "lookup":
            found, pending = 0, False
            for k in op[2]:
                answer = manager.lookup(key(k), context(op[1]))
                if answer is LookupResult.MISS:
                    break
                pending |= answer is LookupResult.HIT_PENDING
                found += 1
            results.append([found, pending])
        elif kind == "load":
            manager.prepare_load(keyed(op[1], op[2], op[3]), context(op[1]))
            results.append(None)
        elif kind == "loaded":
            manager.complete_load([key(k) for k in op[2]], context(op[1]))
            results.append(None)
        elif kind == "finish":
            manager.on_request_finished(context(op[1]))
            del contexts[op[1]]
            results.append(None)
        else:
            raise ValueError(f"unknown operation {kind!r}")

    results: list[Any] = []
    try:
        for op in run["ops"]:
            step(op, results)
    except AssertionError as err:  # (an operation vLLM refuses ends the run: reported)
        results.append(["refused", str(err)])
    ranks = manager._policy._ranks  # (the policy's state: what the test compares)
    held = sorted([names[bytes(k)], r[0], r[1]] for k, r in ranks.items())
    return {"results": results, "ranks": held}


def main() -> None:
    runs = json.load(sys.stdin)
    json.dump([replay(run) for run in runs], sys.stdout)


if __name__ == "__main__":
    main()
