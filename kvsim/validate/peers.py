"""Other simulators' errors on the same measured runs, to set kvsim's beside.

- ``h100/peer_errors.csv`` (inference-sim/sim-to-real-accuracy-validation @ 9bcf939): BLIS
  (``blis-roofline``; ``blis-evolved``, trained) and LLMServingSim against the measured aggregate
  (mean, p90, p99 of E2E, TTFT, ITL) per stage (``-1``: the whole run), with the signed
  percentage error ``mpe``. An experiment there is the run here with the same model, tensor
  parallelism and workload whose measured mean E2E agrees (the check makes sure both measure
  the same run).
- ``rtx4090-llama-3.1-8b/llmservingsim_summary.txt``: LLMServingSim 2.0's own errors on that run
  (``Metric  vLLM  Sim  Diff%``; milliseconds).
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pandas as pd

from kvsim.base.textfile import read_text

PEER_COLUMNS = ("simulator", "stage", "metric", "statistic", "measured", "predicted", "error_pct")
_METRICS = {"e2e": "e2e_s", "ttft": "ttft_s", "itl": "tpot_s"}
_SUMMARY_METRICS = {"TTFT": "ttft_s", "TPOT": "tpot_s", "Latency": "e2e_s"}
_SUMMARY_STATS = {"Mean": "mean", "Median": "p50", "P90": "p90", "P99": "p99"}


def h100_peer_errors(
    path: Path, model: str, tp: int, workload: str, e2e_mean_s: float
) -> pd.DataFrame:
    """The peers' rows for one H100 experiment (``PEER_COLUMNS``; times in seconds), empty when
    none matches.

    Args:
        model: the Hugging Face id's last part (``CodeLlama-34b-Instruct-hf``).
        tp: tensor-parallel size.
        workload: ``general``, ``codegen``, ``roleplay`` or ``reasoning``.
        e2e_mean_s: the measured mean E2E of the whole run (seconds), to recognise it.

    Raises:
        ValueError: a malformed row (file, line and field named).
    """
    rows = []
    text = read_text(path)
    for line, row in enumerate(csv.DictReader(text.splitlines()), 2):
        if row.get("model", "").rsplit("/", 1)[-1] != model or row.get("workload") != workload:
            continue
        if _int(row, "tp", path, line) != tp:
            continue
        metric, _, stat = (row.get("metric_name") or "").partition("_")
        if metric not in _METRICS:
            continue
        rows.append(
            {
                "experiment_folder": row["experiment_folder"],
                "simulator": row["simulator"],
                "stage": _int(row, "stage_index", path, line),
                "metric": _METRICS[metric],
                "statistic": stat,
                "measured": _float(row, "actual", path, line) / 1e3,
                "predicted": _float(row, "predicted", path, line) / 1e3,
                "error_pct": _float(row, "mpe", path, line),
            }
        )
    frame = pd.DataFrame(rows, columns=["experiment_folder", *PEER_COLUMNS])
    whole = frame[
        (frame["stage"] == -1) & (frame["metric"] == "e2e_s") & (frame["statistic"] == "mean")
    ]
    same = whole[(whole["measured"] - e2e_mean_s).abs() <= 1e-3 * e2e_mean_s]["experiment_folder"]
    return frame[frame["experiment_folder"].isin(set(same))].reset_index(drop=True)


def llmservingsim_summary(path: Path) -> pd.DataFrame:
    """LLMServingSim's errors from its summary table (``PEER_COLUMNS``, stage ``-1``).

    Raises:
        ValueError: a line of the table that does not read (file and line named).
    """
    rows = []
    for line_number, line in enumerate(read_text(path).splitlines(), 1):
        match = re.match(
            r"^(TTFT|TPOT|Latency) (Mean|Median|P90|P95|P99)\s+(\S+)\s+(\S+)\s+(\S+)%$",
            line.strip(),
        )
        if match is None:
            continue
        metric, stat, measured, predicted, diff = match.groups()
        if stat not in _SUMMARY_STATS:
            continue
        try:
            values = [float(measured) / 1e3, float(predicted) / 1e3, float(diff)]
        except ValueError:
            raise ValueError(
                f"{path} line {line_number}: expected numbers, got {line.strip()!r}"
            ) from None
        rows.append(("llmservingsim", -1, _SUMMARY_METRICS[metric], _SUMMARY_STATS[stat], *values))
    return pd.DataFrame(rows, columns=list(PEER_COLUMNS))


def _int(row: dict[str, str], key: str, path: Path, line: int) -> int:
    try:
        return int(float(row[key]))
    except (KeyError, TypeError, ValueError):
        raise ValueError(
            f"{path} line {line}: {key} must be an integer, got {row.get(key)!r}"
        ) from None


def _float(row: dict[str, str], key: str, path: Path, line: int) -> float:
    try:
        return float(row[key])
    except (KeyError, TypeError, ValueError):
        raise ValueError(
            f"{path} line {line}: {key} must be a number, got {row.get(key)!r}"
        ) from None
