"""The aggregate core's loop over plain arrays, for numba to compile (``kvsim.compiled_core``).

The same rules, in the same order, with the same floating-point operations as
``kvsim.aggregate_core.AggregateCore.run`` on the runs it covers: no preemption, no exact pass,
no prefix hit (requests that share no tokens and are never preempted), arrival times that are not
all ints. Whatever else comes up ends the run with a status (``DECLINED_*``); the caller then runs
the Python core from the start. Written in the subset of Python numba compiles; it also runs,
slowly, as plain Python (the tests check both against the Python core).

State per request ``i`` (workload order, sorted by arrival) lives in int64/float64 arrays; the
cohort (``kvsim.scheduler.cohort.DecodeCohort``, pooled, period ``b``) is the ``m_*`` arrays plus
its running totals, its two heaps and its crossing counts by residue. The waiting queue is the
range ``[wait_head, num_arrived)`` (FCFS without preemption admits in arrival order).
"""

# mypy: disable-error-code="no-any-return"
# (numba's subset: arrays typed Any, every value read from one is Any)
from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

import numpy as np

from kvsim.recorder import MEMORY_COLUMNS
from kvsim.timing import MAX_SPAN_STEPS, SHORT_SPAN_STEPS

CACHED = False  # numba keeps the compiled functions on disk (False: it compiles per process)
try:  # numba compiles this module's functions on first call, cached on disk where it can
    from numba import njit as _njit

    def jit(func: Callable[..., Any]) -> Any:
        global CACHED
        try:
            compiled = _njit(cache=True)(func)
            CACHED = True
        except RuntimeError:  # no writable cache directory (numba: "no locator available")
            compiled = _njit(func)
        return compiled

except ImportError:  # without numba they stay plain Python

    def jit(func: Callable[..., Any]) -> Any:
        return func


OK = 0
DECLINED_EXACT = 1  # the token budget ends before a steady decoder's turn
DECLINED_PREEMPT = 2  # a step's blocks do not fit: a preemption
DECLINED_NOTHING_TO_COMPUTE = 3
DECLINED_NEVER_FITS = 4

NUM_COLUMNS = len(MEMORY_COLUMNS)

# cost-model coefficients, in this order (kvsim.compiled_core.cost_coefficients)
(
    C_WEIGHT,
    C_KV,
    C_LINEAR,
    C_ATTN,
    C_BANDWIDTH,
    C_FLOPS,
    C_OVERHEAD,
    C_PER_SEQ,
    C_HIDDEN,
    C_ACT,
    C_LINK,
    C_LATENCY,
) = range(12)


@jit
def block_sum(a: np.ndarray, lo: int, n: int) -> float:
    """numpy's sum of up to 128 values ``a[lo:lo + n]``: left to right below 8, else 8
    interleaved running sums combined pairwise, then the rest left to right."""
    if n < 8:
        res = 0.0
        for i in range(n):
            res += a[lo + i]
        return res
    if n <= 128:
        r0 = a[lo]
        r1 = a[lo + 1]
        r2 = a[lo + 2]
        r3 = a[lo + 3]
        r4 = a[lo + 4]
        r5 = a[lo + 5]
        r6 = a[lo + 6]
        r7 = a[lo + 7]
        i = 8
        whole = n - n % 8
        while i < whole:
            r0 += a[lo + i]
            r1 += a[lo + i + 1]
            r2 += a[lo + i + 2]
            r3 += a[lo + i + 3]
            r4 += a[lo + i + 4]
            r5 += a[lo + i + 5]
            r6 += a[lo + i + 6]
            r7 += a[lo + i + 7]
            i += 8
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        while i < n:
            res += a[lo + i]
            i += 1
        return res
    return 0.0


