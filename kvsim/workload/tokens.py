"""Synthetic token identities and the chained block keys of automatic prefix caching.

kvsim never sees real token ids. A request's tokens are described as runs ("segments")
``(segment_id, num_tokens)``: token ``t`` of segment ``s`` is the synthetic token ``(s, t)``, so two
streams have equal tokens exactly where their segment runs agree. A full block of ``B`` tokens is
keyed, as in vLLM's ``hash_block_tokens``, by its whole prefix through a chain of keys (plus an
optional salt at the root that isolates tenants); see ``KeyChain`` and ``StreamKeys``.

Mooncake traces name 512-token prefix blocks by ``hash_ids`` (an id stands for the whole prefix up
to and including its block). ``segments_for`` maps id ``h`` to the segment ``("mc", h)`` of 512
tokens (the prompt's last one shortened to what is left), so any simulator block size sees equal
tokens wherever the trace has equal ids, and the key chain stays right.
"""

from __future__ import annotations

import operator
from array import array
from collections.abc import Hashable, Sequence
from numbers import Integral
from typing import Final, SupportsIndex, TypeGuard

import numpy as np
from librt.vecs import append, vec
from mypy_extensions import i64

from kvsim.workload.request import Request

MOONCAKE_BLOCK_SIZE_TOKENS = 512  # tokens a Mooncake trace's hash id stands for (its README)

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
    return fit_segments(segs, prompt, request.req_id)


def fit_segments(segs: Sequence[Segment], num_tokens: int, req_id: int) -> tuple[Segment, ...]:
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


def output_owner(segment_id: Hashable) -> int | None:
    """The ``req_id`` whose first sequence's output the segment ``segment_id`` is (a multi-turn
    history repeats it in a later prompt: ``stream_segments``' ``("gen", req_id)``), or
    ``None``."""
    if isinstance(segment_id, tuple) and len(segment_id) == 2 and segment_id[0] == "gen":
        return int(segment_id[1])
    return None


def stream_segments(request: Request, seq_index: int = 0) -> tuple[Segment, ...]:
    """Prompt runs, then the output of sequence ``seq_index`` (unique per request and sequence)."""
    gen_id: Hashable = (
        ("gen", request.req_id) if seq_index == 0 else ("gen", request.req_id, seq_index)
    )
    return (*prompt_segments(request), (gen_id, request.output_tokens))


class KeyChain:
    """Chained block keys: a block's key names its prefix through a chain of keys, as vLLM's
    ``hash_block_tokens`` chains a block's hash over its parent's (``StreamKeys``: the chain
    runs through anchors, so that a run's blocks cost one tuple hash).

    Segment ids and salts become ints (``intern``), so a key is the hash of a tuple of ints:
    Python's tuple hash of ints is the same in every process (string hashes are randomised, int
    hashes are not), so runs are reproducible. Keys are 64-bit hashes, as vLLM's default
    builtin-hash prefix caching uses; two different prefixes collide with probability about
    ``n**2 / 2**64`` for ``n`` distinct blocks (5e-6 at ten million blocks).

    One instance per allocator. ``block_keys`` returns int keys; equal ints mean equal prefixes.
    """

    def __init__(self) -> None:
        self._shapes: dict[Hashable, int] = {}

    def intern(self, item: Hashable) -> int:
        """An int standing for ``item`` (a segment id or a salt): equal items, equal ints.

        ``item`` is split into its shape (its tuples and non-int atoms, ints left out) and its
        ints; shapes are numbered in first-seen order and the int is the hash of ``(shape
        number, *ints)``. Only shapes are kept (``("user", _)``, ``("gen", _)``, a salt: a
        handful), not one entry per request's segment, which a million-request run would hold
        to its end. Different items collide as keys do (64-bit hashes); Python hashes -1 as -2,
        so ids differing only there would too (kvsim's ids are never negative).
        """
        if isinstance(item, tuple) and len(item) == 2:  # ("mc", 7), ("gen", 3): most ids
            tag, value = item
            if type(tag) is str and type(value) is int:  # the general path's shape and ints
                shape: Hashable = (tag, _INT)
                number = self._shapes.get(shape)
                if number is None:
                    number = self._shapes[shape] = len(self._shapes)
                return hash((number, value))
        ints: list[int] = []
        shape = _shape(item, ints)
        number = self._shapes.get(shape)
        if number is None:
            number = self._shapes[shape] = len(self._shapes)
        return hash((number, *ints))

    def root(self, salt: str | None) -> int:
        """The key the first block chains from (tenants' salts give different roots)."""
        return hash((-1, self.intern(("salt", salt))))

    def block_keys(
        self,
        segments: Sequence[Segment],
        num_blocks: int,
        block_size_tokens: int,
        salt: str | None = None,
        lookahead_tokens: int = 0,
    ) -> list[int]:
        """Keys of the first ``num_blocks`` full blocks of the stream ``segments``.

        Args:
            segments: the token runs; must cover ``num_blocks * block_size_tokens`` tokens (and
                ``lookahead_tokens`` more).
            num_blocks: full blocks to key.
            block_size_tokens: tokens per block.
            salt: tenant salt mixed into the root (``None``: no salt).
            lookahead_tokens: tokens past each block its key covers (``StreamKeys``).
        """
        cursor = StreamKeys(self, segments, block_size_tokens, salt, lookahead_tokens)
        return cursor.keys(num_blocks)


