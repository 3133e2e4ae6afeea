"""A disk tier below the CPU tier (vLLM 0.34.0's tiered offloading), worked by hand.

The rules are ``vllm/v1/kv_offload/tiering/manager.py`` (``TieringOffloadingManager``): every
block newly stored in the CPU tier is cascaded to the disk after its GPU->CPU copy, pinned in
the CPU tier until the write ends (``complete_store``, ``prepare_read``); a lookup that misses
the CPU tier asks the disk and promotes a hit into a CPU slot taken at once, answering
``HIT_PENDING`` until it lands (``lookup``, ``_initiate_promotion``); a file being written is a
miss (``tiering/fs``: written to a temporary name, renamed when whole). The disk's LRU bound is
kvsim's (vLLM's file-system tier never deletes). Every expected number is worked out in the
comments: 1 MB blocks, 16 tokens each.
"""

from __future__ import annotations

import numpy as np
import pytest
from librt.vecs import vec
from mypy_extensions import i64

from kvsim.config.offload import disk_tier_blocks
from kvsim.config.sim import config_from_dict
from kvsim.core.kv.disk_tier import DiskTier
from kvsim.core.kv.offload import CpuTier, TierAccess
from kvsim.core.kv.paged import PagedAllocator
from kvsim.core.scheduler.offload import OffloadConnector
from kvsim.workload.request import Request

B = 16
MB = 1_000_000
# GPU<->CPU 1 GB/s (1 ms a block), CPU->disk 0.5 GB/s (2 ms), disk->CPU 0.25 GB/s (4 ms)
PCIE, DISK_WRITE, DISK_READ = 1e9, 0.5e9, 0.25e9


def keys(*values: int) -> vec[i64]:
    return vec[i64](list(values))


def parts(num_cpu_blocks: int = 2, num_disk_blocks: int = 8):
    pool = PagedAllocator(
        capacity_tokens=40 * B,
        block_size_tokens=B,
        enable_prefix_caching=True,
        reserve_null_block=True,
    )
    conn = OffloadConnector(
        pool,
        CpuTier(num_blocks=num_cpu_blocks),
        block_bytes=MB,
        bandwidth_bytes_per_s=PCIE,
        disk=DiskTier(num_blocks=num_disk_blocks),
        disk_read_bytes_per_s=DISK_READ,
        disk_write_bytes_per_s=DISK_WRITE,
    )
    return pool, conn


def doc(req_id: int, *segs: tuple[object, int], computed: int = 0) -> Request:
    prompt = sum(n for _, n in segs)
    req = Request(req_id, 0.0, prompt, 4, 4, token_segments=segs)
    req.num_computed_tokens = computed
    return req


def test_disk_lru_and_readable_only_once_written() -> None:
    """Three blocks of disk: writes, an eviction of the least recent, a read refreshing one."""
    disk = DiskTier(num_blocks=3)
    disk.write(keys(1, 2), 1.0)  # 1, 2 writing until t=1
    assert disk.occupancy(0.5) == (0, 2, 1)  # (stored, writing, free)
    assert not disk.readable(1, 0.5)
    assert disk.readable(1, 1.0)
    disk.write(keys(3, 4), 2.0)  # 3 fills the last block; 4 evicts 1, the least recent
    assert 1 not in disk
    assert disk.occupancy(1.5) == (1, 2, 0)
    disk.read(keys(2))  # 2 is the most recent now: order 3, 4, 2
    disk.write(keys(5), 3.0)  # evicts 3, not 2
    assert [k in disk for k in (2, 3, 4, 5)] == [True, False, True, True]
    disk.write(keys(2), 4.0)  # written again: stays readable, most recent
    assert disk.readable(2, 3.5)
    # 6 blocks written (1, 2, 3, 4, 5, and 2 again), 2 evicted (1, 3), 1 read (2)
    assert (disk.num_written_blocks, disk.num_evicted_blocks, disk.num_read_blocks) == (6, 2, 1)
    disk.check_invariants(5.0)
    assert disk.occupancy(5.0) == (3, 0, 0)


def test_evicting_a_block_still_writing_frees_its_count() -> None:
    """A block evicted before its write ends leaves the writing count at once."""
    disk = DiskTier(num_blocks=1)
    disk.write(keys(1), 1.0)
    assert disk.occupancy(0.0) == (0, 1, 0)
    disk.write(keys(2), 2.0)  # evicts 1 while it is writing
    assert disk.occupancy(0.5) == (0, 1, 0)  # 2 writing
    assert disk.occupancy(1.5) == (0, 1, 0)  # 1's write ending changes nothing
    assert disk.occupancy(2.0) == (1, 0, 0)
    disk.check_invariants(2.0)


