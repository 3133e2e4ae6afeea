"""Grid and zip expansion, point keys, quick mode, presets and bad experiment files."""

from __future__ import annotations

import logging

import pytest

from kvsim.config import config_from_dict
from kvsim.study.experiment import load_experiment, parse_experiment


def test_grid_times_zip_in_order(make_experiment) -> None:
    exp = make_experiment(grid={"cache.block_size_tokens": [8, 16, 32], "seed": [0, 1]})
    points = exp.points()
    # 3 block sizes x 2 seeds x 2 zipped allocators = 12 points; grid axes in file order vary
    # slowest, the zip axis fastest.
    assert len(points) == 12
    assert [p.index for p in points] == list(range(12))
    assert points[0].overrides == {
        "cache.block_size_tokens": 8,
        "seed": 0,
        "cache.allocator": "first_fit",
    }
    assert points[1].overrides == {
        "cache.block_size_tokens": 8,
        "seed": 0,
        "cache.allocator": "paged",
    }
    assert points[2].overrides["seed"] == 1
    assert points[11].overrides == {
        "cache.block_size_tokens": 32,
        "seed": 1,
        "cache.allocator": "paged",
    }
    assert [p.label for p in points[:2]] == ["contiguous", "paged"]
    assert exp.swept_fields() == ["label", "cache.block_size_tokens", "seed", "cache.allocator"]


def test_key_is_the_canonical_config_key(tiny, base_table) -> None:
    point = tiny.points()[3]  # block 16, paged
    by_hand = config_from_dict(
        base_table, {"cache.block_size_tokens": 16, "cache.allocator": "paged"}
    )
    assert point.key == by_hand.key()
    assert point.config == by_hand
    # the label names the point but is not part of the config
    assert "label" not in point.config.canonical_json()


def test_keys_distinct_and_stable(tiny, make_experiment) -> None:
    keys = [p.key for p in tiny.points()]
    assert len(set(keys)) == 4
    assert keys == [p.key for p in make_experiment().points()]


def test_quick_mode_overrides_and_replaces_grid(make_experiment) -> None:
    exp = make_experiment(
        quick={"set": {"workload.num_requests": 3}, "grid": {"cache.block_size_tokens": [4]}}
    )
    points = exp.points(quick=True)
    assert len(points) == 2  # one block size x two allocators
    assert all(p.config.workload.num_requests == 3 for p in points)
    assert all(p.config.cache.block_size_tokens == 4 for p in points)
    assert len(exp.points()) == 4  # full mode untouched


def test_invalid_point_is_kept_with_its_error(make_experiment) -> None:
    exp = make_experiment(grid={"cache.block_size_tokens": [0, 16]})
    bad, _, good, _ = exp.points()
    assert bad.config is None
    assert bad.key is None
    assert "cache.block_size_tokens" in bad.error
    assert good.config is not None


def test_workload_preset_resolved_under_other_keys() -> None:
    exp = parse_experiment(
        {"base": {"workload": {"preset": "alpaca_like", "num_requests": 7}}}, name="p"
    )
    (point,) = exp.points()
    assert point.config.workload.lengths == "alpaca_like"  # from workloads/alpaca_like.toml
    assert point.config.workload.rate_per_s == 30.0  # from the preset
    assert point.config.workload.num_requests == 7  # the experiment's own key wins


def test_a_preset_read_once_per_expansion_gives_every_point_its_values(tmp_path) -> None:
    # the preset's table is cached for one expansion only: an edit shows at the next
    preset = tmp_path / "mine.toml"
    preset.write_text('[workload]\nlengths = "alpaca_like"\nrate_per_s = 3.0\nnum_requests = 9\n')
    exp = parse_experiment(
        {
            "base": {"workload": {"preset": str(preset)}},
            "grid": {"workload.rate_per_s": [1.0, 2.0], "seed": [1, 2]},
        },
        name="p",
    )
    points = exp.points()
    assert [p.config.workload.rate_per_s for p in points] == [1.0, 1.0, 2.0, 2.0]
    assert [p.config.seed for p in points] == [1, 2, 1, 2]
    assert {p.config.workload.num_requests for p in points} == {9}
    preset.write_text('[workload]\nlengths = "alpaca_like"\nnum_requests = 4\n')
    assert {p.config.workload.num_requests for p in exp.points()} == {4}  # read again next time


