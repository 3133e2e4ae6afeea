"""Physical and practical bounds on user inputs, each with the reason it exists.

A value past one of these is a typo or an attack, not an experiment: validation rejects it at the
boundary (config fields, trace cells, experiment files) with a message that names the field, the
bound and the value, instead of looping forever, exhausting memory or returning inf/NaN results.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any

# The longest context any served model offers is ~10 M tokens; 2**27 leaves room for what-ifs.
MAX_CONTEXT_TOKENS = 2**27
# kvsim holds every request of a run in memory (about 0.8 KiB each, plus per-step records): the
# largest runs its benchmarks check (`make bench-large`) hold 1,000,000 requests in 0.8 GiB. At
# 10,000,000 a run needed 5.8 GiB and 3 minutes before its first step. Sequences count: a
# request with n = 4 samples is 4 requests to vLLM v1.
MAX_NUM_REQUESTS = 1_000_000
# Simulated time in seconds is a float64: past ~1e9 s (31.7 years) step durations of
# microseconds no longer add up exactly, and past ~1e16 s they vanish (the clock stops).
MAX_TIME_S = 1e9
# Arrival rates: below one request per ~11.6 days nothing arrives within MAX_TIME_S worth
# simulating, and 1e-320 requests/s overflows the mean gap to inf.
MIN_RATE_PER_S = 1e-6
MAX_RATE_PER_S = 1e9
# Inter-arrival scaling (0.5 = twice as fast): beyond these, times reach MAX_TIME_S or underflow.
MIN_TIME_SCALE = 1e-6
MAX_TIME_SCALE = 1e6
# Sequences of one request (parallel samples n, beam width): vLLM's largest practical groups
# are a few hundred; each sequence is simulated.
MAX_SEQS_PER_REQUEST = 4096
# A paged pool's block table is a Python list per block: 2**25 blocks take ~2.5 GiB of host RAM.
MAX_POOL_BLOCKS = 2**25
# GPU hardware: no accelerator holds 1 PiB of memory or moves 1e21 bytes (FLOP) per second.
MAX_GPU_MEMORY_BYTES = 2**50
MAX_HW_PER_S = 1e21
# Fixed per-step costs: an engine step that takes an hour of overhead is a unit mistake (ms?).
MAX_OVERHEAD_S = 3600.0
# Model shapes: the largest models have ~1e13 parameters, ~1,000 layers, ~1,000 heads.
MAX_MODEL_PARAMS = 10**15
MAX_MODEL_LAYERS = 100_000
MAX_MODEL_HEADS = 100_000
MAX_HEAD_DIM = 65_536
# Points of one sweep (the product of its axes): each is a simulation and a folder.
MAX_POINTS = 100_000
# A trace's integer cells must fit numpy's int64 (and token counts MAX_CONTEXT_TOKENS).
MAX_INT64 = 2**63 - 1


def refuse_bool_numbers(fields: Mapping[str, Any], data: Any) -> Any:
    """``data`` as given, for a pydantic ``mode="before"`` model validator; ``true`` or ``false``
    given to a number field (``int`` or ``float``, optional or not) raises ``ValueError`` naming
    the field. Pydantic reads them as 1 and 0, so ``num_requests = true`` would run one request.

    Args:
        fields: the model's ``model_fields``.
        data: the raw input (a mapping of field names; anything else passes through).
    """
    if isinstance(data, Mapping):
        for name, value in data.items():
            info = fields.get(name)
            if isinstance(value, bool) and info is not None and _is_number(info.annotation):
                raise ValueError(f"{name}: expected a number, got {str(value).lower()}")
    return data


def _is_number(annotation: Any) -> bool:
    kinds = typing.get_args(annotation) or (annotation,)
    return bool not in kinds and any(kind in (int, float) for kind in kinds)