def test_growing_the_key_map_maps_no_slot_not_yet_written() -> None:
    """The key map is rebuilt (grown) before a new key takes a fresh slot: rebuilt after, it
    mapped the fresh slot's unwritten key (0) too, a phantom entry that later removals could
    leave an evicted key findable through. 20 writes of 7 new keys into 40 blocks grow the map
    several times and evict 100 keys; key 0 is never written."""
    disk = DiskTier(num_blocks=40)
    for w in range(20):
        disk.write(keys(*range(1 + 7 * w, 8 + 7 * w)), float(w))
        disk.check_invariants(float(w))  # (counts the map's entries against the held keys)
    assert 0 not in disk
    assert disk.recency_order() == list(range(101, 141))  # the last 40 written
    assert disk.num_evicted_blocks == 100


def private(access: TierAccess, first_index: int, *values: int) -> TierAccess:
    """``access`` having recorded ``values`` as its blocks ``first_index`` on (as the CPU tier's
    store records them before the disk write)."""
    access.reserve(first_index + len(values))
    for n, key in enumerate(values):
        access.first_seen(first_index + n, key)
    return access


def test_private_blocks_are_held_unmapped_until_their_request_is_preempted() -> None:
    """A request's own blocks (the CPU tier's ``private_from`` on) are held and evicted in the
    same recency order as any block, but no lookup finds them until ``map_private`` (the
    CPU tier's rule, ``CpuTier.map_private``); one evicted meanwhile is not mapped."""
    disk = DiskTier(num_blocks=4)
    a = private(TierAccess(), 0, 1, 2, 3)
    disk.write(keys(1, 2, 3), 1.0, a, 1, 2)  # 1 shared; 2, 3 A's blocks 1-2, private
    assert disk.occupancy(1.0) == (3, 0, 1)  # held all the same
    assert disk.readable(1, 1.0)
    assert not disk.readable(2, 1.0)  # (unmapped)
    assert not disk.readable(3, 1.0)
    assert 2 in disk  # (a scan finds it: a query, not the engine's)
    assert disk.recency_order() == [1, 2, 3]
    disk.check_invariants(1.0)
    disk.write(keys(4, 5), 2.0)  # full: 4 evicts nothing (the free block), 5 evicts 1
    assert disk.recency_order() == [2, 3, 4, 5]
    disk.write(keys(6), 3.0)  # evicts 2, the least recent, private: no cell to remove
    assert disk.recency_order() == [3, 4, 5, 6]
    disk.check_invariants(3.0)
    disk.map_private(a)  # A preempted: 3 is mapped; 2's slot holds 6 now, not mapped again
    assert disk.readable(3, 3.0)
    assert not disk.readable(2, 3.0)
    assert disk.readable(6, 3.0)
    disk.check_invariants(3.0)
    # 6 blocks written, 2 evicted (1, 2), none read
    assert (disk.num_written_blocks, disk.num_evicted_blocks, disk.num_read_blocks) == (6, 2, 0)


class NaiveDisk:
    """The disk's rules by brute force: a list of held keys, least recent first, and each key's
    write end."""

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self.order: list[int] = []
        self.ready: dict[int, float] = {}

    def write(self, keys: list[int], ready_s: float) -> None:
        for key in keys:
            if key in self.ready:
                self.order.remove(key)
            else:
                if len(self.order) == self.num_blocks:
                    del self.ready[self.order.pop(0)]
                self.ready[key] = ready_s
            self.order.append(key)

    def read(self, keys: list[int]) -> None:
        for key in keys:
            self.order.remove(key)
            self.order.append(key)

    def readable(self, key: int, now_s: float, unmapped: set[int]) -> bool:
        return self.ready.get(key, np.inf) <= now_s and key not in unmapped

    def occupancy(self, now_s: float) -> tuple[int, int, int]:
        writing = sum(1 for ready_s in self.ready.values() if ready_s > now_s)
        return len(self.order) - writing, writing, self.num_blocks - len(self.order)


