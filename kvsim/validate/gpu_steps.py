"""``kvsim calibrate --fit-parts DIR``: the step cost held against steps timed on a GPU.

``DIR`` holds the files of ``kvsim calibrate --parts`` (``kvsim.calibrate.parts``). This module
fits the GPU-side free parameters of the step cost (``kvsim.core.cost``, the simulator's own
``StepCostModel``, all-reduces left out: one GPU) on the *train* steps, reports its error on the
*held-out* ones, and writes the fit (``results/calibration/<gpu>-steps.toml``, or ``--out``; the
shipped copy is ``kvsim/data/calibration/<gpu>-steps.toml``). The simulator does not apply it by
default (``docs/calibration.md`` says why); ``--set cost.hbm_efficiency=...`` and the rest run
with it:

- train: decode steps of 1, 32 and 128 sequences and prefill chunks of 128 and 2,048 tokens, of
  both ranks (``TRAIN_DECODE_BATCHES``, ``TRAIN_PREFILL_CHUNKS``); held out: every other step
  (decode batches 8, 64, 256; chunks of 512 and 8,192 tokens).
- candidates: the HBM and FLOP efficiencies with a per-layer time (``layer_overhead_s``) or with a
  per-step one (``step_overhead_s``, the form fitted on vLLM runs); the one with the smaller
  train error is written. The held-out error is never used to choose. The HBM efficiency is
  bounded by what the plain read reached (``attained["hbm_read"]``): a GEMM streams its weights
  no faster, and without the bound the per-layer time and the bandwidth trade off along a flat
  ridge (the two ranks read about the same bytes per layer).
- attained efficiencies straight from the microbenchmarks (no fit): a contiguous read and copy,
  the GEMMs, SDPA, the paged-attention kernel's contiguous layout.

The CPU-side per-step overhead (``step_overhead_s``, fitted on vLLM runs) is not measured here:
these steps run no scheduler. Numbers are relative errors ``predicted / measured - 1``. A step
the chosen fit misses by more than ``SUSPECT_ERROR`` (half its measured time) is warned about with
its line: a mistyped or disturbed measurement is said, not fitted silently.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import tomli_w

from kvsim.base.extras import require
from kvsim.calibrate.table import CalibrationTable, analytic_layout_factor
from kvsim.config import CostSpec, GpuSpec, ModelSpec, ParallelConfig
from kvsim.config.cost_spec import cost_fit_table
from kvsim.core.cost import StepCostModel
from kvsim.validate.parts_files import Parts, line_of, rank_of, read_parts

logger = logging.getLogger(__name__)

TRAIN_DECODE_BATCHES = (1, 32, 128)
TRAIN_PREFILL_CHUNKS = (128, 2048)
COMMAND = "kvsim calibrate --fit-parts"
SUSPECT_ERROR = 0.5  # |predicted / measured - 1| past which a step is warned about
# candidate -> the CostSpec fields it fits (the other GPU-side ones held at 0)
CANDIDATES: dict[str, tuple[str, ...]] = {
    "per-layer overhead": ("hbm_efficiency", "flops_efficiency", "layer_overhead_s"),
    "per-step overhead": ("hbm_efficiency", "flops_efficiency", "step_overhead_s"),
}
_START = {
    "hbm_efficiency": 0.8,
    "flops_efficiency": 0.7,
    "layer_overhead_s": 3e-5,
    "step_overhead_s": 1e-3,
}
_BOUNDS = {
    "hbm_efficiency": (0.05, 1.0),
    "flops_efficiency": (0.05, 1.0),
    "layer_overhead_s": (0.0, 1e-3),
    "step_overhead_s": (0.0, 0.05),
}


def predict_steps(steps: pd.DataFrame, gpu: GpuSpec, values: dict[str, float]) -> np.ndarray:
    """The cost model's duration (seconds) of each synthetic step, all-reduces left out.

    A decode step of ``b`` sequences over ``L`` tokens is ``b`` chunks ``(1, L - 1)``; a prefill
    chunk of ``c`` tokens is ``(c, 0)``; the KV layout is contiguous (as timed).
    """
    fields: dict[str, float] = dict.fromkeys(_START, 0.0) | values
    cost = CostSpec.model_validate(
        fields
        | {
            "per_seq_overhead_s": 0.0,
            "link_efficiency": 1.0,
            "allreduce_latency_s": 0.0,
            "allreduce_latency_per_peer_s": 0.0,
        }
    )
    models: dict[str, StepCostModel] = {}
    out = np.empty(len(steps))
    for i, row in enumerate(steps.itertuples(index=False)):
        if row.model not in models:
            preset, tp = rank_of(str(row.model))
            models[row.model] = StepCostModel(
                ModelSpec.model_validate(preset),
                gpu,
                cost,
                paged=False,
                parallel=ParallelConfig(tensor_parallel_size=tp),
            )
        model = models[row.model]
        batch, ctx = int(row.batch), int(row.context_tokens)
        if row.phase == "decode":
            chunks = [(1, ctx - 1)] * batch
        else:
            chunks = [(int(row.query_tokens), ctx - int(row.query_tokens))] * batch
        new = sum(c for c, _ in chunks)
        out[i] = model.step_duration_s(chunks) - model.communication_s(new)
    return out


def is_train(steps: pd.DataFrame) -> np.ndarray:
    """The train rule (module docstring), one bool per step."""
    decode = (steps.phase == "decode") & steps.batch.isin(TRAIN_DECODE_BATCHES)
    prefill = (steps.phase == "prefill") & steps.query_tokens.isin(TRAIN_PREFILL_CHUNKS)
    return np.asarray(decode | prefill)


@dataclass(frozen=True)
class StepFit:
    """One candidate's fit: its values, and the relative error of every step (train and not)."""

    label: str
    values: dict[str, float]
    errors: np.ndarray
    train: np.ndarray

    def summary(self, train: bool) -> dict[str, float]:
        """Median and largest |error| in %, and the share within 5 %, of one split."""
        e = np.abs(self.errors[self.train == train])
        return {
            "points": int(e.size),
            "median_abs_pct": float(np.median(e) * 100),
            "max_abs_pct": float(e.max() * 100),
            "within_5_pct": float(np.mean(e <= 0.05)),
        }


