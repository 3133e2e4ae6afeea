"""A sweep point is the config and every file it reads: a length table, calibration table, price
table or tokenizer edited between two sweeps makes its points new ones (run again), as a trace
file's does, rather than resumed with the old file's results."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvsim.config import config_from_dict
from kvsim.study.experiment import parse_experiment
from kvsim.study.load import load_sweep
from kvsim.study.sweep import run_sweep

CALIBRATION = Path(__file__).parents[2] / "kvsim" / "data" / "calibration" / "h200.csv"


def _length_table(path: Path, prompt: int) -> Path:
    # one bin: every prompt exactly ``prompt`` tokens, every output 4 (all quantiles equal)
    path.write_text(f"bin,side,q0,q1\n0,prompt,{prompt},{prompt}\n0,output,4,4\n")
    return path


def test_an_edited_length_table_runs_its_points_again(tmp_path: Path, base_table) -> None:
    table = _length_table(tmp_path / "lengths.csv", 10)
    workload = {"lengths": "table", "length_table": str(table), "num_requests": 5}
    experiment = parse_experiment(
        {
            "name": "lt",
            "base": {**base_table, "workload": workload},
            "grid": {"cache.block_size_tokens": [16]},
        },
        name="lt",
    )
    first = run_sweep(experiment, tmp_path / "out", progress=False)
    assert (first.num_run, first.num_skipped) == (1, 0)
    # 5 requests x 10 prompt tokens
    assert load_sweep(tmp_path / "out" / "lt").summary["prompt_tokens_total"].tolist() == [50]
    _length_table(table, 1000)
    again = run_sweep(experiment, tmp_path / "out", progress=False)
    assert (again.num_run, again.num_skipped) == (1, 0)  # a new point, not the old one resumed
    summary = load_sweep(tmp_path / "out" / "lt").summary
    assert 5_000 in summary["prompt_tokens_total"].tolist()  # 5 x 1,000


def _with_file(kind: str, path: Path) -> dict[str, object]:
    """A config that reads ``path`` as a file of ``kind``."""
    if kind == "length_table":
        return {"workload": {"lengths": "table", "length_table": str(path)}}
    if kind == "calibration":
        return {"cost": {"calibration": str(path)}}
    if kind == "tokenizer":  # (a trace it counts; neither file is read to make the key)
        trace = path.parent / "conversations.json"
        trace.write_text("[]")
        return {"workload": {"trace": str(trace), "tokenizer": str(path)}}
    return {"pricing": {"table": str(path)}}


@pytest.mark.parametrize("kind", ["length_table", "calibration", "pricing", "tokenizer"])
def test_a_configs_key_follows_its_files_contents(kind: str, tmp_path: Path) -> None:
    path = tmp_path / {"pricing": "f.toml", "tokenizer": "tokenizer.json"}.get(kind, "f.csv")
    if kind == "tokenizer":
        path.write_text('{"version": "1.0", "model": {"vocab": {"a": 2.0}}}')
    elif kind == "length_table":
        _length_table(path, 10)
    elif kind == "calibration":
        path.write_text(CALIBRATION.read_text())
    else:
        path.write_text('[a100-40gb]\nusd_per_gpu_hour = 2.0\nsource = "test"\ndate = "2026"\n')
    key = config_from_dict(_with_file(kind, path)).key()
    assert config_from_dict(_with_file(kind, path)).key() == key  # the same bytes: the same
    text = path.read_text()
    edited = text.replace("0,prompt,10,10", "0,prompt,11,11").replace("2.0", "3.0")
    if kind == "calibration":  # one more comment line: other bytes, the same table
        edited = "# edited\n" + text
    path.write_text(edited)
    assert config_from_dict(_with_file(kind, path)).key() != key
    path.write_text(text)  # back to the first bytes (a newer modification time): the first key
    assert config_from_dict(_with_file(kind, path)).key() == key