@pytest.mark.parametrize("num_blocks", [1, 7, 300])
def test_long_runs_match_the_naive_disk(rng: np.random.Generator, num_blocks: int) -> None:
    """150,000 blocks written in random batches of new and held keys, some ending in new
    private blocks of a request, with promotions read, requests preempted (their private
    blocks mapped) and the clock moving on between them (some writes ending before it):
    holdings, recency order, readability and occupancy stay ``NaiveDisk``'s (the key map
    grows, the settled writes are dropped many times over)."""
    disk, naive = DiskTier(num_blocks=num_blocks), NaiveDisk(num_blocks)
    now_s, ready_s, next_key, written = 0.0, 0.0, 1, 0
    unmapped: set[int] = set()  # private keys not mapped yet (held or not)
    requests: list[tuple[TierAccess, list[int]]] = []  # each access and its private keys
    while written < 150_000:
        op = rng.integers(0, 4)
        if op == 0:  # a write: new keys, and some held ones again, then new private ones
            batch = [next_key + n for n in range(int(rng.integers(1, 2 * num_blocks + 2)))]
            next_key += len(batch)
            held = [k for k in naive.order if k not in unmapped]  # (a private block is
            # written once, by its request, until mapped)
            if held:
                batch += [held[int(i)] for i in rng.integers(0, len(held), 2)]
            batch = list(dict.fromkeys(int(k) for k in rng.permutation(batch)))
            own = [next_key + n for n in range(int(rng.integers(0, num_blocks + 2)))]
            next_key += len(own)
            # (a third of the writes end before the clock: the engine stores a span's steps
            # after it ran them)
            ready_s = (ready_s if rng.random() < 0.3 else max(ready_s, now_s)) + float(
                rng.exponential(1.0)
            )
            access = private(TierAccess(), 3, *own)  # (its blocks 3.. are private)
            disk.write(keys(*batch, *own), ready_s, access, 3, len(own))
            naive.write(batch + own, ready_s)
            unmapped.update(own)
            requests.append((access, own))
            written += len(batch) + len(own)
        elif op == 3 and requests:  # a request preempted: its private blocks held are mapped
            access, own = requests.pop(int(rng.integers(0, len(requests))))
            disk.map_private(access)
            unmapped.difference_update(own)
        elif op == 1 and naive.order:  # a promotion of readable keys
            readable = [k for k in naive.order if naive.readable(k, now_s, unmapped)]
            picks = rng.integers(0, max(1, len(readable)), 3 if readable else 0)
            picked = list(dict.fromkeys(readable[int(i)] for i in picks))
            disk.read(keys(*picked))
            naive.read(picked)
        else:
            now_s += float(rng.exponential(1.5))
        probe = int(rng.integers(max(1, next_key - 3 * num_blocks), next_key + 1))
        assert (probe in disk) == (probe in naive.ready)
        assert disk.readable(probe, now_s) == naive.readable(probe, now_s, unmapped)
        assert disk.occupancy(now_s) == naive.occupancy(now_s)
        if rng.random() < 0.01:
            assert disk.recency_order() == naive.order
            disk.check_invariants(now_s)
    assert disk.recency_order() == naive.order
    disk.check_invariants(now_s)


def test_cascade_pins_the_cpu_blocks_until_the_disk_write_ends() -> None:
    """``complete_store`` cascades each stored block to the disk; the CPU copy is not
    evictable until that write ends."""
    pool, conn = parts()
    conn.store([doc(0, ("p", 32), computed=32)], 0.0)
    # p0, p1: GPU->CPU 2 MB, t=0 -> 0.002; then CPU->disk 2 MB at 0.5 GB/s, 0.002 -> 0.006
    assert conn.cpu_to_disk.busy_until_s == pytest.approx(0.006)
    assert conn.tier.occupancy(0.001) == (0, 2, 0, 0)  # (stored, storing, loading, free)
    assert conn.tier.occupancy(0.004) == (0, 0, 2, 0)  # read by the disk write
    p0 = pool.block_keys(doc(9, ("p", 32)), 0, 1)[0]
    assert conn.disk is not None
    assert not conn.disk.readable(p0, 0.004)
    assert conn.disk.readable(p0, 0.006)
    # a store at t=0.004 needs both slots; neither is evictable: refused, offered again later
    q = doc(1, ("q", 32), computed=32)
    conn.store([q], 0.004)
    assert conn.tier.num_stored_blocks == 2
    conn.store([q], 0.006)  # the write has ended: p0, p1 evicted, q0, q1 stored
    assert conn.tier.num_stored_blocks == 4
    assert conn.tier.num_evicted_blocks == 2
    conn.tier.check_invariants(0.006)


