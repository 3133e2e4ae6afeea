"""The report's data: run folders loaded, map frames on cells, series and ECDFs downsampled."""

from __future__ import annotations

import base64
import json
import zlib

import numpy as np
import pandas as pd
import pytest

from kvsim.view.report import write_report
from kvsim.view.report.data import (
    ecdf_points,
    load_run,
    load_runs,
    map_missing_reason,
    map_payload,
    memory_bins,
    pick,
)


def unblob(text: str, dtype: str, shape: tuple[int, int]) -> np.ndarray:
    return np.frombuffer(zlib.decompress(base64.b64decode(text)), dtype).reshape(shape)


def test_pick_keeps_ends_and_spacing() -> None:
    assert pick(5, 10).tolist() == [0, 1, 2, 3, 4]
    assert pick(11, 3).tolist() == [0, 5, 10]


def test_memory_bins_are_duration_weighted_means() -> None:
    # 4 events of 1 s, values 0/10/20/30, into 2 bins of 2 s: means 5 and 25
    memory = pd.DataFrame({"time_s": [0.0, 1.0, 2.0, 3.0], "duration_s": [1.0, 1.0, 1.0, 1.0]})
    for col in ("allocated", "token_states", "reservation", "internal_fragmentation"):
        memory[col] = [0.0, 10.0, 20.0, 30.0]
    memory["external_fragmentation"] = 0.0
    memory["free"] = 100.0 - memory["allocated"]
    binned = memory_bins(memory, max_points=2)
    assert binned["time_s"].tolist() == [0.0, 2.0]
    assert binned["allocated"].tolist() == [5.0, 25.0]
    assert binned["free"].tolist() == [95.0, 75.0]
    # a 3 s event and a 1 s one in the same bin weigh 3:1
    memory["duration_s"] = [3.0, 1.0, 0.0, 4.0]
    memory["time_s"] = [0.0, 3.0, 4.0, 4.0]
    binned = memory_bins(memory, max_points=2)
    assert binned["allocated"].tolist() == [2.5, 30.0]
    # short series pass through unchanged
    assert len(memory_bins(memory, max_points=10)) == 4


def test_ecdf_points_drop_missing_values() -> None:
    x, p = ecdf_points(pd.Series([3.0, 1.0, np.nan, 2.0]))
    assert x.tolist() == [1.0, 2.0, 3.0]
    assert p.tolist() == pytest.approx([1 / 3, 2 / 3, 1.0])
    x, p = ecdf_points(np.arange(100.0), max_points=3)
    assert x.tolist() == [0.0, 50.0, 99.0]
    assert p.tolist() == [0.01, 0.51, 1.0]


def test_map_payload_matches_the_frames(small_runs) -> None:
    for folder in small_runs:
        run = load_run(folder)
        mapframes, frames = run.results.mapframes, run.results.frames
        payload = map_payload(run, max_cells=500, max_frames=40)
        kept, cells = len(payload["frame"]), payload["num_cells"]
        assert kept == 40 < len(frames) == payload["num_frames_captured"]
        assert payload["frame"][0] == 0
        assert payload["frame"][-1] == len(frames) - 1
        assert cells <= 500
        assert payload["slots_per_cell"] * cells >= run.capacity_slots
        for key in ("live", "held", "hole"):
            assert unblob(payload[key], "u1", (kept, cells)).shape == (kept, cells)
        held = unblob(payload["held"], "u1", (kept, cells)).astype(int)
        owner = unblob(payload["owner"], "<i4", (kept, cells))
        assert ((owner >= 0) == (held > 0)).all()  # a cell has an owner iff something is held
        sums = mapframes.groupby("frame")["num_slots"].sum()
        tokens = mapframes.assign(n=np.minimum(mapframes["num_tokens"], mapframes["num_slots"]))
        live = tokens.groupby("frame")["n"].sum()
        for i, f in enumerate(payload["frame"]):
            assert payload["held_slots"][i] == sums.get(f, 0)
            assert payload["live_slots"][i] == live.get(f, 0)
            total = payload["held_slots"][i] + payload["hole_slots"][i] + payload["free_slots"][i]
            assert total == run.capacity_slots
            assert payload["time_s"][i] == frames["time_s"].iloc[f]
            waiting = list(frames["waiting_req_ids"].iloc[f])
            assert payload["waiting_ids"][i] == waiting[:48]
            assert payload["waiting"][i] == len(waiting)