@jit
def pairwise_sum(a: np.ndarray, lo: int, n: int) -> float:
    """numpy's sum of ``a[lo:lo + n]`` (float64, contiguous; ``numpy/_core/src/umath/
    loops_utils.h``): longer than 128 values, the sum of its halves (the first rounded down to
    a multiple of 8), each summed the same way; evaluated with a stack (numba caches no
    recursion)."""
    if n <= 128:
        return block_sum(a, lo, n)
    los = np.empty(128, np.int64)
    sizes = np.empty(128, np.int64)
    split = np.zeros(128, np.bool_)
    values = np.empty(128)
    top = 0
    num_values = 0
    los[0] = lo
    sizes[0] = n
    while top >= 0:
        start, size = los[top], sizes[top]
        if size <= 128:
            values[num_values] = block_sum(a, start, size)
            num_values += 1
            top -= 1
        elif not split[top]:
            split[top] = True
            half = size // 2
            half -= half % 8
            los[top + 1], sizes[top + 1], split[top + 1] = start + half, size - half, False
            los[top + 2], sizes[top + 2], split[top + 2] = start, half, False
            top += 2  # the first half is summed first, then the second
        else:
            values[num_values - 2] = values[num_values - 2] + values[num_values - 1]
            num_values -= 1
            top -= 1
    return values[0]


@jit
def communication_s(c: np.ndarray, tp: int, pp: int, num_layers: int, new_tokens: float) -> float:
    """``StepCostModel.communication_s`` of one step."""
    message = new_tokens * c[C_HIDDEN] * c[C_ACT]
    out = message * 0.0
    if tp > 1:
        ring = 2.0 * (tp - 1) / tp
        per_allreduce = ring * message / c[C_LINK] + c[C_LATENCY]
        out += 2 * num_layers * per_allreduce
    if pp > 1:
        out += (pp - 1) * (message / c[C_LINK] + c[C_LATENCY])
    return out


@jit
def step_s(
    c: np.ndarray,
    tp: int,
    pp: int,
    num_layers: int,
    new: float,
    ctx: float,
    pairs: float,
    seqs: float,
) -> float:
    """``StepCostModel.step_s``."""
    mem = c[C_WEIGHT] + ctx * c[C_KV]
    flops = c[C_LINEAR] * new + c[C_ATTN] * pairs
    a = mem / c[C_BANDWIDTH]
    f = flops / c[C_FLOPS]
    duration = a if a >= f else f
    duration += c[C_OVERHEAD] + c[C_PER_SEQ] * seqs
    if tp > 1 or pp > 1:
        duration += communication_s(c, tp, pp, num_layers, new)
    return duration


@jit
def decode_step_s(
    c: np.ndarray, tp: int, pp: int, num_layers: int, context0: float, seqs: float, j: int
) -> float:
    """Step ``j`` of ``StepCostModel.decode_steps_s`` (its numpy expression, one element: the
    same operations as ``step_s`` with every running request decoding one token)."""
    context = context0 + seqs * float(j)
    return step_s(c, tp, pp, num_layers, seqs, context, 2.0 * context + seqs, seqs)


@jit
def short_step_s(
    c: np.ndarray, tp: int, pp: int, num_layers: int, context0: float, seqs: float, j: int
) -> float:
    """Step ``j`` of ``StepCostModel.span_durations`` (plain floats, its order of operations)."""
    context = context0 + seqs * float(j)
    mem_s = (c[C_WEIGHT] + context * c[C_KV]) / c[C_BANDWIDTH]
    compute_s = (c[C_LINEAR] * seqs + c[C_ATTN] * (2.0 * context + seqs)) / c[C_FLOPS]
    duration = (mem_s if mem_s >= compute_s else compute_s) + (c[C_OVERHEAD] + c[C_PER_SEQ] * seqs)
    if tp > 1 or pp > 1:
        duration += communication_s(c, tp, pp, num_layers, seqs)
    return duration


