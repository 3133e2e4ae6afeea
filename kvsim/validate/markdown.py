"""The error table as Markdown (``make validate`` writes it into ``docs/validate.md`` between two
marker lines, so the hand-written text around it stays).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from kvsim.validate.table import HEADLINE, KV_TARGET_POINTS, PEERS, TARGETS, ErrorTable, medians

BEGIN = "<!-- make validate: begin (generated; edit kvsim/validate/markdown.py instead) -->"
END = "<!-- make validate: end -->"
_PEER_NAMES = {
    "blis-roofline": "BLIS roofline",
    "blis-evolved": "BLIS trained",
    "llmservingsim": "LLMServingSim",
}
_STAT = {"mean": "mean", "p50": "p50", "p90": "p90", "p99": "p99"}
_METRIC = {"e2e_s": "E2E", "ttft_s": "TTFT", "tpot_s": "TPOT"}


def _pct(value: float) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value:+.1f}"


def held_out_markdown(table: ErrorTable, before: ErrorTable | None, command: str) -> str:
    """The held-out experiments: kvsim's error (and before the fit) beside each peer's."""
    head = table.headline
    held = head[head["split"].isin(("validate", "held-out"))]
    lines = [
        f"Produced by `{command}` (whole runs; signed error = (predicted - measured) / measured, "
        "percent; `–`: the peer has no number for that run).",
        "",
        "| experiment | split | statistic | measured (s) | kvsim | before | "
        + " | ".join(_PEER_NAMES[p] for p in PEERS)
        + " |",
        "|---|---|---|---|---|---|" + "---|" * len(PEERS),
    ]
    for _, row in held.iterrows():
        previous = _before(before, row)
        peers = " | ".join(_pct(row[p]) for p in PEERS)
        lines.append(
            f"| {_short(str(row['experiment']))} | {row['split']} | "
            f"{_METRIC[str(row['metric'])]} {_STAT[str(row['statistic'])]} | "
            f"{row['measured_s']:.4g} | **{_pct(row['kvsim'])}** | {_pct(previous)} | {peers} |"
        )
    lines += ["", _medians_line(table, before, ("validate", "held-out")), ""]
    if table.kv is not None:
        kv = table.kv
        lines.append(
            f"RTX 4090 KV usage over time beside vLLM's `kv_cache_pct` ({int(kv['num_samples'])} "
            f"one-second samples while requests were in the server): mean absolute difference "
            f"**{kv['kv_mean_abs_diff_points']:.2f} points** (target <= {KV_TARGET_POINTS:g}); "
            f"means {kv['kv_predicted_mean_pct']:.1f} % (kvsim) and "
            f"{kv['kv_measured_mean_pct']:.1f} % (vLLM)."
        )
    return "\n".join(lines)


def readme_markdown(table: ErrorTable, command: str) -> str:
    """The held-out runs in one row each (kvsim's signed error, percent, E2E and TTFT mean /
    p90 / p99, with BLIS trained's and LLMServingSim's mean where published), for the README."""
    head = table.headline
    held = head[head["split"].isin(("validate", "held-out"))]
    peers = ("blis-evolved", "llmservingsim")
    lines = [
        f"Error of kvsim's prediction against the measured run, percent (`{command}`; the step "
        "cost fitted on the train split only; the validate runs chose which of the train fits "
        "ships, the held-out runs took part in neither; peers' published errors on the same "
        "runs, `–` where none):",
        "",
        "| run | split | E2E mean | p90 | p99 | TTFT mean | p90 | p99 | "
        + " | ".join(f"{_PEER_NAMES[p]} E2E / TTFT mean" for p in peers)
        + " |",
        "|---|---|" + "---:|" * (len(HEADLINE) + len(peers)),
    ]

    def cell(group: pd.DataFrame, metric: str, stat: str, column: str) -> str:
        found = group[(group["metric"] == metric) & (group["statistic"] == stat)][column]
        return _pct(float(found.iloc[0])) if len(found) else "–"

    for name, group in held.groupby("experiment", sort=False):
        cells = [cell(group, m, s, "kvsim") for m, s in HEADLINE]
        cells += [
            f"{cell(group, 'e2e_s', 'mean', p)} / {cell(group, 'ttft_s', 'mean', p)}" for p in peers
        ]
        split = str(group["split"].iloc[0])
        lines.append(f"| {_short(str(name))} | {split} | " + " | ".join(cells) + " |")
    lines += ["", _medians_line(table, None, ("validate", "held-out"))]
    if table.kv is not None:
        lines += [
            "",
            f"KV usage over time on the RTX 4090 run beside vLLM's own `kv_cache_pct`: mean "
            f"absolute difference {table.kv['kv_mean_abs_diff_points']:.1f} points "
            f"[target <= {KV_TARGET_POINTS:g}: "
            f"{'met' if table.kv['kv_mean_abs_diff_points'] <= KV_TARGET_POINTS else 'missed'}].",
        ]
    return "\n".join(lines)


def train_markdown(table: ErrorTable) -> str:
    """The train runs (FITTED on them: not a measure of prediction), one row each."""
    head = table.headline
    train = head[head["split"] == "train"]
    if train.empty:
        return "No train runs were replayed."
    columns = [(m, s) for m, s in HEADLINE]
    lines = [
        "| experiment | " + " | ".join(f"{_METRIC[m]} {s}" for m, s in columns) + " |",
        "|---|" + "---|" * len(columns),
    ]
    for name, group in train.groupby("experiment", sort=False):
        cells = []
        for metric, stat in columns:
            found = group[(group["metric"] == metric) & (group["statistic"] == stat)]["kvsim"]
            cells.append(_pct(float(found.iloc[0])) if len(found) else "–")
        lines.append(f"| {_short(str(name))} | " + " | ".join(cells) + " |")
    lines += ["", _medians_line(table, None, ("train",))]
    return "\n".join(lines)


def efficiencies_markdown(frame: pd.DataFrame) -> str:
    """The per-GPU efficiencies beside the datasheet peaks."""
    lines = [
        "| GPU | HBM peak (TB/s) | HBM efficiency | attained (TB/s) | FP16 peak (TFLOP/s) | "
        "FLOP efficiency | attained (TFLOP/s) | where from |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for _, row in frame.iterrows():
        lines.append(
            f"| {row['gpu']} | {row['hbm_peak_TBps']:.3g} | {row['hbm_efficiency']:.3f} | "
            f"{row['hbm_attained_TBps']:.3g} | {row['fp16_peak_TFLOPs']:.4g} | "
            f"{row['flops_efficiency']:.3f} | {row['fp16_attained_TFLOPs']:.4g} | {row['source']} |"
        )
    return "\n".join(lines)


def markdown_text(path: Path, option: str) -> str:
    """The Markdown file ``path`` (given as ``option``) as text, ``""`` when missing, checked
    for the table's markers: none, or ``BEGIN`` once and then ``END`` once.

    Raises:
        ValueError: the file is not UTF-8 text, or its markers are not that pair (naming the
            option, the file and the lines)."""
    from kvsim.base.textfile import read_text

    if not path.exists():
        return ""
    try:
        old = read_text(path)
    except ValueError as err:
        raise ValueError(f"{option}: {err}") from None
    lines = old.splitlines()
    begins = [n for n, line in enumerate(lines, 1) if BEGIN in line]
    ends = [n for n, line in enumerate(lines, 1) if END in line]
    if not begins and not ends:
        return old
    if len(begins) != 1 or len(ends) != 1 or ends[0] < begins[0]:
        raise ValueError(
            f"{option}: {path} holds the table's markers at lines {begins or '-'} (begin) and "
            f"{ends or '-'} (end); expected one begin line, then one end line (or neither)"
        )
    return old


def write_between_markers(path: Path, text: str, option: str = "--docs") -> None:
    """Put ``text`` between ``BEGIN`` and ``END`` in ``path`` (appended with the markers when
    the file has none; the file is created when missing).

    Raises:
        ValueError: ``markdown_text``'s."""
    old = markdown_text(path, option)
    block = f"{BEGIN}\n{text.strip()}\n{END}"
    if BEGIN in old and END in old:
        head, rest = old.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        new = head + block + tail
    else:
        new = (old.rstrip() + "\n\n" if old else "") + block + "\n"
    path.write_text(new, encoding="utf-8")


