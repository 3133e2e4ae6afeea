"""Common machinery of contiguous (slab) allocators: slab sizing, ownership, vectorised hooks.

Subclasses decide placement (``_place``/``_release``); this class keeps ``req_id -> [(start,
size), ...]`` and answers the contract's queries from it. A slab's size is fixed at the first
allocation.

Sequence groups are served without sharing: each of a request's ``w = num_seqs`` sequences gets
its own slab of the reservation rule's size, placed one after another wherever each fits (all or
none: a group that does not fit changes nothing). ``held_slots`` is per sequence.
"""

from __future__ import annotations

from kvsim.core.kv.base import NO_HIT, Allocator, AllocResult, PrefixHit
from kvsim.core.kv.reservation import RESERVATION_RULES, reserved_slots
from kvsim.workload.request import Request


class SlabAllocator(Allocator):
    """One contiguous slab per request, sized by a reservation rule.

    Args:
        capacity_tokens: pool size in token slots.
        bytes_per_token: KV bytes per slot.
        reservation: one of ``RESERVATION_RULES``.
        max_model_len: serving cap on prompt + output tokens (Max rule, caps the others).
        full_context_tokens: model's trained context in tokens (``full_context`` rule).
    """

    def __init__(
        self,
        *,
        capacity_tokens: int,
        bytes_per_token: int = 1,
        reservation: str = "max",
        max_model_len: int = 2048,
        full_context_tokens: int | None = None,
    ) -> None:
        super().__init__(capacity_tokens=capacity_tokens, bytes_per_token=bytes_per_token)
        if reservation not in RESERVATION_RULES:
            raise ValueError(
                f"reservation: must be one of {list(RESERVATION_RULES)}, got {reservation!r}"
            )
        self.reservation = reservation
        self.max_model_len = max_model_len
        self.full_context_tokens = full_context_tokens or max_model_len
        self._slabs: dict[int, list[tuple[int, int]]] = {}  # one (start, size) per sequence
        self._held_total = 0  # sum of the live slabs' sizes (overhead_slots per event, O(1))
        self._init_free_space()

    # -- placement, by subclasses -----------------------------------------------------------
    def _init_free_space(self) -> None:
        """Set up an empty pool of ``capacity_tokens`` slots (a hook rather than an ``__init__``
        that forwards ``**kwargs``, which mypyc's compiled classes do not pass on)."""
        raise NotImplementedError

    def _place(self, size: int) -> tuple[int, int] | None:
        """Take ``size`` slots; return ``(start, size)`` or ``None`` if no hole fits."""
        raise NotImplementedError

    def _release(self, start: int, size: int) -> None:
        raise NotImplementedError

    def _fits_anywhere(self, size: int) -> bool:
        raise NotImplementedError

    # -- contract ---------------------------------------------------------------------------
    def slab_size(self, request: Request, num_tokens: int) -> int:
        """Slots of one of the request's slabs (one per sequence): its reservation, at least
        ``num_tokens``."""
        held = self._slabs.get(request.req_id)
        if held is not None:
            return held[0][1]
        rule_size = reserved_slots(
            request,
            self.reservation,
            max_model_len=self.max_model_len,
            full_context_tokens=self.full_context_tokens,
        )
        return max(rule_size, num_tokens)

    def held_slots(self, req_id: int) -> int:
        slabs = self._slabs.get(req_id)
        return 0 if slabs is None else slabs[0][1]

    def slab_of(self, req_id: int) -> tuple[int, int] | None:
        """The request's (first sequence's) ``(start, size)`` in slots, or ``None``."""
        slabs = self._slabs.get(req_id)
        return None if slabs is None else slabs[0]

    def slabs_of(self, req_id: int) -> list[tuple[int, int]]:
        """Every ``(start, size)`` slab of the request, one per sequence (empty if none)."""
        return list(self._slabs.get(req_id, ()))

    def held_slabs(self) -> list[tuple[int, int]]:
        """All live slabs, ``(start, size)`` in slots."""
        return [slab for slabs in self._slabs.values() for slab in slabs]

    def num_slots_needed(self, request: Request, num_tokens: int, hit: PrefixHit = NO_HIT) -> int:
        if request.req_id in self._slabs:
            return 0
        return request.num_seqs * self.slab_size(request, num_tokens)

    def can_allocate(self, request: Request, num_tokens: int, hit: PrefixHit = NO_HIT) -> bool:
        slabs = self._slabs.get(request.req_id)
        if slabs is not None:
            return num_tokens <= slabs[0][1]
        size = self.slab_size(request, num_tokens)
        if request.num_seqs == 1:
            return self._fits_anywhere(size)
        placed = self._place_all(size, request.num_seqs)  # try, then undo: state unchanged
        if placed is None:
            return False
        for slab in reversed(placed):
            self._release(*slab)
        return True

    def _place_all(self, size: int, count: int) -> list[tuple[int, int]] | None:
        """Place ``count`` slabs of ``size`` slots, or none of them (``None``)."""
        placed: list[tuple[int, int]] = []
        for _ in range(count):
            slab = self._place(size)
            if slab is None:
                for done in reversed(placed):  # undo in reverse: the free map is as before
                    self._release(*done)
                return None
            placed.append(slab)
        return placed

    def allocate(
        self,
        request: Request,
        num_tokens: int,
        hit: PrefixHit = NO_HIT,
        cache_tokens: int | None = None,
    ) -> AllocResult | None:
        slabs = self._slabs.get(request.req_id)
        if slabs is not None:  # a slab never grows in place
            return self._nothing_new if num_tokens <= slabs[0][1] else None
        placed = self._place_all(self.slab_size(request, num_tokens), request.num_seqs)
        if placed is None:
            return None
        self._slabs[request.req_id] = placed
        if request.num_seqs > 1:
            self._widths[request.req_id] = request.num_seqs
        size = sum(size for _, size in placed)
        self._held_total += size
        return self._result(size, len(placed))

    def free(self, req_id: int, computed_tokens: int | None = None) -> None:
        slabs = self._slabs.pop(req_id, None)
        if slabs is None:
            raise KeyError(f"free(): unknown req_id {req_id}")
        self._widths.pop(req_id, None)
        for slab in reversed(slabs):
            self._held_total -= slab[1]
            self._release(*slab)

    @property
    def overhead_slots(self) -> int:
        """``stats().overhead_slots`` from the running total of held slots (the recorder reads
        it at every event; ``stats`` sums every live slab)."""
        return self.capacity_tokens - self._held_total - self.num_free_tokens

    def check_invariants(self) -> None:
        super().check_invariants()
        held = sum(size for _, size in self.held_slabs())
        assert held == self._held_total, f"{self.name}: slabs {held} != total {self._held_total}"

    span_layout = "slabs"
