"""The error table of ``make validate``: kvsim's errors on the held-out runs beside the peers'.

Held out: the validate split (3 H100 experiments) and the RTX 4090 run; kvsim's cost is the
fitted table shipped with it (``kvsim/data/cost_fit.toml``, fitted on the train split only).
The train runs' errors are shown apart (fitted on). Each error is the whole run's (every stage
together, the peers' stage ``-1``), signed, in percent of the measured value.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from kvsim.config import CostSpec, GpuSpec
from kvsim.config.cost_spec import cost_fit_table, fitted_values
from kvsim.validate.catalog import list_runs, load_run
from kvsim.validate.errors import ALL_STAGES, kv_usage_error, stage_errors
from kvsim.validate.peers import h100_peer_errors, llmservingsim_summary
from kvsim.validate.replay import Replay, replay_run
from kvsim.validate.rtx4090 import RTX4090_SUBDIR
from kvsim.validate.runs import MeasuredRun, real_vllm_dir

HEADLINE = (
    ("e2e_s", "mean"),
    ("e2e_s", "p90"),
    ("e2e_s", "p99"),
    ("ttft_s", "mean"),
    ("ttft_s", "p90"),
    ("ttft_s", "p99"),
)
PEERS = ("blis-roofline", "blis-evolved", "llmservingsim")
TARGETS = {  # (metric, statistic) -> the target for the median |error|, percent
    ("e2e_s", "mean"): 5.0,
    ("ttft_s", "mean"): 10.0,
    ("e2e_s", "p99"): 15.0,
    ("ttft_s", "p99"): 15.0,
}
KV_TARGET_POINTS = 3.0


@dataclass
class ErrorTable:
    """Everything ``make validate`` reports.

    Attributes:
        errors: kvsim's errors per run, stage, metric and statistic (``stage_errors``).
        headline: one row per (experiment, metric, statistic) of the whole run: kvsim's error
            and each peer's on the same experiment (NaN where it has none).
        kv: the RTX 4090 run's KV usage beside vLLM's (``kv_usage_error``), or ``None``.
        replays: the replays, by run name.
    """

    errors: pd.DataFrame
    headline: pd.DataFrame
    kv: dict[str, float] | None
    replays: dict[str, Replay]


def build_table(
    names: list[str] | None = None,
    *,
    cost: CostSpec | None = None,
    frontend_latency_s: float | None = None,
    root: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> ErrorTable:
    """Replay ``names`` (default: every run present) and set the errors beside the peers'."""
    root = real_vllm_dir() if root is None else root
    names = list(list_runs(root)) if names is None else names
    frames, rows, replays = [], [], {}
    kv = None
    for name in names:
        if progress is not None:
            progress(f"replaying {name}")
        run = load_run(name, root)
        replay = replay_run(run, cost, frontend_latency_s)
        replays[name] = replay
        errors = stage_errors(replay)
        frames.append(errors)
        rows.extend(_headline_rows(run, errors, _peer_rows(root, run, errors)))
        if replay.kv_usage is not None:
            kv = kv_usage_error(replay)
    errors = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return ErrorTable(errors, pd.DataFrame(rows), kv, replays)


def _peer_rows(root: Path, run: MeasuredRun, errors: pd.DataFrame) -> pd.DataFrame:
    if run.name == RTX4090_SUBDIR:
        path = root / RTX4090_SUBDIR / "llmservingsim_summary.txt"
        return llmservingsim_summary(path) if path.exists() else pd.DataFrame()
    path = root / "h100" / "peer_errors.csv"
    whole = errors[errors["stage"] == errors["stage"].min()]
    e2e = whole[(whole["metric"] == "e2e_s") & (whole["statistic"] == "mean")]["measured"]
    if not path.exists() or e2e.empty:
        return pd.DataFrame()
    workload = run.name.rsplit("-", 1)[-1]
    return h100_peer_errors(
        path, run.model.name, run.tensor_parallel_size, workload, float(e2e.iloc[0])
    )


def _headline_rows(
    run: MeasuredRun, errors: pd.DataFrame, peers: pd.DataFrame
) -> list[dict[str, object]]:
    whole_stage = ALL_STAGES if (errors["stage"] == ALL_STAGES).any() else 0
    whole = errors[errors["stage"] == whole_stage]
    rows = []
    for metric, name in HEADLINE:
        mine = whole[(whole["metric"] == metric) & (whole["statistic"] == name)]
        row: dict[str, object] = {
            "experiment": run.name,
            "split": run.split,
            "metric": metric,
            "statistic": name,
            "measured_s": float(mine["measured"].iloc[0]) if len(mine) else np.nan,
            "kvsim": float(mine["error_pct"].iloc[0]) if len(mine) else np.nan,
        }
        for peer in PEERS:
            found = pd.DataFrame()
            if len(peers):
                found = peers[
                    (peers["simulator"] == peer)
                    & (peers["stage"] == -1)
                    & (peers["metric"] == metric)
                    & (peers["statistic"] == name)
                ]
            row[peer] = float(found["error_pct"].iloc[0]) if len(found) else np.nan
        rows.append(row)
    return rows


def medians(headline: pd.DataFrame, splits: tuple[str, ...]) -> dict[tuple[str, str], float]:
    """Median |error| of each headline statistic over the runs of ``splits`` (kvsim's)."""
    part = headline[headline["split"].isin(splits)]
    return {
        (metric, name): float(
            part[(part["metric"] == metric) & (part["statistic"] == name)]["kvsim"].abs().median()
        )
        for metric, name in HEADLINE
    }


def efficiencies() -> pd.DataFrame:
    """Per GPU preset: the datasheet peaks and the fitted efficiencies (attained = peak x
    efficiency), and whether they were fitted on that GPU."""
    table = cost_fit_table()
    rows = []
    for name in ("h100-80gb", "rtx-4090"):
        gpu = GpuSpec.model_validate(name)
        values, source = fitted_values(name, table)
        rows.append(
            {
                "gpu": name,
                "hbm_peak_TBps": gpu.hbm_bandwidth_bytes_per_s / 1e12,
                "hbm_efficiency": float(values["hbm_efficiency"]),
                "hbm_attained_TBps": gpu.hbm_bandwidth_bytes_per_s
                * float(values["hbm_efficiency"])
                / 1e12,
                "fp16_peak_TFLOPs": gpu.fp16_flops_per_s / 1e12,
                "flops_efficiency": float(values["flops_efficiency"]),
                "fp16_attained_TFLOPs": gpu.fp16_flops_per_s
                * float(values["flops_efficiency"])
                / 1e12,
                "source": "FITTED on this GPU"
                if name in table.get("gpus", {})
                else source.split("; ")[-1],
            }
        )
    return pd.DataFrame(rows)