def _medians_line(table: ErrorTable, before: ErrorTable | None, splits: tuple[str, ...]) -> str:
    found = medians(table.headline, splits)
    old = medians(before.headline, splits) if before is not None else None
    parts = []
    for key, value in found.items():
        target = TARGETS.get(key)
        label = f"{_METRIC[key[0]]} {key[1]}"
        text = f"{label} **{value:.1f} %**"
        if old is not None:
            text += f" (before {old[key]:.1f} %)"
        if target is not None:
            text += f" [target <= {target:g} %: {'met' if value <= target else 'not met'}]"
        parts.append(text)
    runs = table.headline[table.headline["split"].isin(splits)]["experiment"].nunique()
    return f"Median |error| over the {runs} runs: " + "; ".join(parts) + "."


def _before(before: ErrorTable | None, row: pd.Series) -> float:
    if before is None:
        return float("nan")
    head = before.headline
    found = head[
        (head["experiment"] == row["experiment"])
        & (head["metric"] == row["metric"])
        & (head["statistic"] == row["statistic"])
    ]["kvsim"]
    return float(found.iloc[0]) if len(found) else float("nan")


def _short(name: str) -> str:
    """An H100 experiment without its timestamp (``codellama-34b-tp2-codegen``)."""
    parts = name.split("-", 2)
    return parts[2] if len(parts) == 3 and parts[0].isdigit() and parts[1].isdigit() else name
