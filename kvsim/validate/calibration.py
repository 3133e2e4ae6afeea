"""``kvsim calibrate --from-runs``: fit the step cost on the train split, choose on validate, and
write the fitted table (``kvsim/data/cost_fit.toml``) with its provenance.

The procedure: each candidate (parameters fitted and parameters pinned, ``CANDIDATES``: the
KV-read factor at 1 or fitted, a per-sequence overhead or none) is fitted on windows of
the train runs (``kvsim.validate.fit``); each fit is then replayed on the whole validate runs, and
the candidate with the smallest median |error| of mean E2E and mean TTFT there is written.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import tomli_w

from kvsim.base.units import plural
from kvsim.validate.catalog import list_runs, load_run
from kvsim.validate.errors import stage_errors
from kvsim.validate.fit import PINNED, FitResult, ReplayCache, Window, cost_of, fit_cost
from kvsim.validate.h100 import read_split
from kvsim.validate.replay import replay_run
from kvsim.validate.runs import real_vllm_dir

logger = logging.getLogger(__name__)

_CORE = (
    "hbm_efficiency",
    "flops_efficiency",
    "step_overhead_s",
    "allreduce_latency_per_peer_s",
    "frontend_latency_s",
)
# label -> (parameters fitted, parameters pinned for this candidate)
CANDIDATES: dict[str, tuple[tuple[str, ...], dict[str, float]]] = {
    "KV-read factor 1": (_CORE, {"paged_attention_factor": 1.0, "per_seq_overhead_s": 0.0}),
    "KV-read factor fitted": (
        (*_CORE, "paged_attention_factor"),
        {"per_seq_overhead_s": 0.0},
    ),
    "per-sequence overhead fitted": (
        (*_CORE, "per_seq_overhead_s"),
        {"paged_attention_factor": 1.0},
    ),
}
FIT_WINDOW = Window(per_stage=600, margin=150)
_GPU_FIELDS = ("hbm_efficiency", "flops_efficiency")


# Where every fit starts (an initial guess: a converged fit does not depend on it beyond the
# replays' noise): the values an earlier fit of this procedure ended at, so that a rerun finds its
# replays in the cache.
START = {
    "hbm_efficiency": 0.8082560608594092,
    "flops_efficiency": 0.696416080176848,
    "step_overhead_s": 0.0009568494137510964,
    "allreduce_latency_per_peer_s": 7.803827258751611e-06,
    "frontend_latency_s": 0.00822526956290895,
    "paged_attention_factor": 0.9778,
    "per_seq_overhead_s": 0.0,
}
# A candidate that fits more parameters is chosen only when it lowers the validate score by more
# than this (percentage points): a tie keeps the simpler model.
TIE_POINTS = 0.1


def start_values() -> dict[str, float]:
    """Where a fit starts (``START``)."""
    return dict(START)


def choose(
    scores: dict[str, float], candidates: dict[str, tuple[tuple[str, ...], dict[str, float]]]
) -> str:
    """The candidate to write: the best validate score, but one with more fitted parameters only
    when it beats the simpler ones' best by more than ``TIE_POINTS``."""
    ordered = sorted(scores, key=lambda label: len(candidates[label][0]))
    chosen = ordered[0]
    for label in ordered[1:]:
        simpler = len(candidates[label][0]) == len(candidates[chosen][0])
        margin = 0.0 if simpler else TIE_POINTS
        if scores[label] < scores[chosen] - margin:
            chosen = label
    return chosen


def validate_score(values: dict[str, float], names: list[str]) -> tuple[float, dict[str, float]]:
    """Median |error| (percent) of mean E2E and of mean TTFT over the validate runs ``names``
    (whole runs), their mean as the score."""
    cost, frontend = cost_of(values)
    e2e, ttft = [], []
    for name in names:
        errors = stage_errors(replay_run(load_run(name), cost, frontend))
        whole = errors[errors["stage"] == errors["stage"].min()]
        pick = whole[whole["statistic"] == "mean"].set_index("metric")["error_pct"]
        e2e.append(abs(float(pick["e2e_s"])))
        ttft.append(abs(float(pick["ttft_s"])))
    detail = {
        "e2e_mean_median_abs_pct": float(np.median(e2e)),
        "ttft_mean_median_abs_pct": float(np.median(ttft)),
    }
    return (detail["e2e_mean_median_abs_pct"] + detail["ttft_mean_median_abs_pct"]) / 2, detail