@jit
def with_room(rows: np.ndarray, num_rows: int) -> np.ndarray:
    """``rows`` (float64[capacity, NUM_COLUMNS]), or a copy twice as long when full."""
    if num_rows < rows.shape[0]:
        return rows
    bigger = np.empty((2 * rows.shape[0], NUM_COLUMNS))
    bigger[: rows.shape[0]] = rows
    return bigger


# the cohort's member table (int64[n, NUM_MEMBER_FIELDS]) and running totals (int64[NUM_TOTALS])
M_IN, M_SYNC, M_COMP, M_OUT, M_CROSS, M_FINAL, M_JOIN = range(7)
NUM_MEMBER_FIELDS = 7
T_MEMBERS, T_JOINS, T_BASE, T_HELD, T_INTERNAL, T_ALLOCATED = range(6)
NUM_TOTALS = 6


@jit
def join(
    mem: np.ndarray,
    tot: np.ndarray,
    crossings: np.ndarray,
    finishes: list[tuple[int, int, int, int]],
    finals: list[tuple[int, int, int, int]],
    by_seq: list[tuple[int, int, int]],
    req: int,
    sync: int,
    comp: int,
    out: int,
    held_slots: int,
    final: int,
    output_tokens: int,
    seq: int,
    b: int,
) -> None:
    """``DecodeCohort.join`` of request ``req`` (pooled): ``comp`` computed tokens and ``out``
    sampled ones at clock ``sync``, holding ``held_slots``."""
    tot[T_JOINS] += 1
    joins = tot[T_JOINS]
    cross = (sync - comp) % b
    mem[req, M_IN] = 1
    mem[req, M_SYNC] = sync
    mem[req, M_COMP] = comp
    mem[req, M_OUT] = out
    mem[req, M_CROSS] = cross
    mem[req, M_JOIN] = joins
    mem[req, M_FINAL] = -1
    crossings[cross] += 1
    last_block = -(final // -b) - 1  # index of the block holding token F - 1
    if held_slots <= final and final % b and last_block * b >= comp:
        mem[req, M_FINAL] = sync + last_block * b - comp
        heapq.heappush(finals, (mem[req, M_FINAL], seq, joins, req))
    tot[T_MEMBERS] += 1
    tot[T_BASE] += comp - sync
    tot[T_HELD] += held_slots
    tot[T_INTERNAL] += max(held_slots - final, 0)
    heapq.heappush(finishes, (sync + output_tokens - out, seq, joins, req))
    heapq.heappush(by_seq, (-seq, joins, req))


@jit
def allocate_pooled(
    mem: np.ndarray,
    tot: np.ndarray,
    crossings: np.ndarray,
    finals: list[tuple[int, int, int, int]],
    final_kv: np.ndarray,
    b: int,
    first: int,
    num_steps: int,
    blocks: np.ndarray,
    internal: np.ndarray,
) -> int:
    """``DecodeCohort.allocate_pooled``: the blocks (``blocks[d]``) and internal fragmentation
    (``internal[d]``) the steps at clocks ``first + d`` take; returns the blocks in all."""
    if first != tot[T_ALLOCATED]:
        raise AssertionError("allocating a clock out of order")
    end = first + num_steps
    tot[T_ALLOCATED] = end
    taken = 0
    for d in range(num_steps):
        blocks[d] = crossings[(first + d) % b]
        internal[d] = 0
        taken += blocks[d]
    tot[T_HELD] += b * taken
    while len(finals) > 0 and finals[0][0] < end:
        clock, _, joins, req = heapq.heappop(finals)
        if not mem[req, M_IN] or mem[req, M_JOIN] != joins or mem[req, M_FINAL] != clock:
            continue  # it left
        jump = -(final_kv[req] // -b) * b - final_kv[req]
        internal[clock - first] += jump
        tot[T_INTERNAL] += jump
    return taken


@jit
def remove(others: list[int], req: int) -> None:
    """Take ``req`` out of the running order's list, if there."""
    for q in range(len(others)):
        if others[q] == req:
            others.pop(q)
            return


@jit
def run_kernel(
    arrival: np.ndarray,
    prompt: np.ndarray,
    output: np.ndarray,
    final_kv: np.ndarray,
    b: int,
    budget0: int,
    max_num_seqs: int,
    chunked: bool,
    full_isl: bool,
    caching: bool,
    free0: int,
    record: bool,
    capacity: int,
    overhead: int,
    watermark_blocks: int,
    c: np.ndarray,
    tp: int,
    pp: int,
    num_layers: int,
    first_scheduled: np.ndarray,
    first_token: np.ndarray,
    finish: np.ndarray,
    rows: np.ndarray,
) -> tuple[int, np.ndarray, int, int, int]:
    """Run the requests; fill ``first_scheduled``, ``first_token``, ``finish`` (float64[n],
    NaN until set) and memory rows (``kvsim.recorder.MEMORY_COLUMNS`` as float64 columns).

    Returns:
        ``(status, rows, num_rows, prefix_cache_queries, free blocks at the end)``; ``rows``
        may be a larger copy of the one passed in.
    """
    n_req = arrival.shape[0]
    computed = np.zeros(n_req, np.int64)  # Request.num_computed_tokens
    out_n = np.zeros(n_req, np.int64)  # Request.num_output_tokens
    held = np.zeros(n_req, np.int64)  # Request.num_held_slots
    blocks_of = np.zeros(n_req, np.int64)
    seq_of = np.zeros(n_req, np.int64)
    mem = np.zeros((n_req, NUM_MEMBER_FIELDS), np.int64)  # the cohort's members, by request
    tot = np.zeros(NUM_TOTALS, np.int64)  # the cohort's running totals
    crossings = np.zeros(b, np.int64)
    finishes = [(0, 0, 0, 0)]
    finishes.pop()
    finals = [(0, 0, 0, 0)]
    finals.pop()
    by_seq = [(0, 0, 0)]  # (-seq, join, request): the member admitted last on top
    by_seq.pop()
    clock = 0
    others = [0]  # running, mid-prefill, in running order
    others.pop()
    sched = [0]
    sched.pop()
    sched_new = [0]
    sched_new.pop()
    step_blocks = np.zeros(1, np.int64)
    step_internal = np.zeros(1, np.int64)
    span_blocks = np.zeros(MAX_SPAN_STEPS, np.int64)
    span_internal = np.zeros(MAX_SPAN_STEPS, np.int64)
    durations = np.zeros(MAX_SPAN_STEPS)
    queue = np.zeros(MAX_SPAN_STEPS)
    weights = np.zeros(MAX_SPAN_STEPS)
    products = np.zeros(MAX_SPAN_STEPS)
    means = np.zeros(8)
    num_rows = 0
    free = free0
    queries = 0
    next_seq = 0
    last_release = 0.0
    now = 0.0
    num_arrived = 0
    wait_head = 0
    num_finished = 0

    while num_finished < n_req:
        if tot[T_MEMBERS] == 0 and len(others) == 0 and wait_head == num_arrived:
            i = num_arrived  # idle: the next arrival wakes the engine (_next_release)
            delay = arrival[i] - last_release
            now = last_release + delay if delay > 0 else last_release
            last_release = now
            while True:
                i += 1
                if i == n_req:
                    break
                if arrival[i] - last_release > 0:
                    break
            num_arrived = i

        # -- schedule: the lazy path ------------------------------------------------------
        n = tot[T_MEMBERS]
        left = budget0 - n
        sched.clear()
        sched_new.clear()
        w_new = 0.0
        w_ctx = 0.0
        w_pairs = 0.0
        w_seqs = 0.0
        num_prefills = 0
        partial = False
        if left < 0:
            return DECLINED_EXACT, rows, num_rows, queries, free
        need = 0
        boundary = -1
        num_chunks = 0
        for pos in range(len(others)):
            req = others[pos]
            if left <= 0:
                if boundary < 0:
                    boundary = req
                break
            comp = computed[req]
            num_new = prompt[req] + out_n[req] - comp
            if num_new <= 0:
                return DECLINED_NOTHING_TO_COMPUTE, rows, num_rows, queries, free
            if num_new >= left:
                num_new = left
                boundary = req
            extra = -((comp + num_new) // -b) - blocks_of[req]
            if extra > 0:
                need += extra
            left -= num_new
            sched.append(req)
            sched_new.append(num_new)
            num_chunks += 1
        starved = False
        if boundary >= 0:
            bseq = seq_of[boundary]
            while len(by_seq) > 0:  # the latest member (stale entries dropped)
                _, sjoin, sidx = by_seq[0]
                if mem[sidx, M_IN] and mem[sidx, M_JOIN] == sjoin:
                    break
                heapq.heappop(by_seq)
            if len(by_seq) > 0 and -by_seq[0][0] > bseq:
                return DECLINED_EXACT, rows, num_rows, queries, free  # a member after it
            index = 0
            for pos in range(len(others)):
                if others[pos] == boundary:
                    index = pos
            num_later = len(others) - index - 1
            starved = num_later > 0 or num_chunks == 0 or sched[num_chunks - 1] != boundary
        if need + crossings[clock % b] > free:
            return DECLINED_PREEMPT, rows, num_rows, queries, free
        free -= allocate_pooled(
            mem, tot, crossings, finals, final_kv, b, clock, 1, step_blocks, step_internal
        )
        for pos in range(num_chunks):
            req = sched[pos]
            num_new = sched_new[pos]
            comp = computed[req]
            total = comp + num_new
            extra = -(total // -b) - blocks_of[req]
            if extra > 0:
                free -= extra
                blocks_of[req] += extra
                held[req] = blocks_of[req] * b
            partial = partial or total < prompt[req] + out_n[req]
            if num_new != 1 or out_n[req] == 0:
                num_prefills += 1
            w_new += num_new
            w_ctx += comp
            w_pairs += 2 * num_new * comp + num_new * num_new
            w_seqs += 1
        partial = partial or starved
        n = tot[T_MEMBERS]
        context = tot[T_BASE] + tot[T_MEMBERS] * clock
        w_new += n
        w_ctx += context
        w_pairs += 2 * context + n
        w_seqs += n
        budget = left
        blocked_reason = 0  # 0 none, 1 max_num_seqs, 2 budget, 3 kv
        while wait_head < num_arrived and budget > 0:
            if tot[T_MEMBERS] + len(others) >= max_num_seqs:
                blocked_reason = 1
                break
            head = wait_head
            tokens = prompt[head] + out_n[head]
            num_new = tokens
            if not chunked and num_new > budget:
                blocked_reason = 2
                break
            if num_new > budget:
                num_new = budget
            need_blocks = -(num_new // -b)
            if need_blocks > free or (full_isl and -(tokens // -b) > free):
                blocked_reason = 3
                break
            wait_head += 1
            free -= need_blocks
            blocks_of[head] = need_blocks
            held[head] = need_blocks * b
            seq_of[head] = next_seq
            next_seq += 1
            others.append(head)
            if num_new < tokens:
                partial = True
            sched.append(head)
            sched_new.append(num_new)
            w_new += num_new
            w_seqs += 1
            budget -= num_new
            if num_new != 1 or out_n[head] == 0:
                num_prefills += 1
            if caching:
                queries += tokens
            w_pairs += num_new * num_new
        if wait_head < num_arrived and blocked_reason == 0:
            blocked_reason = 2
        if len(sched) == 0 and n == 0:
            return DECLINED_NEVER_FITS, rows, num_rows, queries, free
        extendable = (
            blocked_reason != 2 and not partial and len(sched) + n == tot[T_MEMBERS] + len(others)
        )
        for pos in range(len(sched)):
            req = sched[pos]
            if np.isnan(first_scheduled[req]):
                first_scheduled[req] = now

        # -- durations ----------------------------------------------------------------------
        after = clock + 1
        k = 1
        num_running = tot[T_MEMBERS] + len(others)
        if extendable and num_running:
            for pos in range(len(sched)):  # prejoin
                req = sched[pos]
                comp = computed[req] + sched_new[pos]
                remove(others, req)
                join(
                    mem,
                    tot,
                    crossings,
                    finishes,
                    finals,
                    by_seq,
                    req,
                    after,
                    comp,
                    out_n[req] + 1,
                    held[req],
                    final_kv[req],
                    output[req],
                    seq_of[req],
                    b,
                )
            while len(finishes) > 0:  # cohort.next_finish_clock
                _, _, fjoin, fidx = finishes[0]
                if mem[fidx, M_IN] and mem[fidx, M_JOIN] == fjoin:
                    break
                heapq.heappop(finishes)
            top = finishes[0][0]
            remaining = top - after
            if remaining > 0:
                k = min(MAX_SPAN_STEPS, remaining + 1)
                # cohort.max_steps_within(after, k - 1, free)
                max_steps = k - 1
                t = max_steps
                if free < 0:
                    t = 0
                elif tot[T_MEMBERS]:
                    whole, rest = divmod(max_steps, b)
                    total = tot[T_MEMBERS] * whole
                    for d in range(rest):
                        total += crossings[(after + d) % b]
                    if total > free:
                        whole = min(free // tot[T_MEMBERS], max_steps // b)
                        t = whole * b
                        used = whole * tot[T_MEMBERS]
                        while t < max_steps:
                            nxt = used + crossings[(after + t) % b]
                            if nxt > free:
                                break
                            used = nxt
                            t += 1
                k = 1 + t
        step0_s = step_s(c, tp, pp, num_layers, w_new, w_ctx, w_pairs, w_seqs)
        m = tot[T_MEMBERS]
        waiting_now = num_arrived - wait_head
        next_arrival = num_arrived < n_req
        long_span = k > SHORT_SPAN_STEPS
        durations[0] = step0_s
        if 1 < k <= SHORT_SPAN_STEPS:  # StepCostModel.span_durations, cut at the next arrival
            context0 = float(tot[T_BASE] + tot[T_MEMBERS] * after)
            cut = waiting_now == 0 and next_arrival
            until = arrival[num_arrived] - now if cut else 0.0
            kept = 1
            end = step0_s
            if not (cut and end >= until):
                for j in range(k - 1):
                    d = short_step_s(c, tp, pp, num_layers, context0, float(m), j)
                    durations[kept] = d
                    kept += 1
                    end += d
                    if cut and end >= until:
                        break
            k = kept
        elif long_span:
            context0 = float(tot[T_BASE] + tot[T_MEMBERS] * after)
            for j in range(k - 1):
                durations[j + 1] = decode_step_s(c, tp, pp, num_layers, context0, float(m), j)
            if waiting_now == 0 and next_arrival:  # Engine._cut_span: searchsorted(cumsum)
                until_arrival = arrival[num_arrived] - now
                acc = 0.0
                before = 0
                for j in range(k):
                    acc += durations[j]
                    if acc < until_arrival:
                        before += 1
                    else:
                        break
                k = min(k, before + 1)
        head_tokens = 0
        has_head = waiting_now > 0 and record
        if has_head:
            tokens = prompt[wait_head] + out_n[wait_head]
            head_tokens = min(tokens, budget0) if chunked and not full_isl else tokens
        need_slots = (-(head_tokens // -b) + watermark_blocks) * b
        if k == 1:
            total_s = step0_s
            if record:
                token = tot[T_BASE] + tot[T_MEMBERS] * after
                held_sum = tot[T_HELD]
                internal_now = tot[T_INTERNAL]
                for pos in range(len(others)):
                    req = others[pos]
                    length = computed[req]
                    for q in range(len(sched)):
                        if sched[q] == req:
                            length += sched_new[q]
                            break
                    slots = -(length // -b) * b
                    token += length
                    held_sum += slots
                    internal_now += max(slots - (prompt[req] + output[req] - 1), 0)
                free_total = capacity - held_sum - overhead
                usable = free_total
                blocked = 0
                if has_head:
                    usable = free_total if free_total >= need_slots else 0
                    if usable == 0 and free_total >= need_slots:
                        blocked = 1
                rows = with_room(rows, num_rows)
                r = rows[num_rows]
                r[0] = now
                r[1] = step0_s
                r[2] = 1
                r[3] = num_running
                r[4] = float(waiting_now)
                r[5] = num_prefills
                r[6] = 0
                r[7] = blocked
                r[8] = token
                r[9] = held_sum - token - internal_now
                r[10] = internal_now
                r[11] = free_total - usable + overhead
                r[12] = usable
                r[13] = capacity - free_total
                r[14] = held_sum
                r[15] = held_sum
                num_rows += 1
        else:
            held0 = tot[T_HELD]
            internal0 = tot[T_INTERNAL]
            free -= allocate_pooled(
                mem,
                tot,
                crossings,
                finals,
                final_kv,
                b,
                after,
                k - 1,
                span_blocks[1:],
                span_internal[1:],
            )
            total_s = pairwise_sum(durations, 0, k)
            if record:
                token0 = tot[T_BASE] + tot[T_MEMBERS] * after
                # waiting_per_step: the queue in each step, arrivals joining it
                varies = False
                if k > 1 and num_arrived < n_req:
                    acc = 0.0
                    for j in range(k - 1):
                        acc += durations[j]
                    varies = not (arrival[num_arrived] > now + acc)
                    if long_span:
                        varies = True
                if varies:
                    acc = 0.0
                    hi = num_arrived
                    for j in range(k):
                        start = now + 0.0 if j == 0 else now + acc
                        while hi < n_req and arrival[hi] <= start:
                            hi += 1
                        queue[j] = float(waiting_now + max(hi - num_arrived, 0))
                        acc += durations[j]
                for j in range(k):
                    weights[j] = durations[j] / total_s if total_s > 0 else 1 / k
                unshared = held0
                internal = internal0
                num_blocked = 0
                means[:] = 0.0
                waiting_m = 0.0
                if not long_span:  # MemoryRecorder.record_span_steps: left to right
                    for j in range(k):
                        w = weights[j]
                        if j:
                            unshared += b * span_blocks[j]
                            internal += span_internal[j]
                        held_j = unshared
                        token = token0 + m * j
                        free_total = capacity - held_j - overhead
                        usable = free_total
                        if has_head:
                            if free_total < need_slots:
                                usable = 0
                            elif free_total == 0:
                                num_blocked += 1
                        means[0] += token * w
                        means[1] += (held_j - token - internal) * w
                        means[2] += internal * w
                        means[3] += (free_total - usable + overhead) * w
                        means[4] += usable * w
                        means[5] += (capacity - free_total) * w
                        means[6] += held_j * w
                        means[7] += unshared * w
                    if varies:
                        for j in range(k):
                            waiting_m += queue[j] * weights[j]
                    else:
                        for j in range(k):
                            waiting_m += waiting_now * weights[j]
                else:  # MemoryRecorder.record of categorize's arrays: pairwise sums
                    for col in range(8):
                        unshared = held0
                        internal = internal0
                        for j in range(k):
                            if j:
                                unshared += b * span_blocks[j]
                                internal += span_internal[j]
                            held_j = unshared
                            token = token0 + m * j
                            free_total = capacity - held_j - overhead
                            usable = free_total
                            if has_head and free_total < need_slots:
                                usable = 0
                            if col == 0:
                                x = token
                            elif col == 1:
                                x = held_j - token - internal
                            elif col == 2:
                                x = internal
                            elif col == 3:
                                x = free_total - usable + overhead
                            elif col == 4:
                                x = usable
                            elif col == 5:
                                x = capacity - free_total
                            else:
                                x = held_j
                            if col == 0 and has_head and usable == 0 and free_total >= need_slots:
                                num_blocked += 1
                            products[j] = float(x) * weights[j]
                        means[col] = pairwise_sum(products, 0, k)
                    means[7] = means[6]
                    for j in range(k):
                        products[j] = (queue[j] if varies else float(waiting_now)) * weights[j]
                    waiting_m = pairwise_sum(products, 0, k)
                rows = with_room(rows, num_rows)
                r = rows[num_rows]
                r[0] = now
                r[1] = total_s
                r[2] = k
                r[3] = num_running
                r[4] = waiting_m
                r[5] = num_prefills
                r[6] = 0
                r[7] = num_blocked
                for col in range(8):
                    r[8 + col] = means[col]
                num_rows += 1

        # -- the span passes, arrivals during it ---------------------------------------------
        step0_end_s = now + step0_s
        span_start = num_arrived
        now = now + total_s
        i = num_arrived
        while i < n_req:
            delay = arrival[i] - last_release
            together = not (delay > 0)
            release_s = last_release if together else last_release + delay
            first = i == 0 or i - 1 < span_start
            if release_s > now or (release_s == now and not together and not first):
                break
            last_release = release_s
            i += 1
        num_arrived = i

        # -- complete -------------------------------------------------------------------------
        for pos in range(len(sched)):
            req = sched[pos]
            computed[req] += sched_new[pos]
            if computed[req] >= prompt[req] + out_n[req]:
                out_n[req] += 1
                if np.isnan(first_token[req]):
                    first_token[req] = step0_end_s
        clock = after + k - 1
        done = [0]
        done.pop()
        for pos in range(len(sched)):
            req = sched[pos]
            if out_n[req] >= output[req] and not mem[req, M_IN]:
                done.append(req)
        while len(finishes) > 0:  # cohort.pop_finished
            fclock, _, fjoin, fidx = finishes[0]
            if not (mem[fidx, M_IN] and mem[fidx, M_JOIN] == fjoin):
                heapq.heappop(finishes)
                continue
            if fclock > clock:
                break
            heapq.heappop(finishes)
            d = clock - mem[fidx, M_SYNC]
            computed[fidx] = mem[fidx, M_COMP] + d
            out_n[fidx] = mem[fidx, M_OUT] + d
            # cohort.leave
            h = -((mem[fidx, M_COMP] + tot[T_ALLOCATED] - mem[fidx, M_SYNC]) // -b) * b
            mem[fidx, M_IN] = False
            tot[T_MEMBERS] -= 1
            tot[T_BASE] -= mem[fidx, M_COMP] - mem[fidx, M_SYNC]
            tot[T_HELD] -= h
            tot[T_INTERNAL] -= max(h - final_kv[fidx], 0)
            crossings[mem[fidx, M_CROSS]] -= 1
            held[fidx] = h
            blocks_of[fidx] = h // b
            done.append(fidx)
        for pos in range(len(done)):
            req = done[pos]
            finish[req] = now
            held[req] = 0
            free += blocks_of[req]
            blocks_of[req] = 0
            remove(others, req)
        num_finished += len(done)
        for pos in range(len(sched)):  # steady after step 0: join the cohort
            req = sched[pos]
            comp = computed[req]
            if (
                np.isnan(finish[req])
                and not mem[req, M_IN]
                and out_n[req] > 0
                and comp == prompt[req] + out_n[req] - 1
                and held[req] == -(comp // -b) * b
            ):
                remove(others, req)
                join(
                    mem,
                    tot,
                    crossings,
                    finishes,
                    finals,
                    by_seq,
                    req,
                    clock,
                    comp,
                    out_n[req],
                    held[req],
                    final_kv[req],
                    output[req],
                    seq_of[req],
                    b,
                )
    return OK, rows, num_rows, queries, free