def fit_steps(
    steps: pd.DataFrame, gpu: GpuSpec, free: Sequence[str], label: str, hbm_cap: float = 1.0
) -> StepFit:
    """Least squares of the train steps' relative errors over the ``free`` fields, the HBM
    efficiency at most ``hbm_cap`` (what a plain read reached: a GEMM streams no faster).

    Raises:
        ValueError: no train step or no held-out step (the rule of the module docstring).
    """
    require("fit", "kvsim calibrate --fit-parts")  # (a clear error where scipy is missing)
    from scipy.optimize import least_squares

    train = is_train(steps)
    if train.all() or not train.any():
        raise ValueError(
            f"steps.csv: {'no held-out' if train.all() else 'no train'} step (train: decode "
            f"batches {list(TRAIN_DECODE_BATCHES)}, prefill chunks {list(TRAIN_PREFILL_CHUNKS)})"
        )
    measured = steps.seconds.to_numpy(float)

    def errors(x: np.ndarray, mask: np.ndarray | slice) -> np.ndarray:
        predicted = predict_steps(steps[mask], gpu, dict(zip(free, map(float, x), strict=True)))
        return np.asarray(predicted / measured[mask] - 1.0)

    bounds = {**_BOUNDS, "hbm_efficiency": (_BOUNDS["hbm_efficiency"][0], min(1.0, hbm_cap))}
    lower, upper = zip(*(bounds[n] for n in free), strict=True)
    start = [min(_START[n], bounds[n][1]) for n in free]
    result = least_squares(lambda x: errors(x, train), start, bounds=(lower, upper))
    values = dict(zip(free, map(float, result.x), strict=True))
    return StepFit(label, values, errors(result.x, slice(None)), train)