_INT = object()  # where an int sat in a shape
_LOOKAHEAD_RUN = ("kvsim: the run hash-lookahead keys start with", 0)  # (no trace names it)


def _shape(item: Hashable, ints: list[int]) -> Hashable:
    """``item`` with each int replaced by ``_INT`` (appended to ``ints``), inside tuples too."""
    if isinstance(item, tuple):
        return tuple(_shape(x, ints) for x in item)
    if _is_integer(item):  # bools and numpy ints equal Python's
        ints.append(operator.index(item))
        return _INT
    return item


def _is_integer(item: object) -> TypeGuard[SupportsIndex]:
    """Whether ``item`` is a Python, bool or numpy int. A function, not an ``isinstance`` in
    ``_shape``: compiled (``kvsim.native``), that would narrow ``item`` to a Python int and
    refuse a numpy one."""
    if isinstance(item, int):
        return True
    return not isinstance(item, str) and isinstance(item, Integral)  # (a str: no ABC check)


_RUN_STEP: Final = 0x9E3779B1  # odd, < 2**32: an end offset (< 2**31 tokens) times it fits 63 bits


class StreamKeys:
    """The block keys of one token stream, computed incrementally and kept.

    A key names its block's whole prefix: equal keys, equal tokens up to the block's end (to a
    64-bit hash's collision odds, ``KeyChain``). Keys chain through *anchors*: the root, each
    block that crosses from one token run into the next, and each block that ends a run the
    stream goes on past. An anchor's key hashes the previous anchor and the token ranges from
    that anchor's end to its own end. A block inside one run (31 of the 32 blocks of each
    Mooncake id at 16 tokens a block) is ``hash((anchor, run, anchor's offset in it)) ^ (end
    offset * _RUN_STEP)``: one tuple hash a run rather than one a block, and no Python int
    object per key (the keys are a ``vec[i64]``). A run that this stream cuts at a block
    boundary keys its blocks as a longer copy of the run does (the cut is no anchor unless the
    stream goes on into another run).

    With ``lookahead_tokens = L`` (vLLM's ``num_hash_lookahead_tokens``: an EAGLE drafter's KV
    at a block's last position reads the next token, ``vllm/v1/core/kv_cache_utils.py``,
    ``get_request_block_hasher``), block ``i``'s key names the tokens up to ``(i + 1) * B + L``
    instead: the stream is keyed as if ``s * B - L`` tokens of one fixed run came first, with
    ``s = cdiv(L, B)``, and block ``i`` is that stream's block ``i + s``; the stream must hold
    those ``L`` tokens past the block (vLLM hashes a block only once they exist).

    Args:
        chain: the allocator's ``KeyChain`` (interns segment ids).
        segments: the stream's token runs (``stream_segments``); a run is under 2**31 tokens.
        block_size_tokens: tokens per block.
        salt: tenant salt (``None``: none).
        lookahead_tokens: tokens past a block that its key covers (``L``, 0: none).
    """

    __slots__ = (
        "_anchor",
        "_anchor_offset",
        "_base",
        "_base_run",
        "_block",
        "_chain",
        "_keys",
        "_offset",
        "_seg_i",
        "_segments",
        "_shift",
    )

    def __init__(
        self,
        chain: KeyChain,
        segments: Sequence[Segment],
        block_size_tokens: int,
        salt: str | None = None,
        lookahead_tokens: int = 0,
    ) -> None:
        self._chain = chain
        self._segments = [(chain.intern(seg_id), length) for seg_id, length in segments]
        # blocks of the fixed leading run the keys skip (s = cdiv(L, B)), their run first
        self._shift: i64 = -(lookahead_tokens // -block_size_tokens)
        if lookahead_tokens:
            lead = self._shift * block_size_tokens - lookahead_tokens
            self._segments.insert(0, (chain.intern(_LOOKAHEAD_RUN), lead))
        self._block = block_size_tokens
        self._seg_i = 0
        self._offset = 0
        root = chain.root(salt)
        # entry 0 is the root; block b is entry b + 1 (packed: no int object per key)
        self._keys: vec[i64] = vec[i64]([root])
        self._anchor = root
        self._anchor_offset = 0  # where the anchor's tokens end in run _seg_i
        # the hash of (anchor, run, anchor offset) keying the blocks inside run _base_run (-1:
        # none yet): a stream extended a block at a time hashes it once a run, not once a block
        self._base: i64 = 0
        self._base_run: i64 = -1

    def keys(self, num_blocks: int) -> list[int]:
        """Keys of the first ``num_blocks`` full blocks (a new list).

        Raises:
            ValueError: the stream holds fewer than ``num_blocks`` full blocks.
        """
        s = self._shift
        if num_blocks > 0:  # (none asked: not even the skipped lead blocks need the stream)
            self._extend(num_blocks + s)
        return list(self._keys[s + 1 : num_blocks + s + 1])

    def keys_between(self, start: int, stop: int) -> vec[i64]:
        """Keys of full blocks ``start`` to ``stop - 1`` (a new vector)."""
        s = self._shift
        if stop > start:
            self._extend(stop + s)
        return self._keys[start + s + 1 : stop + s + 1]

    def key(self, index: int) -> i64:
        """Key of full block ``index`` (0-based)."""
        s = self._shift
        self._extend(index + s + 1)
        return self._keys[index + s + 1]

    def _extend(self, num_blocks: int) -> None:
        """Key blocks up to ``num_blocks - 1``."""
        keys = self._keys
        if len(keys) > num_blocks:
            return
        segs, block = self._segments, self._block
        seg_i, offset = self._seg_i, self._offset
        anchor, anchor_offset = self._anchor, self._anchor_offset
        while len(keys) <= num_blocks:
            if seg_i < len(segs) and offset == segs[seg_i][1]:  # the run is used up
                if offset > anchor_offset:  # the stream goes on: its last block anchors
                    anchor = keys[len(keys) - 1]
                seg_i, offset, anchor_offset = seg_i + 1, 0, 0
                continue
            if seg_i < len(segs) and offset + block <= segs[seg_i][1]:  # inside one run
                seg, length = segs[seg_i]
                if self._base_run != seg_i:  # (the anchor changes only with the run)
                    self._base = hash((anchor, seg, anchor_offset))
                    self._base_run = seg_i
                base: i64 = self._base
                end: i64 = offset  # machine integers: the product stays below 2**63
                step: i64 = _RUN_STEP
                last: i64 = offset + block * min(
                    (length - offset) // block, num_blocks + 1 - len(keys)
                )
                while end < last:
                    end += block
                    keys = append(keys, base ^ (end * step))
                offset = end
                continue
            pieces: list[int] = [anchor]  # the runs from the anchor's end to the block's end
            left, start = block, anchor_offset
            while left > 0:
                if seg_i >= len(segs):
                    raise ValueError(f"stream ends before block {len(keys) - 1} is full")
                seg, length = segs[seg_i]
                take = min(left, length - offset)
                if take > 0:  # an empty run holds no token: it changes no key
                    pieces += (seg, start, offset + take)
                offset += take
                left -= take
                if offset == length:
                    seg_i, offset = seg_i + 1, 0
                start = offset
            anchor, anchor_offset = hash(tuple(pieces)), offset
            keys = append(keys, anchor)
        self._keys = keys
        self._seg_i, self._offset = seg_i, offset
        self._anchor, self._anchor_offset = anchor, anchor_offset


class PrivateKeys:
    """Block keys of a stream no other request shares (no ``token_segments``, no prefix ids).

    Only the request itself can hit its blocks (after a preemption), so a key need not chain its
    tokens: block ``index`` is ``hash((-2, req_id)) ^ ((index + 1) * _RUN_STEP)``, as a block
    inside one token run is keyed (``StreamKeys``): one tuple hash a request, the rest machine
    integers (an index stays under 2**31, so the product fits 63 bits). Keys of one request
    differ; those of two requests collide as any two 64-bit hashes do.
    """

    __slots__ = ("_base",)

    def __init__(self, req_id: int) -> None:
        self._base: i64 = hash((-2, req_id))

    def key(self, index: int) -> i64:
        """Key of full block ``index`` (0-based)."""
        step: i64 = _RUN_STEP
        return self._base ^ ((index + 1) * step)

    def keys_between(self, start: int, stop: int) -> vec[i64]:
        """Keys of full blocks ``start`` to ``stop - 1``."""
        base, step = self._base, _RUN_STEP
        out = vec[i64](capacity=max(stop - start, 0))
        end: i64 = start
        while end < stop:
            end += 1
            out = append(out, base ^ (end * step))
        return out

    def keys(self, num_blocks: int) -> list[int]:
        """Keys of the first ``num_blocks`` full blocks."""
        return list(self.keys_between(0, num_blocks))


def note_shared_tokens(requests: Sequence[Request]) -> None:
    """Set each request's ``shared_tokens`` from the whole workload: its stream's tokens up to
    the end of the last run (``stream_segments``) that some stream names more than once (this
    one twice, or another request too). A block past them holds a run no other request names,
    so its key is this request's alone: only it can hit the block, after a preemption.

    On a Mooncake trace every output and the prompt's context new in its turn are named once.
    Runs are matched by their ids' hashes: two different ids of equal hash count as one, which
    can only make a request's ``shared_tokens`` longer (a block keyed as it fills that need not
    be). A sequence group (``num_seqs > 1``) keeps every token."""
    streams = [r for r in requests if r.shares_tokens and r.num_seqs == 1]
    if not streams:
        return
    ids, lengths, starts = array("q"), array("q"), array("q")  # (packed: a 1 M-request run)
    for request in streams:
        starts.append(len(ids))
        runs = stream_segments(request)
        ids.extend([hash(seg_id) for seg_id, _ in runs])
        lengths.extend([length for _, length in runs])
    named_again = _named_again(np.frombuffer(ids, dtype=np.int64))
    del ids
    ends = np.cumsum(np.frombuffer(lengths, dtype=np.int64))  # each run's end, over all streams
    del lengths
    first = np.frombuffer(starts, dtype=np.int64)
    before = np.concatenate(([0], ends[first[1:] - 1]))  # tokens of the streams before each
    ends *= named_again  # (in place: a run named once ends nothing shared)
    shared = np.maximum.reduceat(ends, first) - before
    np.maximum(shared, 0, out=shared)
    for request, tokens in zip(streams, array("q", shared.tobytes()), strict=True):
        request.shared_tokens = tokens


def _named_again(ids: np.ndarray) -> np.ndarray:
    """bool[n]: whether ``ids[i]`` occurs more than once in ``ids`` (int64[n]). One sort,
    no inverse index (a 1 M-request run holds about 3 M ids)."""
    order = np.argsort(ids, kind="stable")
    ordered = ids[order]
    equal = ordered[1:] == ordered[:-1]
    del ordered
    again = np.zeros(len(ids), dtype=bool)
    again[1:] |= equal
    again[:-1] |= equal
    out = np.empty(len(ids), dtype=bool)
    out[order] = again
    return out


def has_private_stream(request: Request) -> bool:
    """Whether no other request can share this request's tokens: its prompt is its own (no
    ``token_segments`` or ``prefix_hash_ids``), so only it names its prompt and output runs."""
    return not request.shares_tokens
