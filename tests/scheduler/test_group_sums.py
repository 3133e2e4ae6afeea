"""The decode cohort's per-group sums (``kvsim.core.scheduler.group_sums``), worked by hand."""

from __future__ import annotations

from kvsim.core.scheduler.group_sums import GroupSums


def test_members_slots_run_linearly_with_the_clock_between_touches():
    # two kinds: 1 full group and 3 sliding groups (kind_counts [1, 3])
    sums = GroupSums([1, 3])
    # member a, recorded at clock 10: full (held 64, tokens 50, outside 0, internal 0,
    # +1 token a step), sliding (held 32, tokens 18, outside 2, internal 0, +1 and +1)
    a = GroupSums.contribution([64, 50, 0, 0, 1, 0, 32, 18, 2, 0, 1, 1], 10)
    # member b, recorded at clock 12, its window not reached: outside stays 0
    b = GroupSums.contribution([32, 20, 0, 5, 1, 0, 32, 20, 0, 5, 1, 0], 12)
    sums.add(a)
    sums.add(b)
    # at clock 14: a is 4 steps on (tokens 54 and 22, outside 6), b 2 steps (22, 22, 0)
    assert sums.kind_totals(14) == [96, 54 + 22, 0, 5, 64, 22 + 22, 6, 5]
    # every group: held 96 + 3 x 64 = 288, tokens 76 + 3 x 44 = 208, internal 5 + 3 x 5 = 20
    assert sums.pool_totals(14) == (288, 208, 20)
    sums.add(a, -1)  # a leaves
    assert sums.kind_totals(12) == [32, 20, 0, 5, 32, 20, 0, 5]
    sums.add(b, -1)
    assert sums.sums == [0] * 12
