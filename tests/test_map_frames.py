"""Memory-map frames show the pool and the queue at their own moment, worked by hand.

A frame at ``t`` shows the pool during the step in flight at ``t`` and the requests waiting then
(``kvsim.engine.loop``: ``_cut_span`` ends a span with that step; ``_capture_frames``)."""

from __future__ import annotations

from pathlib import Path

from kvsim.config import config_from_dict
from kvsim.engine import simulate

HEADER = "arrival_time_s,prompt_tokens,output_tokens\n"


def _run(tmp_path: Path, rows: str, moments: list[float], **scheduler: int):
    trace = tmp_path / "t.csv"
    trace.write_text(HEADER + rows)
    config = config_from_dict(
        {
            "model": "llama-3.1-8b",
            "gpu": "h100-80gb",
            "scheduler": scheduler,
            "workload": {"trace": str(trace), "arrival": "trace"},
        }
    )
    return simulate(config, map_at_s=moments)


def test_a_frame_at_a_spans_start_shows_its_first_step(tmp_path: Path) -> None:
    # one 23-token prompt, alone until 0.1 s: its prefill and decodes ran as one span, and the
    # frame at t = 0 showed the span's last step (23 + 15 decoded tokens in 3 blocks of 16).
    # At t = 0 the step in flight is the prefill: 23 tokens in cdiv(23, 16) = 2 blocks
    results = _run(tmp_path, "0,23,100\n0.1,100,10\n", [0.0])
    frame = results.mapframes[results.mapframes["frame"] == 0]
    assert frame["num_tokens"].sum() == 23
    assert frame["num_slots"].sum() == 32


def test_a_frames_queue_holds_the_requests_arrived_by_then(tmp_path: Path) -> None:
    # max_num_seqs = 1: request 0 (535 + 200 tokens) runs alone; 1-4 arrive at 0.01-0.04 s and
    # wait. Once one waits, arrivals no longer cut the decode span, so the frame at 0.05 s
    # showed the queue as planned (request 1 only); at 0.05 s all four have arrived and wait
    results = _run(
        tmp_path,
        "0,535,200\n0.01,100,10\n0.02,100,10\n0.03,100,10\n0.04,100,10\n",
        [0.05],
        max_num_seqs=1,
    )
    frame = results.frames.iloc[0]
    assert list(frame["waiting_req_ids"]) == [1, 2, 3, 4]
    assert frame["num_requests_waiting"] == 4
