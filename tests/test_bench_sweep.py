"""The benchmark's ceiling probe: the loop does the arithmetic it claims, in either layout."""

from __future__ import annotations

from benchmarks.bench_sweep import spin, spin_iterations, time_spin_pair


def test_spin_sums_squares_mod_7() -> None:
    # squares mod 7 over one period of 7: 0 1 4 2 2 4 1, summing to 14
    assert spin(7) == 14
    assert spin(14) == 28
    assert spin(9) == 14 + 0 + 1


def test_the_pair_runs_in_one_process_or_two() -> None:
    iterations = spin_iterations(0.01)
    assert iterations >= 1
    assert time_spin_pair(iterations, 1) > 0
    assert time_spin_pair(iterations, 2) > 0
