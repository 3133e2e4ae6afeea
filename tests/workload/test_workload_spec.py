"""WorkloadSpec validation and TOML presets."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pydantic
import pytest

from kvsim.workload import WorkloadSpec, generate_requests, load_workload, workloads_dir

PRESETS = sorted(workloads_dir().glob("*.toml"))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"rate_per_s": -1}, r"rate_per_s\n.*greater than 0"),
        ({"rate_per_s": None}, r"rate_per_s \(requests/s\) is required for arrival='poisson'"),
        ({"arrival": "gamma", "rate_per_s": None}, r"required for arrival='gamma'"),
        ({"cv": 0}, r"cv\n.*greater than 0"),
        ({"time_scale": 0}, r"time_scale\n.*greater than 0"),
        ({"arrival": "bursty"}, r"arrival\n.*'poisson', 'gamma' or 'trace'"),
        ({"num_requests": 0}, r"num_requests\n.*greater than or equal to 1"),
        ({"overflow": "wrap"}, r"overflow\n.*'drop', 'truncate' or 'cut_output'"),
        ({"rate": 2.0}, r"rate\n.*Extra inputs are not permitted"),
        ({"lengths": "trace"}, r"lengths='trace' needs trace"),
        ({"trace": "azure_conv", "lengths": "fixed"}, r"trace='azure_conv' is set but lengths"),
        ({"arrival": "trace"}, r"arrival='trace' needs trace"),
        ({"trace": "azure_conv", "arrival": "trace", "sample": "resample"}, r"sample='replay'"),
        ({"start_s": 10.0}, r"start_s applies to arrival='trace' only"),
        ({"min_total_tokens": 500, "max_total_tokens": 400}, r"max_total_tokens must be >="),
    ],
)
def test_invalid_specs(kwargs: dict, match: str) -> None:
    with pytest.raises(pydantic.ValidationError, match=match):
        WorkloadSpec(**kwargs)


def test_spec_is_frozen_and_serialisable() -> None:
    spec = WorkloadSpec(rate_per_s=3.0)
    with pytest.raises(pydantic.ValidationError):
        spec.rate_per_s = 4.0  # type: ignore[misc]
    assert WorkloadSpec.model_validate(spec.model_dump()) == spec
    assert spec.length_source == "sharegpt_like"
    assert spec.sample_mode == "resample"
    trace_spec = WorkloadSpec(trace="azure_conv", arrival="trace")
    assert trace_spec.length_source == "trace"
    assert trace_spec.sample_mode == "replay"


def test_generate_rejects_bad_max_model_len() -> None:
    with pytest.raises(ValueError, match="max_model_len must be an integer >= 2"):
        generate_requests(WorkloadSpec(), np.random.default_rng(0), max_model_len=0)


@pytest.mark.parametrize("path", PRESETS, ids=[p.stem for p in PRESETS])
def test_presets_validate(path: Path) -> None:
    spec = load_workload(path)
    assert spec.name == path.stem


def test_expected_presets_exist() -> None:
    names = {p.stem for p in PRESETS}
    assert {
        "sharegpt_paper",
        "azure_conv",
        "azure_code",
        "mooncake_conversation",
        "alpaca_like",
    } <= names


def test_load_workload_by_name_with_overrides_and_table(tmp_path: Path) -> None:
    spec = load_workload("sharegpt_paper", rate_per_s=5.0)
    assert spec.rate_per_s == 5.0
    assert spec.min_prompt_tokens == 4
    nested = tmp_path / "nested.toml"
    nested.write_text('[workload]\nlengths = "fixed"\nrate_per_s = 3.0\n')
    assert load_workload(nested) == WorkloadSpec(lengths="fixed", rate_per_s=3.0)
    with pytest.raises(FileNotFoundError, match="no workload preset 'nope'"):
        load_workload("nope")


def test_preset_without_data_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVSIM_DATA", str(tmp_path))
    reqs = generate_requests(
        load_workload("sharegpt_paper"), np.random.default_rng(0), max_model_len=2048
    )
    assert len(reqs) == 1000
