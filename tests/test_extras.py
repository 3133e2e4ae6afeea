"""The core install (``pip install kvsim``) runs without the extras; a feature that needs one
says which, in one line.

The core checks run the CLI in a fresh interpreter whose imports of the extras' libraries fail,
as they would where they are not installed (a meta-path finder raises ``ModuleNotFoundError``
for them before any other finder looks).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from kvsim import config_from_dict, simulate
from kvsim.base import tablefile
from kvsim.base.extras import EXTRAS, MissingExtraError, require
from kvsim.results.tables import Results

ROOT = Path(__file__).resolve().parents[1]
# the extras' libraries and what they pull in (huggingface_hub comes with tokenizers)
BLOCKED = ("pyarrow", "scipy", "plotly", "tokenizers", "huggingface_hub", "dask", "distributed")

RUNNER = f"""
import importlib.abc, json, sys
BLOCKED = {BLOCKED!r}
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked)", name=name)
        return None
sys.meta_path.insert(0, Block())
from kvsim.cli import main
sys.argv = ["kvsim", *sys.argv[1:]]
try:
    main()
finally:
    loaded = sorted({{m.split(".")[0] for m in sys.modules}} & set(BLOCKED))
    print("LOADED " + json.dumps(loaded))
"""


def kvsim_without_extras(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "KVSIM_DATA": str(cwd / "no-data"),
        "MPLBACKEND": "Agg",
    }
    return subprocess.run(
        [sys.executable, "-c", RUNNER, *args], cwd=cwd, env=env, capture_output=True, text=True
    )


def test_every_extra_is_declared_in_pyproject() -> None:
    import tomllib

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    optional = declared["optional-dependencies"]
    assert set(EXTRAS) <= set(optional)
    assert optional["all"] == [f"kvsim[{','.join(EXTRAS)}]"]
    core = " ".join(declared["dependencies"])
    for module in BLOCKED:  # none of them (nor its package) is a core dependency
        assert module.replace("_", "-") not in core, module


def test_run_and_reproduce_fig2_need_no_extra(tmp_path: Path) -> None:
    run = kvsim_without_extras(tmp_path, "run", "--set", "workload.num_requests=40", "--out", "r")
    assert run.returncode == 0, run.stderr
    assert "token states" in run.stdout
    assert "LOADED []" in run.stdout
    # without pyarrow the tables are CSV, said once
    assert (tmp_path / "r" / "requests.csv").is_file()
    assert not (tmp_path / "r" / "requests.parquet").exists()
    assert run.stderr.count("pip install 'kvsim[parquet]'") == 1, run.stderr

    fig2 = kvsim_without_extras(tmp_path, "reproduce", "fig2", "--quick", "--out", "res")
    assert fig2.returncode == 0, fig2.stderr
    assert "LOADED []" in fig2.stdout
    folder = tmp_path / "res" / "quick" / "fig2"
    assert (folder / "fig2.png").stat().st_size > 10_000
    assert len(pd.read_csv(folder / "summary.csv")) == 4  # the four systems' quick points


def test_report_without_plotly_names_its_extra(tmp_path: Path) -> None:
    out = kvsim_without_extras(tmp_path, "report", "nowhere", "--out", "page.html")
    assert out.returncode == 2
    error = out.stderr.strip()
    assert error == (
        "error: kvsim report needs the 'report' extra: pip install 'kvsim[report]' "
        "(plotly is not installed)"
    ), error
    assert "Traceback" not in out.stderr


def test_require_names_the_extra_and_the_feature(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(EXTRAS, "fit", ("kvsim_no_such_module", "a test"))
    with pytest.raises(MissingExtraError) as caught:
        require("fit", "fitting x")
    assert str(caught.value) == (
        "fitting x needs the 'fit' extra: pip install 'kvsim[fit]' "
        "(kvsim_no_such_module is not installed)"
    )


def test_results_round_trip_through_csv_without_pyarrow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    results = simulate(config_from_dict({"workload": {"num_requests": 30}}), map_every_s=1.0)
    monkeypatch.setattr(tablefile, "has_extra", lambda extra: extra != "parquet")
    results.save(tmp_path / "run")
    assert sorted(p.name for p in (tmp_path / "run").glob("*.csv")) == [
        "frames.csv",
        "mapframes.csv",
        "memory.csv",
        "request_metrics.csv",
        "requests.csv",
    ]
    back = Results.load(tmp_path / "run")
    pd.testing.assert_frame_equal(back.requests, results.requests, check_dtype=False)
    pd.testing.assert_frame_equal(back.memory, results.memory, check_dtype=False)
    assert back.frames is not None
    assert results.frames is not None
    assert list(back.frames["waiting_req_ids"]) == [
        list(q) for q in results.frames["waiting_req_ids"]
    ]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["num_requests"] == 30