def attained(parts: Parts, gpu: GpuSpec, kernel: CalibrationTable | None) -> dict[str, float]:
    """Shares of the datasheet peaks reached by the microbenchmarks (no fit), and by the kernel
    table's contiguous layout where one is given."""
    hbm, flops = gpu.hbm_bandwidth_bytes_per_s, gpu.fp16_flops_per_s
    f = parts.frames
    reads = f["hbm"].set_index("op").bytes_per_s
    gemm = f["gemm"]
    layers = gemm[gemm.op != "square"]
    sdpa = f["sdpa"]
    out = {
        "hbm_read": float(reads["sum"] / hbm),
        "hbm_copy": float(reads["copy"] / hbm),
        "gemm_best_flops": float(layers.flops_per_s.max() / flops),
        "gemm_square_8192_flops": float(gemm[gemm.op == "square"].flops_per_s.iloc[0] / flops),
        "gemm_prefill_median_flops": float(
            layers[layers.tokens >= 2048].flops_per_s.median() / flops
        ),
        "gemm_decode_median_hbm": float(layers[layers.tokens == 1].bytes_per_s.median() / hbm),
        "sdpa_decode_best_hbm": float(sdpa[sdpa.phase == "decode"].bytes_per_s.max() / hbm),
        "sdpa_prefill_best_flops": float(sdpa[sdpa.phase == "prefill"].flops_per_s.max() / flops),
    }
    if kernel is not None:
        best = max(row["kv_bytes"] / row["contiguous_s"] for row in kernel.rows)
        out["paged_kernel_contiguous_best_hbm"] = float(best / hbm)
    return out


def host_link(parts: Parts) -> dict[str, dict[str, float]]:
    """Per direction: the bandwidth of the largest single copy (bytes/s) and the fixed time of
    one copy in the batch of small ones (its time less its bytes at that bandwidth), seconds.
    Empty without ``host.csv``."""
    frame = parts.frames.get("host")
    if frame is None:
        return {}
    out = {}
    for direction, rows in frame.groupby("direction", sort=False):
        single = rows[rows.copies == 1]
        bandwidth = float(single.loc[single.bytes_per_copy.idxmax(), "bytes_per_s"])
        batch = rows.loc[rows.copies.idxmax()]
        fixed = float(batch.seconds_per_copy - batch.bytes_per_copy / bandwidth)
        out[str(direction)] = {
            "bytes_per_s": bandwidth,
            "copy_bytes": float(batch.bytes_per_copy),
            "copy_s": float(batch.seconds_per_copy),
            "copy_fixed_s": fixed,
        }
    return out


def repeatability(parts: Parts, repeat: Parts | None) -> float | None:
    """Median |t_repeat / t - 1| of the steps timed in both runs (``None`` without a repeat)."""
    if repeat is None:
        return None
    keys = ["model", "phase", "batch", "query_tokens", "context_tokens"]
    both = parts.frames["steps"].merge(repeat.frames["steps"], on=keys, suffixes=("", "_r"))
    return float(np.median(np.abs(both.seconds_r / both.seconds - 1.0)))