def test_a_disk_hit_after_the_cpu_copy_was_evicted_is_promoted_then_loaded() -> None:
    """A prefix whose CPU copies were evicted, found on the disk: the lookup promotes it
    (``HIT_PENDING``: the request waits), and once it lands it loads as a CPU hit."""
    pool, conn = parts()
    conn.store([doc(0, ("p", 32), computed=32)], 0.0)  # p0, p1: CPU by 0.002, disk by 0.006
    conn.store([doc(1, ("q", 32), computed=32)], 1.0)  # evicts p0, p1; q0, q1 stored
    # q0, q1: CPU by 1.002, disk 1.002 -> 1.006; q's request was ranked 2, so q0 is (2, -1)
    # and q1 (2, -2): q1 goes first
    new = doc(2, ("p", 32), ("z", 16))  # 3 full blocks: p0, p1 (on disk only), z0 (nowhere)
    conn.now_s = 2.0
    # CPU misses at block 0; the disk holds p0, p1 -> both promoted (evicting q1, then q0);
    # z0 ends the run. 2 MB disk->CPU at 0.25 GB/s: t=2.0 -> 2.008. The request waits.
    assert conn.matched_tokens(new, 0) is None
    assert conn.disk_to_cpu.num_bytes == 2 * MB
    assert conn.disk_to_cpu.busy_until_s == pytest.approx(2.008)
    assert conn.tier.occupancy(2.004) == (0, 2, 0, 0)  # p0, p1 storing (being promoted)
    assert conn.tier.num_evicted_blocks == 4  # p0, p1 at t=1; q1, q0 now
    conn.now_s = 2.004
    assert conn.matched_tokens(new, 0) is None  # still landing
    conn.now_s = 2.008
    assert conn.matched_tokens(new, 0) == 32  # p0, p1 in the CPU tier now
    assert pool.allocate(new, 32) is not None
    assert conn.start_load(new, 0, 32) == pytest.approx(2.010)  # 2 MB CPU->GPU at 1 GB/s
    assert conn.disk is not None
    # written: p0, p1, q0, q1; read: p0, p1; one promotion job
    assert (conn.disk.num_written_blocks, conn.disk.num_read_blocks) == (4, 2)
    assert conn.num_promotions == 1
    summary = conn.summary(conn.now_s)
    assert summary["kv_offload_bytes_cpu_to_disk"] == 4 * MB
    assert summary["kv_offload_bytes_disk_to_cpu"] == 2 * MB
    assert summary["kv_offload_time_disk_to_cpu_s"] == pytest.approx(0.008)


def test_a_preempted_request_finds_its_own_blocks_on_the_disk() -> None:
    """A request's private blocks reach the disk unmapped; preempted, its lookup maps them
    (``_access_of``) and promotes them with its shared block."""
    pool, conn = parts(num_cpu_blocks=3)
    a = doc(0, ("p", 48), computed=48)
    a.shared_tokens = 16  # p0 may be shared; p1, p2 are A's own
    conn.store([a], 0.0)  # CPU by 0.003 (3 MB at 1 GB/s); disk 0.003 -> 0.009 (0.5 GB/s)
    p0, p1 = pool.block_keys(a, 0, 2)
    assert conn.disk is not None
    assert conn.cpu_to_disk.busy_until_s == pytest.approx(0.009)
    assert conn.disk.readable(p0, 0.01)
    assert not conn.disk.readable(p1, 0.01)  # unmapped: nobody else can look it up
    conn.store([doc(1, ("q", 48), computed=48)], 1.0)  # evicts p2, p1, p0 from the CPU tier
    assert conn.tier.num_evicted_blocks == 3
    a.num_preemptions, a.num_computed_tokens = 1, 0
    conn.now_s = 2.0
    # the lookup maps A's blocks on both tiers, misses the CPU tier at block 0 and promotes
    # p0, p1, p2 from the disk (the CPU tier's 3 slots hold q's blocks, evictable by t=2):
    # 3 MB at 0.25 GB/s, t=2.0 -> 2.012; the request waits. (Unmapped, p1 would end the run
    # after p0: 1 MB.)
    assert conn.matched_tokens(a, 0) is None
    assert conn.disk_to_cpu.num_bytes == 3 * MB
    assert conn.disk_to_cpu.busy_until_s == pytest.approx(2.012)
    conn.disk.check_invariants(2.012)
    conn.tier.check_invariants(2.012)