def calibrate_from_runs(
    out: Path,
    *,
    cache_path: Path | None,
    max_evaluations: int = 40,
    candidates: dict[str, tuple[tuple[str, ...], dict[str, float]]] | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Fit every candidate on the train runs, choose on validate, write ``out`` (TOML).

    Returns:
        The written table as a dict.
    """
    say = progress or (lambda text: None)
    root = real_vllm_dir()
    splits = list_runs(root)
    train = [load_run(n, root) for n, s in splits.items() if s == "train"]
    validate = [n for n, s in splits.items() if s == "validate"]
    if not train:
        raise ValueError(f"no train runs under {root} (h100/split.txt)")
    listed = read_split(root)
    absent = sorted(n for n in listed if n not in splits)
    if absent:  # (split.txt names them, their files are not there: the fit goes without them)
        logger.warning(
            "calibrate --from-runs: %s of h100/split.txt %s not under %s: fitted and "
            "chosen without %s (%s)",
            plural(len(absent), "run"),
            "is" if len(absent) == 1 else "are",
            root,
            "it" if len(absent) == 1 else "them",
            ", ".join(f"{n} ({listed[n]})" for n in absent),
        )
    if not validate:
        logger.warning(
            "calibrate --from-runs: no validate runs under %s: the candidate is chosen on its "
            "train loss, and nothing held out checks it",
            root,
        )
    block_sizes = {r.block_size_tokens for r in train}
    if len(block_sizes) != 1:  # (the paged factor is fitted at one block size)
        by_size = {b: [r.name for r in train if r.block_size_tokens == b] for b in block_sizes}
        shown = "; ".join(
            f"{b} tokens: {', '.join(names[:3])}"
            + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            for b, names in sorted(by_size.items())
        )
        raise ValueError(
            f"calibrate --from-runs: the train runs under {root} (split.txt) run at several "
            f"block sizes ({shown}); the paged factor is fitted at one: split the others out"
        )
    cache = ReplayCache(cache_path)
    results: dict[str, tuple[FitResult, float, dict[str, float]]] = {}
    for label, (free, pinned) in (candidates or CANDIDATES).items():
        say(f"fitting '{label}' ({', '.join(free)}) on {len(train)} train runs")
        start = {**start_values(), **pinned}
        fit = fit_cost(
            train,
            free,
            start,
            cache=cache,
            window=FIT_WINDOW,
            max_evaluations=max_evaluations,
            progress=say,
        )
        values = {**fit.pinned, **fit.values}
        score, detail = validate_score(values, validate) if validate else (fit.loss, {})
        say(f"  '{label}': train loss {fit.loss:.4f}; validate {detail}")
        results[label] = (fit, score, detail)
    chosen = choose({k: r[1] for k, r in results.items()}, candidates or CANDIDATES)
    table = _table(
        results,
        chosen,
        train_names=[r.name for r in train],
        validate_names=validate,
        block_size_tokens=block_sizes.pop(),
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(_header(len(train), len(validate)) + tomli_w.dumps(table), encoding="utf-8")
    on = "on the validate split" if validate else "on the train loss (no validate run)"
    say(f"chose '{chosen}' {on}; wrote {out}")
    return table


def _header(num_train: int, num_validate: int) -> str:
    """The written table's opening comment, with the runs it was fitted and chosen on."""
    chosen = (
        f"chosen on the validate split ({plural(num_validate, 'run')})"
        if num_validate
        else "chosen on its train loss (no validate run)"
    )
    return f"""\
# The step cost FITTED on measured vLLM runs (issue 33): written by `kvsim calibrate --from-runs`.
# Every value under [cost], [gpus.*] and [validate] is FITTED on the train split of
# inference-sim/training @ c4f0340 ({plural(num_train, "H100 SXM run")}, vLLM 0.15.1) unless
# [provenance.pinned] gives it with a source; the candidate written was {chosen}. The
# test split is not in kvsim's data. GPUs without a section take the H100's efficiencies (a
# transfer, not a fit: the RTX 4090 run is held out). Datasheet peaks: kvsim/data/gpus.toml.
"""


def _table(
    results: dict[str, tuple[FitResult, float, dict[str, float]]],
    chosen: str,
    *,
    train_names: list[str],
    validate_names: list[str],
    block_size_tokens: int,
) -> dict[str, Any]:
    fit = results[chosen][0]
    values = {**fit.pinned, **fit.values}
    gpu = {k: values[k] for k in _GPU_FIELDS}
    frontend = values.get("frontend_latency_s", 0.0)
    cost = {k: v for k, v in values.items() if k not in _GPU_FIELDS and k != "frontend_latency_s"}
    for name, (value, _) in PINNED.items():
        cost.setdefault(name, value)
    return {
        "provenance": {
            "command": "kvsim calibrate --from-runs",
            "split": "train",
            "fitted_on": "h100-80gb",
            "vllm_version": "0.15.1",
            "date": datetime.date.today().isoformat(),
            "source": "inference-sim/training @ c4f0340",
            "train_runs": train_names,
            "validate_runs": validate_names,
            "block_size_tokens": block_size_tokens,
            "window": {"per_stage": FIT_WINDOW.per_stage, "margin": FIT_WINDOW.margin},
            "loss": fit.loss,
            "fitted": sorted(fit.values),
            "pinned": {name: source for name, (_, source) in PINNED.items()},
            "chosen": chosen,
            "candidates": {
                label: {"fitted": r[0].values, "train_loss": r[0].loss, "validate": r[2]}
                for label, r in results.items()
            },
        },
        "cost": cost,
        "gpus": {"h100-80gb": gpu},
        "validate": {"frontend_latency_s": frontend},
    }
