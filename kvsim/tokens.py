"""Synthetic token identities and the chained block keys of automatic prefix caching.

kvsim never sees real token ids. A request's tokens are described as runs ("segments")
``(segment_id, num_tokens)``: token ``t`` of segment ``s`` is the synthetic token ``(s, t)``, so two
streams have equal tokens exactly where their segment runs agree. A full block of ``B`` tokens is
keyed, as in vLLM's ``hash_block_tokens``, by its parent block's key and its own tokens (plus an
optional salt at the root that isolates tenants). Keys are *interned* exact tuples, not truncated
hashes, so equal prefixes always get equal keys and different prefixes never collide.

Mooncake traces name 512-token prefix blocks by ``hash_ids`` (an id stands for the whole prefix up
to and including its block). ``segments_for`` maps id ``h`` to the segment ``("mc", h)`` of 512
tokens (the prompt's last one shortened to what is left), so any simulator block size sees equal
tokens wherever the trace has equal ids, and the key chain stays right.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from kvsim.request import Request
from kvsim.workload.traces import MOONCAKE_BLOCK_SIZE_TOKENS

Segment = tuple[Hashable, int]


def prompt_segments(request: Request) -> tuple[Segment, ...]:
    """The prompt's token runs (see the module docstring); they cover ``prompt_tokens`` exactly."""
    prompt = request.prompt_tokens
    if request.token_segments is not None:
        segs = request.token_segments
    elif request.prefix_hash_ids:
        size = MOONCAKE_BLOCK_SIZE_TOKENS
        segs = tuple((("mc", h), size) for h in request.prefix_hash_ids)
    else:
        segs = ((("prompt", request.req_id), prompt),)
    return _fit(segs, prompt, request.req_id)


def _fit(segs: Sequence[Segment], num_tokens: int, req_id: int) -> tuple[Segment, ...]:
    """Cut ``segs`` to ``num_tokens`` tokens, padding with a run unique to ``req_id``."""
    out: list[Segment] = []
    left = num_tokens
    for seg_id, length in segs:
        if left <= 0:
            break
        take = min(length, left)
        out.append((seg_id, take))
        left -= take
    if left > 0:
        out.append((("pad", req_id), left))
    return tuple(out)


def stream_segments(request: Request, seq_index: int = 0) -> tuple[Segment, ...]:
    """Prompt runs, then the output of sequence ``seq_index`` (unique per request and sequence)."""
    gen_id: Hashable = (
        ("gen", request.req_id) if seq_index == 0 else ("gen", request.req_id, seq_index)
    )
    return (*prompt_segments(request), (gen_id, request.output_tokens))


class KeyChain:
    """Interns chained block keys: ``key(b) = id((key(b - 1), tokens of block b))``.

    One instance per allocator. ``block_keys`` returns int keys; equal ints mean equal prefixes.
    """

    def __init__(self) -> None:
        self._ids: dict[Hashable, int] = {}

    def _intern(self, item: Hashable) -> int:
        key = self._ids.get(item)
        if key is None:
            key = self._ids[item] = len(self._ids)
        return key

    def block_keys(
        self,
        segments: Sequence[Segment],
        num_blocks: int,
        block_size_tokens: int,
        salt: str | None = None,
    ) -> list[int]:
        """Keys of the first ``num_blocks`` full blocks of the stream ``segments``.

        Args:
            segments: the token runs; must cover ``num_blocks * block_size_tokens`` tokens.
            num_blocks: full blocks to key.
            block_size_tokens: tokens per block.
            salt: tenant salt mixed into the root (``None``: no salt).
        """
        keys: list[int] = []
        parent = self._intern(("root", salt))
        seg_i, offset = 0, 0  # position in the runs
        for _ in range(num_blocks):
            need = block_size_tokens
            pieces: list[tuple[Hashable, int, int]] = []
            while need > 0:
                seg_id, length = segments[seg_i]
                take = min(need, length - offset)
                pieces.append((seg_id, offset, offset + take))
                offset += take
                need -= take
                if offset == length:
                    seg_i, offset = seg_i + 1, 0
            parent = self._intern((parent, tuple(pieces)))
            keys.append(parent)
        return keys
