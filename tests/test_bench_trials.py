"""``make bench`` keeps each run's fastest trial (``benchmarks.bench.fastest_of``)."""

from __future__ import annotations

import pytest

from benchmarks.bench import fastest_of


def test_each_run_keeps_its_fastest_trial_and_the_ratio_of_the_minima() -> None:
    # paged 2.0, 1.5, 1.8 s -> 1.5; buddy 2.4, 3.3, 2.7 s -> 2.4; ratio 2.4 / 1.5 = 1.6, not
    # the 3.3 / 1.5 or 2.4 / 2.0 a mixed pick would give
    trials = [
        {"x_paged": {"cpu_s": 2.0, "n": 0}, "x_buddy": {"cpu_s": 2.4, "n": 0}},
        {"x_paged": {"cpu_s": 1.5, "n": 1}, "x_buddy": {"cpu_s": 3.3, "n": 1}},
        {"x_paged": {"cpu_s": 1.8, "n": 2}, "x_buddy": {"cpu_s": 2.7, "n": 2}},
    ]
    out = fastest_of(trials)
    assert out["x_paged"]["n"] == 1
    assert out["x_buddy"]["n"] == 0
    assert out["x_buddy"]["cpu_s_trials"] == [2.4, 3.3, 2.7]
    assert out["x_buddy"]["cpu_ratio_to_paged"] == pytest.approx(1.6)
    assert out["x_paged"]["cpu_ratio_to_paged"] == 1.0
    # each trial's own: 2.4 / 2.0, 3.3 / 1.5, 2.7 / 1.8
    assert out["x_buddy"]["cpu_ratio_trials"] == pytest.approx([1.2, 2.2, 1.5])
    assert out["x_paged"]["cpu_ratio_trials"] == [1.0, 1.0, 1.0]


def test_a_lone_run_gets_no_ratio() -> None:
    out = fastest_of([{"vidur_v1": {"cpu_s": 0.5}}, {"vidur_v1": {"cpu_s": 0.4}}])
    assert out["vidur_v1"]["cpu_s"] == 0.4
    assert "cpu_ratio_to_paged" not in out["vidur_v1"]