def fit_parts(
    folder: Path,
    gpu_name: str,
    *,
    repeat: Path | None = None,
    kernel_table: Path | None = None,
) -> dict[str, Any]:
    """Fit every candidate, choose on the train error, and return the table to write (a dict
    with ``provenance``, ``fitted``, ``attained``, ``host_link``, ``paged_factor`` (the kernel
    table's median ratio per block size, empty without one), ``candidates`` and ``points``).

    Raises:
        ValueError: a file of ``folder`` or ``repeat`` that ``read_parts`` refuses, or a repeat
            measured on another device than ``folder``.
    """
    parts = read_parts(folder)
    again_parts = read_parts(repeat) if repeat else None
    device = parts.meta["device_name"]
    if again_parts is not None and again_parts.meta["device_name"] != device:
        raise ValueError(
            f"{repeat}: the repeat run was measured on {again_parts.meta['device_name']!r}, "
            f"{folder} on {device!r}; expected a second run on the same device"
        )
    gpu = GpuSpec.model_validate(gpu_name)
    steps = parts.frames["steps"]
    kernel = None
    if kernel_table is not None and kernel_table.is_file():
        kernel = CalibrationTable.load(kernel_table)
    shares = attained(parts, gpu, kernel)
    fits = [
        fit_steps(steps, gpu, free, label, hbm_cap=shares["hbm_read"])
        for label, free in CANDIDATES.items()
    ]
    chosen = min(fits, key=lambda fit: fit.summary(True)["median_abs_pct"])
    _warn_suspect(steps, chosen, parts.paths["steps"])
    m = parts.meta
    provenance: dict[str, Any] = {
        "command": COMMAND,
        "date": m["date_utc"],
        "device_name": m["device_name"],
        "driver_version": m["driver_version"],
        "torch_version": m["torch_version"],
        "cuda_runtime": m["cuda_runtime"],
        "parts": str(folder),
        "train_decode_batches": list(TRAIN_DECODE_BATCHES),
        "train_prefill_chunks": list(TRAIN_PREFILL_CHUNKS),
        "chosen": chosen.label,
        "written": datetime.date.today().isoformat(),
    }
    again = repeatability(parts, again_parts)
    if again is not None:
        provenance["repeat_median_abs_pct"] = again * 100
    fitted = dict(chosen.values)
    predicted = (chosen.errors + 1.0) * steps.seconds.to_numpy(float)
    points = [
        {
            "model": str(row.model),
            "phase": str(row.phase),
            "batch": int(row.batch),
            "context_tokens": int(row.context_tokens),
            "split": "train" if train else "held out",
            "measured_ms": float(row.seconds) * 1e3,
            "predicted_ms": float(pred) * 1e3,
            "error_pct": float(err) * 100,
        }
        for row, pred, err, train in zip(
            steps.itertuples(index=False), predicted, chosen.errors, chosen.train, strict=True
        )
    ]
    return {
        "provenance": provenance,
        "fitted": fitted,
        "attained": shares,
        "host_link": host_link(parts),
        "paged_factor": (
            {str(b): r for b, r in kernel.ratios_by_block_size().items()}
            if kernel is not None
            else {}
        ),
        "candidates": {
            fit.label: {
                "values": fit.values,
                "train": fit.summary(True),
                "held_out": fit.summary(False),
            }
            for fit in fits
        },
        "points": points,
    }


def _warn_suspect(steps: pd.DataFrame, fit: StepFit, path: Path) -> None:
    """Warn about the steps ``fit`` misses by more than ``SUSPECT_ERROR``, naming the worst."""
    suspect = np.flatnonzero(np.abs(fit.errors) > SUSPECT_ERROR)
    if not suspect.size:
        return
    worst = int(suspect[np.argmax(np.abs(fit.errors[suspect]))])
    measured = float(steps.seconds.iloc[worst])
    logger.warning(
        "%s: %d step(s) the fit misses by more than %d %%; the worst, line %d, measured %.6g s, "
        "predicted %.6g s (%+.0f %%): a mistyped or disturbed measurement?",
        path,
        suspect.size,
        round(SUSPECT_ERROR * 100),
        line_of(path, worst),
        measured,
        measured * (1 + fit.errors[worst]),
        fit.errors[worst] * 100,
    )


HEADER = """\
# GPU-side step-cost values FITTED on synthetic PyTorch steps timed on this GPU,
# written by `kvsim calibrate --fit-parts` from the files of `kvsim calibrate --parts`
# (provenance.parts). Not applied by default (docs/calibration.md says why): run with them by
# setting cost.hbm_efficiency, cost.flops_efficiency and cost.layer_overhead_s to [fitted]'s.
# [attained]: shares of the datasheet peaks (kvsim/data/gpus.toml) the microbenchmarks
# reached, not fitted; [paged_factor]: the kernel table's ratio per block size (what costs that
# read a table use on this GPU).
"""


