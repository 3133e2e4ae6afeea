"""The scheduler side of vLLM's OffloadingConnector: what to store in the CPU tier, what to load.

Follows ``vllm/distributed/kv_transfer/kv_connector/v1/offloading_connector.py`` and its
scheduler half (``.../v1/offloading/scheduler.py``, ``OffloadingConnectorScheduler``):

- **Lookup** (``matched_tokens``, vLLM ``get_num_new_matched_tokens``), for a waiting request
  that has computed nothing, after the GPU prefix-cache lookup found ``g`` tokens (whole
  blocks): the tier is asked for the longest run of blocks it holds from block ``g // B`` on
  (``_maximal_prefix_lookup``). A lookup records no access (vLLM 0.34.0
  ``CPUOffloadingManager.lookup``), so a head looked up again step after step changes nothing
  in the tier. ``h`` blocks give ``h * B`` tokens to load; fewer than one block beyond ``g`` is
  no hit. A run holding a block whose store is still in flight (vLLM ``HIT_PENDING``), or one
  that another request's load is reading, delays the request (vLLM: ``None``): the scheduler
  skips it this step and admits the requests behind it (``Scheduler.schedule``,
  ``skip_request``); it keeps its place at the queue's front and is looked up again next
  step.
- **Load** (``start_load``): the scheduler takes GPU blocks for ``g + h * B`` tokens and parks
  the request (vLLM ``WAITING_FOR_REMOTE_KVS``; the load records the request's access to the
  blocks, ``CpuTier.prepare_load``) while ``h`` blocks cross the CPU->GPU link,
  ``h * block_bytes / bandwidth`` seconds after the copies queued before them. When the load
  ends (``finish_load``) the request waits again with ``g + h * B`` tokens computed, one fewer
  when that is all its tokens (vLLM ``_update_waiting_for_remote_kv``: the last token is always
  computed), and its prefill skips them.
- **Store** (``store``, vLLM ``_get_reqs_to_store`` at ``build_connector_meta``): after a step,
  each full block that a scheduled request's computed tokens now cover and that was not offered
  before is offered to the tier (``CpuTier.prepare_store``), by default only within its prompt
  (``prompt_only``, vLLM's ``offload_prompt_only``); the ones it lacks cross the
  GPU->CPU link after the step, without holding the scheduler up, and become loadable when the
  copy ends. The offer records the request's access to the blocks it offers (``CpuTier``).
  Blocks past the tokens another request may share (``Request.shared_tokens``) are the
  request's own: the tier holds them outside its key map until the request is preempted
  (``CpuTier.map_private``), the same blocks with less work.
- **Disk tier** (``disk``, vLLM 0.34.0's tiered offloading, ``kvsim.core.kv.disk_tier``): each
  store's blocks are written on to the disk after their GPU->CPU copy, over the disk's write
  link. A lookup whose CPU run stops short of the request's keyed blocks asks on, block by
  block (vLLM ``TieringOffloadingManager.lookup``): a block the CPU tier holds counts, one the
  disk holds readable is promoted (a CPU slot taken at once, ``CpuTier.prepare_promotions``; the
  blocks cross the disk's read link in one job a lookup, ``_flush_pending_promotions``), the
  first held by neither, or whose CPU slot eviction cannot free, ends the run. Unlike vLLM's,
  the promotions keep the run's CPU blocks the lookup has reached, and those of another request
  waiting on its own promotions, from their evictions (``_promote``).
  Promoting delays the request like a store in flight; once they land it loads them to the
  GPU.
- **Finish** (``forget``, vLLM ``on_request_finished`` at ``build_connector_meta``, after the
  step's stores): the tier commits the recency of the blocks the request recorded.

kvsim's engine decodes steady requests as a cohort without visiting them each step; a member's
block is offered at the end of the step that fills it all the same (the cohort names the members
whose block fills at a clock: ``DecodeCohort.filling_at``), in running order with the step's
other scheduled requests (``Engine._store_steps``). vLLM also defers caching a loading request's GPU
blocks until its load ends (``delay_cache_blocks``); kvsim caches them when it takes them, so
another request may hit them on the GPU during the load.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from librt.vecs import append, vec
from mypy_extensions import i64

from kvsim.core.kv.base import hit_rate
from kvsim.core.kv.disk_tier import DiskTier
from kvsim.core.kv.grow import grown
from kvsim.core.kv.offload import CpuTier, HeldRun, TierAccess, TransferLink
from kvsim.core.kv.paged import PagedAllocator
from kvsim.workload.request import Request


@dataclass(slots=True)
class Load:
    """A load in flight: the tier keys it reads and when it ends (simulated seconds)."""

    keys: vec[i64]
    done_s: float
    num_tokens: int


class OffloadConnector:
    """CPU-tier lookups, loads and stores for the vLLM v1 scheduler (see the module docstring).

    Args:
        allocator: the paged pool whose block keys name the tier's blocks.
        tier: the CPU tier.
        block_bytes: bytes of one block on one GPU (``block_size_tokens * bytes_per_token``).
        bandwidth_bytes_per_s: one direction of the GPU-CPU link.
        disk: a disk tier below the CPU tier, or ``None``.
        disk_read_bytes_per_s, disk_write_bytes_per_s: the disk's links (with ``disk``).
        prompt_only: store only the full blocks of a request's prompt (vLLM's
            ``offload_prompt_only``, on by default; ``kvsim.config.offload.OffloadConfig``).

    Counters (cumulative, vLLM's names): ``external_prefix_cache_queries`` and
    ``external_prefix_cache_hits`` (tokens, first admissions: vLLM's connector prefix-cache
    stats), ``gpu_to_cpu`` and ``cpu_to_gpu`` links (bytes and busy seconds); with a disk,
    ``cpu_to_disk`` and ``disk_to_cpu`` links, ``num_promotions`` (promotion jobs) and
    ``external_prefix_cache_hits_disk`` (tokens of those hits whose blocks were promoted from the
    disk for the request that loads them: vLLM's ``disk`` cache-hit source).
    """

    def __init__(
        self,
        allocator: PagedAllocator,
        tier: CpuTier,
        *,
        block_bytes: int,
        bandwidth_bytes_per_s: float,
        disk: DiskTier | None = None,
        disk_read_bytes_per_s: float = 1.0,
        disk_write_bytes_per_s: float = 1.0,
        prompt_only: bool = True,
    ) -> None:
        self.allocator = allocator
        self.prompt_only = prompt_only
        self.tier = tier
        self.block_size_tokens = allocator.block_size_tokens
        self.block_bytes = block_bytes
        self.gpu_to_cpu = TransferLink(bandwidth_bytes_per_s)
        self.cpu_to_gpu = TransferLink(bandwidth_bytes_per_s)
        self.disk = disk
        self.cpu_to_disk = TransferLink(disk_write_bytes_per_s)
        self.disk_to_cpu = TransferLink(disk_read_bytes_per_s)
        self.num_promotions = 0
        # req_id -> the run a request's promotion extended: kept from other requests'
        # promotions until it looks up again (``_promote``)
        self._awaiting: dict[int, vec[i64]] = {}
        # req_id -> 1 at each block index whose key was promoted from the disk for it (its keys
        # never change: an index names one key), until it finishes: its load's blocks among
        # them came from the disk (vLLM ``TieringOffloadingManager.get_load_source``)
        self._promoted_for: dict[int, vec[i64]] = {}
        self.now_s = 0.0  # the engine sets it before each step is planned
        self.loads: dict[Request, Load] = {}
        self.started: list[Request] = []  # loads started by the last plan (the engine takes)
        self._next_store: dict[int, int] = {}  # req_id -> next block to offer the tier
        # (``prompt_only``) req_ids whose prompt is computed but not all its full blocks offered
        # yet (the tier had no room, or its keys lagged): the only members with blocks to offer
        self._behind: set[int] = set()
        # requests whose last offer found no room, by req_id: vLLM offers every scheduled
        # request's unstored blocks again at each step (``_build_store_jobs``), so a decode
        # cohort member among them is offered every step, not only when a block fills
        self.retrying: dict[int, Request] = {}
        self._access: dict[int, TierAccess] = {}  # req_id -> its accesses to the tier
        # the last request looked up: its id and its full blocks' keys (they never change)
        self._looked_up: int | None = None
        self._looked_up_keys = vec[i64]()
        self._looked_up_run = HeldRun()  # what the tier found of them (``CpuTier.held_run``)
        self.external_prefix_cache_queries = 0
        self.external_prefix_cache_hits = 0
        self.num_store_failures = 0  # stores the tier could not make room for
        self.external_prefix_cache_hits_disk = 0  # (of the hits: blocks promoted from the disk)
        self.num_loads = 0
        self.num_loads_dropped = 0  # loaded requests whose blocks were freed to unblock the head
        self.load_wait_s = 0.0  # cumulative: seconds requests waited for their loads

    # -- lookups and loads ----------------------------------------------------------------------
    def matched_tokens(self, request: Request, gpu_hit_tokens: int) -> int | None:
        """Tokens the tier holds past the GPU hit of ``gpu_hit_tokens`` (whole blocks), 0 for
        none, ``None`` while one of them is still being stored or another load reads one of
        them (see the module docstring)."""
        if not request.shares_tokens and not request.num_preemptions:
            return 0  # a private stream's blocks were never stored by anyone else
        b = self.block_size_tokens
        # blocks with keys: a key may read tokens past its block (vLLM's hash lookahead)
        num_full = self.allocator.keyed_tokens(request) // b
        if num_full * b - gpu_hit_tokens < b:
            return 0
        tier = self.tier
        if request.num_preemptions:
            self._access_of(request)  # (its private blocks join the key map)
        if request.req_id != self._looked_up or num_full != len(self._looked_up_keys):
            self._looked_up_keys = self.allocator.block_keys(request, 0, num_full)
            self._looked_up = request.req_id
            self._looked_up_run = HeldRun()
        first = gpu_hit_tokens // b
        hits, storing, loading = tier.held_run(
            self._looked_up_keys, self.now_s, first, self._looked_up_run
        )
        if storing or loading:
            return None
        if self.disk is not None and self._awaiting:
            self._awaiting.pop(request.req_id, None)
        start = first + hits
        if self.disk is not None and start < num_full and self._promote(request, first, start):
            return None
        return hits * b

    def _promote(self, request: Request, first: int, start: int) -> bool:
        """Go on with the lookup past the CPU tier's run, from block ``start`` (its run began at
        ``first``; see the module docstring); whether any block is being promoted (the request
        waits for it).

        Unlike vLLM's lookup, which pins nothing, the promotions evict neither the run's CPU
        blocks the lookup has reached nor the run of another request waiting on its promotions
        (``CpuTier.shield``; kept until that request looks up again): with a CPU tier smaller
        than the runs waiting on it, vLLM's rule can promote back and forth for ever, one
        request evicting what the last promotion brought in. A CPU block past a promoted one
        is reached after it, so that promotion may evict it (``_promote_each``)."""
        disk, tier, keys, now = self.disk, self.tier, self._looked_up_keys, self.now_s
        assert disk is not None
        begin = start  # (a block after the CPU run's miss may be held: rare)
        while begin < len(keys) and tier.holds(keys[begin]):
            begin += 1
        if begin == len(keys) or not disk.readable(keys[begin], now):
            return False  # nothing to promote: no block shielded
        shielded = vec[i64]()
        for run in self._awaiting.values():
            for key in run:
                shielded = tier.shield(shielded, key)
        for i in range(first, begin):
            shielded = tier.shield(shielded, keys[i])
        # the blocks from ``begin`` on that only the disk holds, readable, read no further than
        # one past the tier's room: a one-at-a-time promotion would stop there too (each takes
        # one slot of that room), so a CPU block or a miss past it changes nothing
        room = tier.promotion_room(shielded, now)
        limit = min(len(keys), begin + room + 1)
        disk.warm(keys, begin + 1, limit)
        run_end = begin
        cpu_block_after = False
        while run_end < limit:
            if tier.holds(keys[run_end]):
                cpu_block_after = True
                break
            if not disk.readable(keys[run_end], now):
                break
            run_end += 1
        if cpu_block_after:  # a promotion may evict that block first, so one at a time
            promoted, end, shielded, at = self._promote_each(request, begin, shielded)
        else:
            promoted, end = self._promote_run(request, begin, run_end, room)
            at = vec[i64](range(begin, begin + len(promoted)))  # (the block indices promoted)
        tier.unshield(shielded)
        if not len(promoted):
            return False
        self._awaiting[request.req_id] = keys[first:end]  # (a copy: the lookup's keys change)
        flags = grown(self._promoted_for.get(request.req_id, vec[i64]()), end, 0)
        self._promoted_for[request.req_id] = flags
        for i in at:
            flags[i] = 1
        disk.read(promoted)
        tier.complete_promotions(self.disk_to_cpu.submit(len(promoted) * self.block_bytes, now))
        self.num_promotions += 1
        return True

    def _promote_run(
        self, request: Request, begin: int, run_end: int, room: int
    ) -> tuple[vec[i64], int]:
        """Promote the looked-up blocks ``begin..run_end`` (on the disk only, readable; no CPU
        block among or right after them), as many as the CPU tier has ``room`` for
        (``CpuTier.promotion_room``, the shielded blocks kept): one store with the same
        evictions, in the same order, and the same accesses as ``_promote_each`` promoting them
        one at a time (only which freed slot each block lands in differs, which nothing reads);
        the first that finds no room records its access and ends the run. Returns the keys
        promoted and the run's end."""
        tier, keys = self.tier, self._looked_up_keys
        num = min(run_end - begin, room)
        access = self._access_of(request)
        promoted = keys[begin : begin + num]
        if num:
            placed = tier.prepare_promotions(promoted, self.now_s, access, begin)
            assert placed, "a promotion the CPU tier had room for failed"
        if begin + num < run_end:  # (no room left: a miss, its access recorded)
            miss = keys[begin + num : begin + num + 1]
            placed = tier.prepare_promotions(miss, self.now_s, access, begin + num)
            assert not placed, "the CPU tier's room for promotions miscounted"
        return promoted, begin + num

    def _promote_each(
        self, request: Request, begin: int, shielded: vec[i64]
    ) -> tuple[vec[i64], int, vec[i64], vec[i64]]:
        """Go on from block ``begin`` one block at a time: a block the CPU tier holds joins the
        run, shielded; one only the disk holds, readable, is promoted (vLLM
        ``TieringOffloadingManager.lookup``); the first block held by neither, or that finds no
        CPU slot, ends it. Returns the keys promoted, the run's end, ``shielded`` grown and the
        promoted blocks' indices."""
        disk, tier, keys, now = self.disk, self.tier, self._looked_up_keys, self.now_s
        assert disk is not None
        promoted, at = vec[i64](), vec[i64]()
        access: TierAccess | None = None
        end = begin
        for i in range(begin, len(keys)):
            key = keys[i]
            if tier.holds(key):
                shielded = tier.shield(shielded, key)
                end = i + 1
                continue
            if not disk.readable(key, now):
                break
            if access is None:
                access = self._access_of(request)
            if not tier.prepare_promotions(vec[i64]([key]), now, access, i):
                break  # vLLM: no CPU slot, a miss
            promoted = append(promoted, key)
            at = append(at, i)
            end = i + 1
        return promoted, end, shielded, at

    def count_query(self, request: Request, gpu_hit_tokens: int, hit_tokens: int) -> None:
        """Count a first admission's lookup (vLLM 0.34.0 ``Scheduler.schedule``'s connector
        prefix-cache stats: the tokens the GPU prefix cache did not hit are queried, ``hit_tokens``
        of them hit; a re-admission counts apart, and is not counted here)."""
        if request.readmitted:
            return
        self.external_prefix_cache_queries += request.num_tokens - gpu_hit_tokens
        self.external_prefix_cache_hits += hit_tokens

    def start_load(self, request: Request, gpu_hit_tokens: int, num_tokens: int) -> float:
        """Start loading ``num_tokens`` (whole blocks) past the GPU hit; the request holds its
        GPU blocks already. Returns when the load ends (seconds)."""
        b = self.block_size_tokens
        start = gpu_hit_tokens // b
        keys = self.allocator.block_keys(request, start, start + num_tokens // b)
        self.tier.prepare_load(keys, self._access_of(request), start)
        done_s = self.cpu_to_gpu.submit(len(keys) * self.block_bytes, self.now_s)
        self.loads[request] = Load(keys, done_s, num_tokens)
        self.started.append(request)
        self.count_query(request, gpu_hit_tokens, num_tokens)
        flags = self._promoted_for.get(request.req_id)
        if flags is not None and not request.readmitted:
            from_disk = 0
            for i in range(start, min(start + len(keys), len(flags))):
                from_disk += flags[i]
            self.external_prefix_cache_hits_disk += b * from_disk
        self.num_loads += 1
        self.load_wait_s += done_s - self.now_s
        if not request.readmitted:  # (vLLM: set at the first admission only)
            request.num_cached_tokens = gpu_hit_tokens + num_tokens
        request.num_computed_tokens = min(gpu_hit_tokens + num_tokens, request.num_tokens - 1)
        self._next_store[request.req_id] = start + len(keys)
        return done_s

    def take_started(self) -> list[Request]:
        """The loads the last plan started (emptied)."""
        started, self.started = self.started, []
        return started

    def finish_load(self, request: Request) -> None:
        """The request's load ended: release the tier blocks it read."""
        self.tier.complete_load(self.loads.pop(request).keys)

    # -- stores ---------------------------------------------------------------------------------
    def store(self, requests: Iterable[Request], now_s: float) -> None:
        """Offer the tier each request's full blocks of computed tokens not offered before; the
        copies the tier takes queue on the GPU->CPU link at ``now_s`` (a step's end)."""
        self.store_tokens([(req, req.num_computed_tokens) for req in requests], now_s)

    def store_tokens(self, computed: list[tuple[Request, int]], now_s: float) -> None:
        """``store`` with each request's computed tokens given (a decode cohort member's own
        counters are stale), in the given order; each count is at most the tokens whose blocks
        have keys (``storable_tokens``); under ``prompt_only`` at most the prompt's."""
        b = self.block_size_tokens
        tier, nxt = self.tier, self._next_store
        prompt_only = self.prompt_only
        for req, num_computed in computed:
            if prompt_only and num_computed > req.prompt_tokens:
                num_computed = req.prompt_tokens
            upto = num_computed // b
            start = nxt.get(req.req_id, 0)
            if upto <= start:
                continue
            if prompt_only and upto >= req.prompt_tokens // b:
                self._behind.discard(req.req_id)  # (once it is stored: None below keeps it)
            keys = self.allocator.block_keys(req, start, upto)
            private_from = req.shared_tokens // b
            access = self._access_of(req)
            new = tier.prepare_store(keys, now_s, access, start, private_from)
            if new is None:
                self.num_store_failures += 1  # (vLLM: vllm:kv_offload_allocation_failure)
                self.retrying[req.req_id] = req
                if prompt_only and num_computed >= req.prompt_tokens:  # (capped: equal)
                    self._behind.add(req.req_id)
                continue  # no room: offered again later (vLLM skips the store this step)
            nxt[req.req_id] = upto
            if self.retrying:
                self.retrying.pop(req.req_id, None)
            if len(new):
                num_bytes = len(new) * self.block_bytes
                done_s = self.gpu_to_cpu.submit(num_bytes, now_s)
                if self.disk is None:
                    tier.complete_store(new, done_s)
                    continue
                disk_done_s = self.cpu_to_disk.submit(num_bytes, done_s)
                tier.complete_store(new, done_s, disk_done_s)
                # (``new`` ends with the private blocks the tier took, the store's last ones)
                num_private = tier.num_private_prepared
                self.disk.write(new, disk_done_s, access, upto - num_private, num_private)

    def may_store(self, request: Request, computed: int, storable: int) -> bool:
        """Whether ``store_tokens`` would offer any block of ``request`` (an explicit request
        of the step: its counters are true) with ``storable`` tokens (``storable_tokens`` of
        ``computed``, the tokens computed once the step runs). Under ``prompt_only`` it also
        notes a request whose prompt is computed but whose prompt blocks are not all offered
        (``members_may_store``): every request is explicit in the step that completes its
        prompt, before it can join the decode cohort."""
        b = self.block_size_tokens
        start = self._next_store.get(request.req_id, 0)
        if self.prompt_only:
            if computed >= request.prompt_tokens and start < request.prompt_tokens // b:
                self._behind.add(request.req_id)
            storable = min(storable, request.prompt_tokens)
        return storable // b > start

    @property
    def members_may_store(self) -> bool:
        """Whether a decode cohort member may have blocks to offer: always, unless only
        prompts are stored and every request whose prompt is computed has had its prompt's
        full blocks offered (``may_store``)."""
        return not self.prompt_only or bool(self._behind)

    def storable_tokens(self, request: Request, computed: int) -> int:
        """Tokens of ``computed`` (computed and scheduled) whose full blocks may be stored: at
        most the request's known tokens, less those a key reads past its block (vLLM
        ``_calc_num_offloadable_tokens``: a verification's scheduled drafts are not known
        tokens, and a block is stored only once it has its hash). ``request``'s counters must
        be true (not a decode cohort member's)."""
        return min(computed, self.allocator.keyed_tokens(request))

    def _access_of(self, request: Request) -> TierAccess:
        """The request's tier accesses; a preempted request's private blocks (past
        ``Request.shared_tokens``, held outside the tiers' key maps) are mapped first, as it
        may now look them up (``CpuTier.map_private``, ``DiskTier.map_private``)."""
        access = self._access.get(request.req_id)
        if access is None:
            access = self._access[request.req_id] = TierAccess()
        if request.num_preemptions and not access.mapped:
            self.tier.map_private(access)
            if self.disk is not None:
                self.disk.map_private(access)
        return access

    def forget(self, request: Request) -> None:
        """A request finished (after its last stores): the tier commits the recency of the
        blocks it accessed (``CpuTier.finish``); its store position is dropped."""
        self._next_store.pop(request.req_id, None)
        self._behind.discard(request.req_id)
        self.retrying.pop(request.req_id, None)
        self._awaiting.pop(request.req_id, None)
        self._promoted_for.pop(request.req_id, None)
        access = self._access.pop(request.req_id, None)
        if access is not None:
            self.tier.finish(access)

    # -- results ----------------------------------------------------------------------------------
    def size_counts(self) -> dict[str, dict[int, int]]:
        """The GPU<->CPU copies by size and the stores by blocks the tier lacked: ``"store"``
        and ``"load"`` map bytes to copies (one a request a step: vLLM's transfer jobs),
        ``"allocation"`` maps blocks to ``CpuTier.prepare_store`` calls that lacked that many
        (those that found no room included)."""
        return {
            "store": dict(self.gpu_to_cpu.job_bytes),
            "load": dict(self.cpu_to_gpu.job_bytes),
            "allocation": dict(self.tier.allocation_sizes),
        }

    def summary(self, end_s: float) -> dict[str, Any]:
        """Counters in vLLM's terms (``kv_offload_*`` bytes and seconds per direction), and the
        tier's blocks storing and loading at ``end_s`` (the run's end, seconds: vLLM's
        ``vllm:kv_offload_cpu_cache_*usage_perc`` gauges as the run leaves them)."""
        queries = self.external_prefix_cache_queries
        _, storing, loading, _ = self.tier.occupancy(end_s)
        return {
            "cpu_tier_blocks": self.tier.num_blocks,
            "external_prefix_cache_queries": queries,
            "external_prefix_cache_hits": self.external_prefix_cache_hits,
            "external_prefix_cache_hit_rate": hit_rate(self.external_prefix_cache_hits, queries),
            "kv_offload_loads": self.num_loads,
            "kv_offload_bytes_gpu_to_cpu": self.gpu_to_cpu.num_bytes,
            "kv_offload_bytes_cpu_to_gpu": self.cpu_to_gpu.num_bytes,
            "kv_offload_time_gpu_to_cpu_s": self.gpu_to_cpu.busy_s,
            "kv_offload_time_cpu_to_gpu_s": self.cpu_to_gpu.busy_s,
            "kv_offload_load_wait_s": self.load_wait_s,
            "kv_offload_loads_dropped": self.num_loads_dropped,
            "kv_offload_allocation_failures": self.num_store_failures,
            "cpu_tier_stored_blocks": self.tier.num_stored_blocks,
            "cpu_tier_evicted_blocks": self.tier.num_evicted_blocks,
            "cpu_tier_storing_blocks_at_end": storing,
            "cpu_tier_loading_blocks_at_end": loading,
            **(self._disk_summary() if self.disk is not None else {}),
        }

    def _disk_summary(self) -> dict[str, Any]:
        """The disk tier's counters (blocks, and bytes and busy seconds per direction)."""
        disk = self.disk
        assert disk is not None
        return {
            "disk_tier_blocks": disk.num_blocks,
            "disk_tier_written_blocks": disk.num_written_blocks,
            "disk_tier_evicted_blocks": disk.num_evicted_blocks,
            "disk_tier_promoted_blocks": disk.num_read_blocks,
            "disk_tier_promotions": self.num_promotions,
            "external_prefix_cache_hits_disk": self.external_prefix_cache_hits_disk,
            "kv_offload_bytes_cpu_to_disk": self.cpu_to_disk.num_bytes,
            "kv_offload_bytes_disk_to_cpu": self.disk_to_cpu.num_bytes,
            "kv_offload_time_cpu_to_disk_s": self.cpu_to_disk.busy_s,
            "kv_offload_time_disk_to_cpu_s": self.disk_to_cpu.busy_s,
        }