def test_a_promotion_without_a_free_cpu_slot_is_a_miss() -> None:
    """``_initiate_promotion`` returns ``False`` when the CPU tier cannot make room: the lookup
    counts that block a miss, and the request is not delayed."""
    pool, conn = parts()
    conn.store([doc(0, ("p", 32), computed=32)], 0.0)
    conn.store([doc(1, ("q", 32), computed=32)], 1.0)  # p0, p1 on disk only
    q_keys = pool.block_keys(doc(9, ("q", 32)), 0, 2)
    conn.tier.prepare_load(q_keys, TierAccess(), 0)  # q0, q1 read by a load: not evictable
    conn.now_s = 2.0
    assert conn.matched_tokens(doc(2, ("p", 32), ("z", 16)), 0) == 0
    assert conn.num_promotions == 0
    assert conn.disk_to_cpu.num_bytes == 0
    conn.tier.complete_load(q_keys)
    conn.tier.check_invariants(2.0)


def test_a_cpu_hit_run_goes_on_into_the_disk() -> None:
    """The lookup counts the CPU tier's run, then asks the disk for the blocks after it; a
    promotion evicts by rank like any store, but not the run's own CPU blocks."""
    _pool, conn = parts(num_cpu_blocks=3)
    conn.store([doc(0, ("p", 48), computed=48)], 0.0)  # p0, p1, p2: CPU by 0.003, disk by 0.009
    # request 0 is rank 1: p0 (1, -1), p1 (1, -2), p2 (1, -3); q0 takes p2's slot, q0 (2, -1)
    conn.store([doc(1, ("q", 16), computed=16)], 1.0)
    new = doc(2, ("p", 48), ("z", 16))
    conn.now_s = 2.0
    # CPU run p0, p1; p2 promoted (1 MB, 4 ms: lands 2.004), evicting q0: p1 (1, -2) ranks
    # lower, but the run holds it (vLLM would evict p1 and promote it again next step)
    assert conn.matched_tokens(new, 0) is None
    assert conn.tier.num_evicted_blocks == 2  # p2 at t=1, q0 now
    conn.now_s = 2.004
    assert conn.matched_tokens(new, 0) == 48  # p0, p1, p2; z0 is nowhere
    assert conn.num_promotions == 1
    assert conn.disk_to_cpu.num_bytes == MB
    conn.tier.check_invariants(2.004)


def test_a_cpu_tier_smaller_than_the_run_loads_what_it_holds() -> None:
    """Two CPU blocks, a run of three on the disk: the run settles at what the CPU tier can
    hold rather than promoting back and forth (each promotion evicting the block the last one
    brought in, as vLLM's unpinned lookup would, for ever)."""
    _pool, conn = parts(num_cpu_blocks=2)
    p = doc(0, ("p", 48), computed=32)
    conn.store([p], 0.0)  # p0 (1, -1), p1 (1, -2): CPU by 0.002, disk by 0.006
    p.num_computed_tokens = 48
    conn.store([p], 1.0)  # p2 evicts the least, p1; p2 (1, -3) on disk by 1.003
    new = doc(1, ("p", 48), ("z", 16))
    conn.now_s = 2.0
    # CPU run p0; p1 from the disk, evicting p2 (p0 is the run's); p2 then finds no slot (p0
    # shielded, p1 landing): the run stops there. p1 lands at 2.004.
    assert conn.matched_tokens(new, 0) is None
    conn.now_s = 2.004
    # p0, p1 held; p2 finds no slot (both are the run's): 2 blocks, 32 tokens
    assert conn.matched_tokens(new, 0) == 32
    assert conn.num_promotions == 1
    conn.tier.check_invariants(2.004)