def write_fit(table: dict[str, Any], out: Path) -> Path:
    """Write the table as TOML under ``HEADER``; returns ``out``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(HEADER + tomli_w.dumps(table), encoding="utf-8")
    return out


def report(table: dict[str, Any], say: Callable[[str], None]) -> None:
    """Markdown tables of the fit: candidates' errors and values, and the attained shares."""
    p = table["provenance"]
    say(
        f"Steps timed on {p['device_name']} (driver {p['driver_version']}, PyTorch "
        f"{p['torch_version']}, {p['date']}); chosen on the train error: {p['chosen']}."
    )
    say("")
    say(
        "| candidate | HBM eff. | FLOP eff. | per layer | per step | train median / max | "
        "held-out median / max | held-out within 5 % |"
    )
    say("|---|---|---|---|---|---|---|---|")
    for label, c in table["candidates"].items():
        v, tr, ho = c["values"], c["train"], c["held_out"]
        say(
            f"| {label} | {v['hbm_efficiency']:.3f} | {v['flops_efficiency']:.3f} | "
            f"{v.get('layer_overhead_s', 0) * 1e6:.1f} us | "
            f"{v.get('step_overhead_s', 0) * 1e3:.2f} ms | "
            f"{tr['median_abs_pct']:.1f} / {tr['max_abs_pct']:.1f} % | "
            f"{ho['median_abs_pct']:.1f} / {ho['max_abs_pct']:.1f} % | "
            f"{ho['within_5_pct'] * 100:.0f} % of {ho['points']} |"
        )
    if "repeat_median_abs_pct" in p:
        say(
            f"\nA second run of the same steps differed by {p['repeat_median_abs_pct']:.2f} % "
            "(median |t2/t1 - 1|)."
        )
    say(f"\nHeld-out steps, {p['chosen']}:\n")
    say(
        "| rank | phase | batch | context | measured | predicted | error |\n"
        "|---|---|---|---|---|---|---|"
    )
    for q in table["points"]:
        if q["split"] == "held out":
            say(
                f"| {q['model']} | {q['phase']} | {q['batch']} | {q['context_tokens']} | "
                f"{q['measured_ms']:.2f} ms | {q['predicted_ms']:.2f} ms | "
                f"{q['error_pct']:+.1f} % |"
            )
    fitted = cost_fit_table()["gpus"][cost_fit_table()["provenance"]["fitted_on"]]
    beside = {"hbm_read": "hbm_efficiency", "gemm_prefill_median_flops": "flops_efficiency"}
    say("\n| microbenchmark | share of the datasheet peak | fitted on vLLM runs (H100) |")
    say("|---|---|---|")
    for name, share in table["attained"].items():
        other = f"{fitted[beside[name]]:.3f} ({beside[name]})" if name in beside else ""
        say(f"| {name} | {share:.3f} | {other} |")
    if table["host_link"]:
        say("\n| host link (pinned) | bandwidth, largest copy | one block copy | its fixed part |")
        say("|---|---|---|---|")
        for direction, v in table["host_link"].items():
            say(
                f"| {direction.replace('_', ' ')} | {v['bytes_per_s'] / 1e9:.1f} GB/s | "
                f"{v['copy_s'] * 1e6:.2f} us ({v['copy_bytes'] / 1024:.0f} KiB) | "
                f"{v['copy_fixed_s'] * 1e6:.2f} us |"
            )
    if table["paged_factor"]:
        say("\n| block size | paged / contiguous, measured | analytic default | paper |")
        say("|---|---|---|---|")
        for block, ratio in table["paged_factor"].items():
            paper = "1.20-1.26" if block == "16" else ""
            analytic = analytic_layout_factor(int(block))
            say(f"| {block} | {ratio:.3f} | {analytic:.3f} | {paper} |")