def test_a_swept_table_applies_before_the_fields_under_it() -> None:
    # a grid axis over workload presets after one over a workload field dropped the field
    exp = parse_experiment(
        {
            "base": {},
            "grid": {"workload.num_requests": [7], "workload": ["alpaca_like", "sharegpt_like"]},
        },
        name="p",
    )
    points = exp.points()
    assert [p.config.workload.lengths for p in points] == ["alpaca_like", "sharegpt_like"]
    assert [p.config.workload.num_requests for p in points] == [7, 7]


def test_an_axis_over_a_whole_table_says_which_base_fields_its_points_lose(caplog) -> None:
    # [base.workload] sets a preset and 20 requests; an axis of whole workload tables replaces
    # it in every point (they ran 1,000 and 2,000 requests, the presets' own), as --set does
    base = {"workload": {"preset": "sharegpt_like", "num_requests": 20, "rate_per_s": 2.0}}
    with caplog.at_level(logging.WARNING):
        parse_experiment({"base": base, "grid": {"workload": ["alpaca_like"]}}, name="a").points()
    assert (
        "grid: workload replaces [base.workload] in every point: its preset, num_requests, "
        "rate_per_s are not used"
    ) in caplog.text
    caplog.clear()
    # a field swept under it, or given by every table of the axis, is set again: not lost
    with caplog.at_level(logging.WARNING):
        parse_experiment(
            {
                "base": base,
                "grid": {"workload.num_requests": [5]},
                "zip": [{"workload": [{"preset": "alpaca_like"}, {"preset": "sharegpt_like"}]}],
            },
            name="b",
        ).points()
    assert "zip[0]: workload replaces [base.workload] in every point: its rate_per_s is not" in (
        caplog.text
    )
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # nothing in the base under the table: nothing lost
        parse_experiment({"base": {}, "grid": {"workload": ["alpaca_like"]}}, name="c").points()
    assert "replaces" not in caplog.text
    # a [quick] set keeps its field in quick runs only: the full run loses it all the same
    bursty = {"workload": {"preset": "sharegpt_like", "num_requests": 20, "cv": 2.0}}
    quick = parse_experiment(
        {
            "base": bursty,
            "grid": {"workload": ["alpaca_like"]},
            "quick": {"set": {"workload.num_requests": 10}},
        },
        name="d",
    )
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        quick.points()
    assert "every point: its preset, num_requests, cv are not used" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        quick.points(quick=True)
    assert "every quick point: its preset, cv are not used" in caplog.text


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"grid": {"seed": 3}}, r"grid\.seed: must be a non-empty list"),
        ({"zip": [{"seed": [1, 2], "cache.allocator": ["paged"]}]}, r"zip\[0\].*equal lengths"),
        ({"gird": {}}, r"unknown keys \['gird'\].*; did you mean 'grid'\?"),
    ],
)
def test_bad_experiment_files(data, match) -> None:
    with pytest.raises(ValueError, match=match):
        parse_experiment(data, name="bad")


def test_every_shipped_experiment_expands() -> None:
    from kvsim.workload import workloads_dir

    files = sorted((workloads_dir().parent / "experiments").glob("*.toml"))
    names = {f.stem for f in files}
    assert names >= {
        "fig2",
        "block-size",
        "kv-budget",
        "long-outputs",
        "parallel-sampling",
        "contiguous-default",
        "reservation-24gib",
        "traces",
    }
    for path in files:
        exp = load_experiment(path)
        for quick in (False, True):
            points = exp.points(quick=quick)
            assert points, path
            assert all(p.config is not None for p in points), (path, [p.error for p in points])