def test_a_run_on_the_disk_longer_than_the_cpu_room_promotes_what_fits() -> None:
    """Three blocks only the disk holds and room for two in the CPU tier: the first two are
    promoted, the third is a miss that ends the run; once they land, the run's own two CPU
    blocks are not evicted for the third."""
    _pool, conn = parts(num_cpu_blocks=2)
    p = doc(0, ("p", 48), computed=32)
    conn.store([p], 0.0)  # p0 (1, -1), p1 (1, -2): CPU by 0.002, disk by 0.006
    p.num_computed_tokens = 48
    conn.store([p], 1.0)  # p2 (1, -3) evicts the least, p1; on disk by 1.003
    conn.store([doc(1, ("q", 32), computed=32)], 1.5)  # q0, q1 (2, -1), (2, -2) evict p2, p0
    assert conn.tier.num_evicted_blocks == 3
    new = doc(2, ("p", 48), ("z", 16))  # p0, p1, p2 on the disk only; z0 nowhere
    conn.now_s = 2.0
    # no CPU run; room for 2 (q0, q1 evictable): p0, p1 promoted (evicting q1, then q0), p2
    # finds no slot and ends the run. 2 MB disk->CPU at 0.25 GB/s: lands at 2.008
    assert conn.matched_tokens(new, 0) is None
    assert conn.tier.num_evicted_blocks == 5
    # p0, p1 recorded as promoted, p2 as the miss (vLLM's ``prepare_store`` records a
    # key's access before it finds no room: ``cpu/manager.py``): blocks 0-2, span 3
    assert conn._access[new.req_id].span == 3
    assert conn.disk_to_cpu.num_bytes == 2 * MB
    assert conn.disk_to_cpu.busy_until_s == pytest.approx(2.008)
    assert conn.tier.occupancy(2.004) == (0, 2, 0, 0)  # p0, p1 storing (being promoted)
    conn.now_s = 2.008
    # CPU run p0, p1; p2 finds no slot: the only evictable blocks are the run's own
    assert conn.matched_tokens(new, 0) == 32
    assert conn.num_promotions == 1
    assert conn.disk is not None
    assert conn.disk.num_read_blocks == 2
    conn.tier.check_invariants(2.008)


def test_disk_tier_size_and_validation() -> None:
    """``disk_offloading_size`` GiB over the GPUs, in blocks of the GPU's block size; a disk
    needs a CPU tier above it."""
    base = {
        "model": "llama-3.1-8b",  # 128 KiB a token: a 16-token block is 2 MiB
        "gpu": "h100-80gb",
        "cache": {"enable_prefix_caching": True},
        "offload": {"kv_offloading_size": 8, "disk_offloading_size": 1},
    }
    assert disk_tier_blocks(config_from_dict(base)) == 512  # 1 GiB / 2 MiB
    with pytest.raises(ValueError, match="needs a CPU tier above it"):
        config_from_dict({**base, "offload": {"disk_offloading_size": 1}})
    off = config_from_dict({**base, "offload": {"kv_offloading_size": 8}})
    assert "disk_offloading_size" not in off.model_dump()["offload"]  # (the hash is unchanged)

    # a sweep's "off" point (0 GiB) is one run whatever drive its axis names: the same key;
    # with a disk the drive is part of the run
    def drive(gib: float, bandwidth: float) -> str:
        offload = {
            "kv_offloading_size": 8,
            "disk_offloading_size": gib,
            "disk_read_bandwidth_bytes_per_s": bandwidth,
            "disk_write_bandwidth_bytes_per_s": bandwidth,
        }
        return config_from_dict({**base, "offload": offload}).key()

    assert drive(0, 3.2e9) == drive(0, 12.8e9)
    assert drive(1, 3.2e9) != drive(1, 12.8e9)


def test_two_requests_waiting_on_promotions_both_finish() -> None:
    """A case the property test found: two waiting requests whose runs do not fit a 5-block CPU
    tier together. Under vLLM's rule each one's promotion evicts what the other's last one
    brought in, and neither ever loads (in kvsim it promoted 50,000 times by t = 100 s with
    nothing running); a request waiting on its promotions keeps its run, so both finish (all
    eleven requests by t = 2 s)."""
    import simpy

    from kvsim.config.sim import config_from_dict
    from kvsim.engine.loop import Engine
    from kvsim.workload.tokens import note_shared_tokens

    block = 16 * 819_200  # OPT-13B
    spec = [
        (0.01, 68, 15, (("p", 64), ("own0", 4))),
        (0.06, 140, 12, (("q", 112), ("own1", 28))),
        (0.06, 72, 10, (("p", 64), ("own2", 8))),
        (0.11, 17, 6, (("own3", 17),)),
        (0.12, 77, 9, (("q", 64), ("own4", 13))),
        (0.12, 180, 9, (("q", 160), ("own5", 20))),
        (0.12, 15, 6, (("own6", 15),)),
        (0.12, 64, 8, (("r", 40), ("own7", 24))),
        (0.17, 188, 5, (("q", 160), ("own8", 28))),
        (0.18, 174, 10, (("p", 160), ("own9", 14))),
        (0.68, 64, 7, (("r", 40), ("own10", 24))),
    ]
    requests = [
        Request(i, t, p, o, o, token_segments=segs) for i, (t, p, o, segs) in enumerate(spec)
    ]
    note_shared_tokens(requests)
    config = config_from_dict(
        {
            "model": "opt-13b",
            "gpu": "a100-40gb",
            "cache": {"kv_cache_bytes": 15 * block, "enable_prefix_caching": True},
            "scheduler": {"max_model_len": 208, "max_num_batched_tokens": 64, "max_num_seqs": 8},
            "offload": {
                "kv_offloading_size": 5 * block / 2**30,
                "link_bandwidth_bytes_per_s": 1e11,
                "disk_offloading_size": 60 * block / 2**30,
                "disk_read_bandwidth_bytes_per_s": 1e10,
                "disk_write_bandwidth_bytes_per_s": 1e10,
            },
            "debug_invariants": True,
        }
    )
    env = simpy.Environment()
    engine = Engine(env, config, requests)
    env.process(engine.engine_loop())
    env.run(until=2.0)
    assert engine.num_finished == len(requests)