def test_runs_without_a_map_say_why(small_runs, radix_run, tmp_path) -> None:
    assert map_missing_reason(load_run(small_runs[1])) is None
    assert "radix allocator has no physical memory map" in map_missing_reason(load_run(radix_run))
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("requests.parquet", "memory.parquet", "summary.json", "config.json"):
        (bare / name).write_bytes((small_runs[1] / name).read_bytes())
    assert "--map-frames" in map_missing_reason(load_run(bare))


def test_load_errors_name_the_folder(tmp_path) -> None:
    with pytest.raises(ValueError, match=r"RUN_DIR '.*nowhere': no such folder"):
        load_run(tmp_path / "nowhere")
    with pytest.raises(ValueError, match=r"holds no summary.json"):
        load_run(tmp_path)
    with pytest.raises(ValueError, match=r"at least one run folder"):
        write_report([], tmp_path / "r.html")


def test_clashing_folder_names_get_their_parent(small_runs, tmp_path) -> None:
    copy = tmp_path / "other" / small_runs[1].name
    copy.mkdir(parents=True)
    for f in small_runs[1].iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    names = [r.name for r in load_runs([small_runs[1], copy])]
    assert names == [f"{small_runs[1].parent.name}/paged", "other/paged"]


def test_page_embeds_parseable_json(small_runs, tmp_path) -> None:
    out = write_report(small_runs, tmp_path / "r.html")
    html = out.read_text()
    tag = '<script id="kvsim-data" type="application/json">'
    start = html.index(tag) + len(tag)
    data = json.loads(html[start : html.index("</script>", start)])
    assert [r["name"] for r in data["runs"]] == ["contiguous", "paged"]
    assert data["runs"][0]["summary"] == json.loads((small_runs[0] / "summary.json").read_text())


def test_a_run_past_saturation_says_so_on_the_page(tmp_path) -> None:
    # the summary's verdict was in the page's JSON only: the run's line now says it
    from kvsim.config import config_from_dict
    from kvsim.fleet import simulate
    from kvsim.view.report.build import describe

    fixed = {"lengths": "fixed", "fixed_prompt_tokens": 512, "fixed_output_tokens": 64}
    for rate, count, said in ((60.0, 3000, True), (1.0, 300, False)):
        workload = {**fixed, "rate_per_s": rate, "num_requests": count}
        simulate(config_from_dict({"workload": workload})).save(tmp_path / str(rate))
        line = describe(load_run(tmp_path / str(rate)))
        assert ("past saturation: its latencies grow" in line) is said, line


def test_a_fleet_run_is_drawn_as_its_first_replicas_pool_and_says_so(tmp_path) -> None:
    # the replicas' memory rows interleave in time, each row one replica's own pool: drawn as
    # one series they zigzagged back in time, under a title naming one pool and no replicas
    from kvsim.config import config_from_dict
    from kvsim.fleet import simulate
    from kvsim.view.report.build import describe

    config = config_from_dict({"workload": {"num_requests": 40}, "fleet": {"replicas": 3}})
    results = simulate(config)
    assert set(results.memory["replica"]) == {0, 1, 2}
    results.save(tmp_path / "fleet")
    run = load_run(tmp_path / "fleet")
    assert run.num_replicas == 3
    assert set(run.results.memory["replica"]) == {0}
    assert run.results.memory["time_s"].is_monotonic_increasing
    assert "a fleet of 3 replicas, each of this pool: the memory charts show the first" in (
        describe(run)
    )
    assert "A fleet of 3 replicas captures no memory-map frames" in map_missing_reason(run)
