"""Swap preemption: a CPU block pool that holds the KV of preempted requests (vLLM ``swap_space``).

With ``SchedulerConfig.preemption_mode = "swap"`` a preempted request's KV moves to the CPU pool
instead of being dropped: its GPU slots are freed, ``cdiv(num_computed_tokens, B)`` CPU blocks of
``B = block_size_tokens`` are taken, and it keeps its token states. While anything is swapped out
the scheduler admits no new request (vLLM v0 schedules no prefill while its swapped queue is
non-empty); swapped requests come back in swap-out order (oldest first) as soon as the GPU can
hold them again, and decode in that same step. Each move copies whole blocks over PCIe; the cost
model prices the step's blocks (``StepCostModel.swap_s``). When the CPU pool is full the victim
falls back to recompute (vLLM would abort the request), and the fallback is counted.

    GPU pool --swap_out(req): free R slots, take cdiv(L, B) CPU blocks--> CPU pool
    CPU pool --swap_in(req):  allocate L + 1 slots on GPU, free CPU blocks--> running
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Any

from kvsim.allocators.base import Allocator
from kvsim.request import Request
from kvsim.units import GiB, cdiv

logger = logging.getLogger(__name__)


class SwapSpace:
    """CPU block pool and the queue of swapped-out requests.

    Invariant: ``num_free_cpu_blocks + sum(held CPU blocks) == num_cpu_blocks``.

    Args:
        num_cpu_blocks: blocks of ``block_size_tokens`` tokens the CPU pool holds.
        block_size_tokens: tokens per swapped block (the paged block size).
        bytes_per_token: KV bytes per token (all layers, K and V).
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
        self.cpu_blocks: dict[int, int] = {}
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
        """A pool of ``swap_space_gib`` GiB: ``floor(GiB bytes / (B * bytes_per_token))`` blocks."""
        num = int(swap_space_gib * GiB) // (block_size_tokens * bytes_per_token)
        return cls(
            num_cpu_blocks=num, block_size_tokens=block_size_tokens, bytes_per_token=bytes_per_token
        )

    def has_swapped(self) -> bool:
        return bool(self.swapped)

    def blocks_for(self, req: Request) -> int:
        """CPU blocks ``req``'s token states occupy: ``cdiv(num_computed_tokens, B)``."""
        return cdiv(req.num_computed_tokens, self.block_size_tokens)

    def swap_out(self, req: Request, allocator: Allocator) -> bool:
        """Move ``req``'s KV to the CPU pool; ``False`` (nothing changed) when it does not fit."""
        need = self.blocks_for(req)
        if need > self.num_free_cpu_blocks:
            self.num_fallbacks += 1
            logger.debug("CPU swap space full: request %d falls back to recompute", req.req_id)
            return False
        allocator.free(req.req_id)
        self.num_free_cpu_blocks -= need
        self.cpu_blocks[req.req_id] = need
        self.swapped.append(req)
        self.step_blocks += need
        self.blocks_out += need
        self.num_swap_outs += 1
        return True

    def swap_in(self, allocator: Allocator, room: int) -> list[Request]:
        """Bring swapped requests back, oldest first, while the GPU can hold them.

        Each returned request holds room for its token states plus the token it decodes now.

        Args:
            allocator: the GPU pool.
            room: how many more requests may run (``max_num_seqs - running``).

        Returns:
            The requests swapped in, in order.
        """
        back: list[Request] = []
        while self.swapped and len(back) < room:
            req = self.swapped[0]
            num_tokens = req.num_computed_tokens + 1
            if not allocator.can_allocate(req, num_tokens):
                break
            result = allocator.allocate(req, num_tokens)
            assert result is not None, (
                f"swap-in: can_allocate said yes, allocate refused {req.req_id}"
            )
            self.swapped.popleft()
            blocks = self.cpu_blocks.pop(req.req_id)
            self.num_free_cpu_blocks += blocks
            self.step_blocks += blocks
            self.blocks_in += blocks
            self.num_swap_ins += 1
            back.append(req)
        return back

    def take_step_blocks(self) -> int:
        """Blocks moved (out + in) since the last call; resets the counter."""
        blocks, self.step_blocks = self.step_blocks, 0
        return blocks

    def check_invariants(self) -> None:
        held = sum(self.cpu_blocks.values())
        assert held + self.num_free_cpu_blocks == self.num_cpu_blocks, (
            f"swap: held {held} + free {self.num_free_cpu_blocks} != {self.num_cpu_blocks}"
        )
        assert len(self.cpu_blocks) == len(self.swapped), "swap: queue and CPU tables disagree"

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
