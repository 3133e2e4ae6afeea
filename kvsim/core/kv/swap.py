"""Swap preemption (vLLM v0): a CPU block pool that holds the KV of swapped-out requests.

Under the ``vllm-v0`` profile a preempted request's KV moves to the CPU pool instead of being
dropped when ``preemption_mode = "swap"``, or by default when the request is a sequence group
(v0 cannot recompute a multi-sequence group). Its GPU blocks are freed, as many CPU blocks as it
held distinct GPU blocks are taken (a block shared by several of its sequences moves once), and it
keeps its token states. While anything is swapped out the scheduler admits no new request (v0
schedules no prefill while its swapped queue is non-empty); swapped requests come back in
swap-out order (oldest first) when the GPU can hold their blocks plus one per sequence above the
watermark (v0 ``can_swap_in``), rebuilt with the same sharing, and decode in that same step. Each
move copies whole blocks over PCIe; the cost model prices the step's blocks
(``StepCostModel.swap_s``). When the CPU pool is full the victim falls back to recompute (vLLM
would abort the engine), and the fallback is counted.

    GPU pool --swap_out(req): free its blocks, take as many CPU blocks--> CPU pool
    CPU pool --swap_in(req):  take as many GPU blocks, rebuild tables, free CPU blocks--> running
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Any

from kvsim.config.serving import swap_blocks
from kvsim.core.kv.paged import PagedAllocator, SwappedKV
from kvsim.workload.request import Request

logger = logging.getLogger(__name__)


class SwapSpace:
    """CPU block pool and the queue of swapped-out requests.

    Invariant: ``num_free_cpu_blocks + sum(held CPU blocks) == num_cpu_blocks``.

    Args:
        num_cpu_blocks: blocks of ``block_size_tokens`` tokens the CPU pool holds.
        block_size_tokens: tokens per swapped block (the paged block size).
        bytes_per_token: KV bytes per token on one GPU (all its layers, K and V).
    """

    def __init__(
        self, *, num_cpu_blocks: int, block_size_tokens: int, bytes_per_token: int
    ) -> None:
        if num_cpu_blocks < 0 or block_size_tokens < 1:
            raise ValueError(
                f"SwapSpace: need num_cpu_blocks >= 0 and block_size_tokens >= 1, "
                f"got {num_cpu_blocks} and {block_size_tokens}"
            )
        self.num_cpu_blocks = num_cpu_blocks
        self.block_size_tokens = block_size_tokens
        self.bytes_per_block = block_size_tokens * bytes_per_token
        self.num_free_cpu_blocks = num_cpu_blocks
        self.held: dict[int, SwappedKV] = {}
        self.swapped: deque[Request] = deque()
        self.step_blocks = 0  # blocks moved since the last take_step_blocks()
        self.num_swap_outs = 0
        self.num_swap_ins = 0
        self.num_fallbacks = 0
        self.blocks_out = 0
        self.blocks_in = 0

    @classmethod
    def from_gib(
        cls, swap_space_gib: float, *, block_size_tokens: int, bytes_per_token: int
    ) -> SwapSpace:
        """A pool of ``swap_space_gib`` GiB (``config.serving.swap_blocks`` blocks)."""
        num = swap_blocks(swap_space_gib, block_size_tokens, bytes_per_token)
        return cls(
            num_cpu_blocks=num, block_size_tokens=block_size_tokens, bytes_per_token=bytes_per_token
        )

    def has_swapped(self) -> bool:
        return bool(self.swapped)

    def swap_out(self, req: Request, allocator: PagedAllocator) -> bool:
        """Move ``req``'s KV to the CPU pool; ``False`` (nothing changed) when it does not fit."""
        need = allocator.num_distinct_blocks(req.req_id)
        if need > self.num_free_cpu_blocks:
            self.num_fallbacks += 1
            logger.debug("CPU swap space full: request %d falls back to recompute", req.req_id)
            return False
        swapped = allocator.swap_out(req.req_id)
        self.num_free_cpu_blocks -= swapped.num_blocks
        self.held[req.req_id] = swapped
        self.swapped.append(req)
        self.step_blocks += swapped.num_blocks
        self.blocks_out += swapped.num_blocks
        self.num_swap_outs += 1
        return True

    def swap_in_next(self, allocator: PagedAllocator, room_seqs: int) -> Request | None:
        """Bring the oldest swapped request back if the GPU can hold it, else ``None``.

        Args:
            allocator: the GPU pool.
            room_seqs: how many more sequences may run (``max_num_seqs`` - running sequences).

        Returns:
            The request swapped in (holding its blocks as before swap-out), or ``None``.
        """
        if not self.swapped:
            return None
        req = self.swapped[0]
        swapped = self.held[req.req_id]
        if req.num_seqs > room_seqs or not allocator.can_swap_in(req, swapped):
            return None
        allocator.swap_in(req, swapped)
        self.swapped.popleft()
        del self.held[req.req_id]
        self.num_free_cpu_blocks += swapped.num_blocks
        self.step_blocks += swapped.num_blocks
        self.blocks_in += swapped.num_blocks
        self.num_swap_ins += 1
        return req

    def take_step_blocks(self) -> int:
        """Blocks moved (out + in) since the last call; resets the counter."""
        blocks, self.step_blocks = self.step_blocks, 0
        return blocks

    def check_invariants(self) -> None:
        held = sum(s.num_blocks for s in self.held.values())
        assert held + self.num_free_cpu_blocks == self.num_cpu_blocks, (
            f"swap: held {held} + free {self.num_free_cpu_blocks} != {self.num_cpu_blocks}"
        )
        assert len(self.held) == len(self.swapped), "swap: queue and CPU tables disagree"

    def summary(self, swap_time_s: float) -> dict[str, Any]:
        """Swap counters for the run summary (bytes, seconds)."""
        return {
            "num_swap_outs": self.num_swap_outs,
            "num_swap_ins": self.num_swap_ins,
            "num_swap_fallbacks": self.num_fallbacks,
            "swap_out_bytes": self.blocks_out * self.bytes_per_block,
            "swap_in_bytes": self.blocks_in * self.bytes_per_block,
            "swap_time_s": swap_time_s,
        }