def test_checking_invariants_changes_no_result() -> None:
    """``debug_invariants`` only checks: with disk writes slow enough to pin the CPU tier's
    blocks (0.1 GB/s) the results are the same with and without it (a check once settled the
    CPU tier's copies at the engine's clock ahead of the stores the engine then offered at
    earlier step ends)."""
    from kvsim import simulate

    base = {
        "model": "llama-3.1-8b",
        "gpu": "h100-80gb",
        "cache": {"kv_cache_gib": 4.0, "enable_prefix_caching": True},
        "scheduler": {"max_model_len": 8000},
        "workload": {"preset": "multi_turn_chat", "rate_per_s": 1.0, "num_requests": 120},
        "offload": {
            "kv_offloading_size": 2,
            "disk_offloading_size": 16,
            "disk_write_bandwidth_bytes_per_s": 1e8,
        },
    }
    plain = simulate(config_from_dict(base)).summary
    checked = simulate(config_from_dict({**base, "debug_invariants": True})).summary
    keys = ("disk_tier_promoted_blocks", "disk_tier_written_blocks", "kv_offload_loads")
    assert plain["disk_tier_promoted_blocks"] > 0
    assert [plain[k] for k in keys] == [checked[k] for k in keys]
    assert plain["time_to_first_token_seconds_mean"] == checked["time_to_first_token_seconds_mean"]


def test_a_hit_counts_as_from_the_disk_only_for_the_request_it_was_promoted_for() -> None:
    """vLLM 0.34.0 ``TieringOffloadingManager.get_load_source``: a block promoted from the disk
    for a request is a ``disk`` hit when that request loads it, a ``host`` hit for any other
    request loading it from the CPU tier afterwards."""
    pool, conn = parts(num_cpu_blocks=4)
    conn.store([doc(0, ("p", 32), computed=32)], 0.0)  # p0, p1: CPU by 0.002, disk by 0.006
    # q's 3 blocks need 3 of the 4 slots, 2 free: one eviction, p1 (request 0 is running, so
    # its blocks rank (r, -position) and the tail goes first); p0 stays in the CPU tier
    conn.store([doc(1, ("q", 48), computed=48)], 1.0)
    first = doc(2, ("p", 32), ("z", 16))
    conn.now_s = 2.0
    assert conn.matched_tokens(first, 0) is None  # p0 held, p1 promoted from the disk
    conn.now_s = 2.1  # (2 MB at 0.25 GB/s: landed by 2.008)
    assert conn.matched_tokens(first, 0) == 32
    assert pool.allocate(first, 32) is not None
    conn.start_load(first, 0, 32)
    conn.finish_load(first)
    second = doc(3, ("p", 32), ("y", 16))  # the same two blocks, now in the CPU tier
    conn.now_s = 3.0
    assert conn.matched_tokens(second, 0) == 32
    assert pool.allocate(second, 32) is not None
    conn.start_load(second, 0, 32)
    summary = conn.summary(conn.now_s)
    # 32 tokens each; from the disk only p1 for the first request (16 tokens): p0 was in the
    # CPU tier, and the second request loads p1 from the CPU tier after it landed
    assert summary["external_prefix_cache_hits"] == 64
    assert summary["external_prefix_cache_hits_disk"] == 16
