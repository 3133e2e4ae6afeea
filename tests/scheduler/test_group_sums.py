"""The decode cohort's per-group sums (``kvsim.core.scheduler.group_sums``), worked by hand."""

from __future__ import annotations

from librt.vecs import vec
from mypy_extensions import i64

from kvsim.core.kv.base import DecodeGroups
from kvsim.core.scheduler.cohort import DecodeCohort
from kvsim.core.scheduler.group_sums import GroupSums
from kvsim.workload.request import Request


def test_members_slots_run_linearly_with_the_clock_between_touches():
    # two kinds: 1 full group and 3 sliding groups (kind_counts [1, 3])
    sums = GroupSums([1, 3])
    # member a, recorded at clock 10: full (held 64, tokens 50, outside 0, internal 0,
    # +1 token a step), sliding (held 32, tokens 18, outside 2, internal 0, +1 and +1)
    a = GroupSums.contribution(vec[i64]([64, 50, 0, 0, 1, 0, 32, 18, 2, 0, 1, 1]), 10)
    # member b, recorded at clock 12, its window not reached: outside stays 0
    b = GroupSums.contribution(vec[i64]([32, 20, 0, 5, 1, 0, 32, 20, 0, 5, 1, 0]), 12)
    sums.add(a)
    sums.add(b)
    # at clock 14: a is 4 steps on (tokens 54 and 22, outside 6), b 2 steps (22, 22, 0)
    assert sums.kind_totals(14) == [96, 54 + 22, 0, 5, 64, 22 + 22, 6, 5]
    # every group: held 96 + 3 x 64 = 288, tokens 76 + 3 x 44 = 208, internal 5 + 3 x 5 = 20
    assert sums.pool_totals(14) == (288, 208, 20)
    sums.add(a, -1)  # a leaves
    assert sums.kind_totals(12) == [32, 20, 0, 5, 32, 20, 0, 5]
    sums.add(b, -1)
    assert list(sums.sums) == [0] * 12


def test_a_pooled_members_group_slots_change_by_residue_as_worked_by_hand():
    # One full and one sliding group (W = 40), blocks of 16; request F = 41 + 60 - 1 = 100.
    # It joins at clock 0 having computed 50 tokens (10 sampled): its step at clock c computes
    # token 50 + c. Crossings (50 + c = 64, 80, 96): clocks 14, 30, 46, one block per group.
    # Window: block i leaves it once 50 + c - 40 + 1 >= 16 (i + 1): clocks 5, 21, 37.
    # Its last block (tokens 96..111) comes at clock 46: 112 - 100 = 12 slots of internal
    # fragmentation in each group from then on.
    groups = DecodeGroups(2, 39 % 16, [1, 1], False, 1, ["full", "sliding"], 40)
    cohort = DecodeCohort(16, caching=False, pooled=True, groups=groups)
    request = Request(0, 0.0, 41, 60, 60)
    request.num_held_slots = 2 * 64  # (its 4 blocks in each group, as the pool counts them)
    member = cohort.join(request, 0, 0, 50, 10)
    assert member.pooled
    # its slots in the step before its first (computed 49, 50 tokens): full held 64, tokens
    # 50; sliding the same, 49 - 40 + 1 = 10 tokens outside the window, growing by one a step
    cohort.set_group_slots(member, vec[i64]([64, 50, 0, 0, 1, 0, 64, 50, 10, 0, 1, 1]), 0)
    cohort.schedule_window(member, 0)
    steps = {clock: cohort.group_step(clock) for clock in range(47)}
    assert {c: s for c, s in steps.items() if s != (0, 0)} == {
        5: (0, 1),
        14: (2, 0),
        21: (0, 1),
        30: (2, 0),
        37: (0, 1),
        46: (2, 0),
    }
    assert cohort.groups is not None
    # after clock 5's step (recorded at 6): the sliding group's first block (tokens 0..15) is
    # gone: 48 held, 56 - 16 = 40 tokens, 55 - 40 + 1 - 16 = 0 outside
    # after clock 46's step (recorded at 47): 97 tokens, 7 blocks (112 slots) a group; the
    # sliding group has freed 3 blocks (48 slots): held 64, tokens 49, outside
    # 96 - 40 + 1 - 48 = 9; internal 12 in each
    assert cohort.groups.kind_totals(47) == [112, 97, 0, 12, 64, 49, 9, 12]
    assert cohort.sum_held == 112 + 64


def test_a_pooled_members_outside_window_slots_start_growing_where_its_window_is_reached():
    # As above (W = 40, B = 16), a request of F = 11 + 60 - 1 = 70 joining at clock 0 with 20
    # tokens computed: its first needed token, 20 + c - 40 + 1, reaches its first held
    # position 0 at clock 19, its outside-window slots grow from there, and its window frees
    # block 0 at clock 35 (20 + 35 - 39 = 16). Crossings at 20 + c = 32, 48, 64: 12, 28, 44.
    groups = DecodeGroups(2, 39 % 16, [1, 1], False, 1, ["full", "sliding"], 40)
    cohort = DecodeCohort(16, caching=False, pooled=True, groups=groups)
    request = Request(0, 0.0, 11, 60, 60)
    request.num_held_slots = 2 * 32
    member = cohort.join(request, 0, 0, 20, 10)
    # the step before its first: 20 tokens in 2 blocks a group, nothing outside, not growing
    cohort.set_group_slots(member, vec[i64]([32, 20, 0, 0, 1, 0, 32, 20, 0, 0, 1, 0]), 0)
    cohort.schedule_window(member, 0)
    assert cohort.groups is not None
    for clock in range(35):
        cohort.group_step(clock)
    # recorded at 35 (clock 34's step, 55 tokens): 4 blocks a group; 54 - 40 + 1 = 15 outside
    assert cohort.groups.kind_totals(35) == [64, 55, 0, 0, 64, 55, 15, 0]
    assert cohort.group_step(35) == (0, 1)
    # recorded at 36: block 0 freed: the sliding group holds 48, 56 - 16 = 40 tokens, none
    # outside (55 - 40 + 1 - 16)
    assert cohort.groups.kind_totals(36) == [64, 56, 0, 0, 48, 40, 0, 0]
    for clock in range(36, 45):
        cohort.group_step(clock)
    # recorded at 45: 65 tokens in 5 blocks (80 slots), 80 - 70 = 10 internal in each group
    assert cohort.groups.kind_totals(45) == [80, 65, 0, 10, 64, 49, 9, 10]
