"""The answer in dollars: what a run's GPUs cost, per million output tokens, and its goodput.

A run holds its GPUs from its first arrival to its last finish (``duration_s``) at
``usd_per_hour`` (every GPU at its price, ``SimConfig.usd_per_hour``). Goodput counts the
requests that meet every per-request target of ``[slo]`` (DistServe's definition: Zhong et al.,
OSDI 2024), per second and per dollar; ``slo_attainment`` is their share. With no target set
there is nothing to meet: the three are NaN (``null`` in ``summary.json``), not every request.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from kvsim.base.say_once import warn_once
from kvsim.results.metrics import client_of, output_tokens

logger = logging.getLogger(__name__)

MONEY_METRICS = (
    "usd_per_hour",
    "cost_usd",
    "usd_per_million_output_tokens",
    "slo_attainment",
    "goodput_requests_per_s",
    "goodput_requests_per_usd",
)


def meets_targets(
    requests: Mapping[str, npt.NDArray[Any]], targets: Mapping[str, float]
) -> npt.NDArray[np.bool_]:
    """bool[num_requests]: each request meets every target (``metric <= bound``, seconds); a
    NaN value (a metric the request lacks) holds. A one-token output's TPOT is 0, as vLLM
    records it, so it holds any TPOT target.

    Raises:
        ValueError: a target names a column the table lacks.
    """
    num = len(requests["output_tokens"])
    good = np.ones(num, dtype=np.bool_)
    for metric, bound in targets.items():
        if metric not in requests:
            raise ValueError(f"slo.{metric}: no such per-request metric")
        values = np.asarray(requests[metric], dtype=np.float64)
        good &= np.isnan(values) | (values <= bound)
    return good


def money_summary(
    requests: Mapping[str, npt.NDArray[Any]],
    duration_s: float,
    usd_per_hour: float | None,
    targets: Mapping[str, float],
) -> dict[str, float]:
    """``MONEY_METRICS`` of a run (NaN where a price or a duration is missing, and the goodput
    metrics NaN without a target).

    Args:
        requests: the per-request table's columns (latencies in seconds).
        duration_s: seconds the run holds its GPUs (first arrival to last finish).
        usd_per_hour: what its GPUs cost per hour, or ``None`` (no price known).
        targets: per-request targets, metric -> bound in seconds (``SloSpec.targets``).
    """
    # a client request (a v1 request of n > 1: its samples) meets the targets when every row
    # of it does
    clients = client_of(requests)
    num = int(clients.max()) + 1 if clients.size else 0
    meets = meets_targets(requests, targets)
    missed = np.zeros(num, dtype=np.int64)
    np.add.at(missed, clients, ~np.asarray(meets, dtype=np.bool_))
    good = int(np.count_nonzero(missed == 0)) if num else 0
    tokens = float(output_tokens(requests)) if num else 0.0  # (what the clients receive)
    nan = math.nan
    rate = usd_per_hour if usd_per_hour is not None else nan
    cost = rate * duration_s / 3600.0 if duration_s > 0 else nan
    # no [slo]: every request would "meet" it, a 100 % that says nothing
    judged = bool(targets)
    return {
        "usd_per_hour": rate,
        "cost_usd": cost,
        "usd_per_million_output_tokens": cost / (tokens / 1e6) if tokens else nan,
        "slo_attainment": good / num if num and judged else nan,
        "goodput_requests_per_s": good / duration_s if duration_s > 0 and judged else nan,
        "goodput_requests_per_usd": good / cost if cost > 0 and judged else nan,
    }


def price_or_none(price: Any, *, gpu_names: Iterable[str] = ()) -> float | None:
    """``price()`` (a config's ``usd_per_hour``), or ``None`` when a GPU has no price (the
    money metrics are then NaN): one warning when a preset GPU (``kvsim/data/gpus.toml``) lacks
    one, an info line when every GPU of ``gpu_names`` is one of the config's own (a what-if GPU
    has no market price, so no price table could hold it).
    """
    try:
        return float(price())
    except ValueError as err:
        from kvsim.config.hardware import preset_table  # (config is below results)

        presets = preset_table("gpus")
        names = list(gpu_names)
        if names and not any(name in presets for name in names):
            logger.info("%s; the money metrics are left NaN", err)
        else:
            warn_once(logger, "%s; the money metrics are left NaN", err)
        return None
