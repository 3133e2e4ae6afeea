"""Physical and practical bounds on user inputs, each with the reason it exists.

A value past one of these is a typo or an attack, not an experiment: validation rejects it at the
boundary (config fields, trace cells, experiment files) with a message that names the field, the
bound and the value, instead of looping forever, exhausting memory or returning inf/NaN results.
"""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeGuard

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


def refuse_coerced_scalars(fields: Mapping[str, Any], data: Any) -> Any:
    """``data`` as given, for a pydantic ``mode="before"`` model validator; a value pydantic
    would coerce to another scalar type raises ``ValueError`` naming the field: ``true`` or
    ``false``, or a string, given to a number field (``int`` or ``float``, optional or not;
    pydantic reads ``true`` as 1, so ``num_requests = true`` would run one request, and
    ``"16"`` as 16), and anything but ``true`` or ``false`` given to a ``bool`` field (pydantic
    reads 1, ``"yes"`` and ``"on"`` as true); likewise each item of a tuple or list of numbers
    (``acceptance_rates = [0.9, "0.5"]``), named by its index.

    Args:
        fields: the model's ``model_fields``.
        data: the raw input (a mapping of field names; anything else passes through).
    """
    if isinstance(data, Mapping):
        for name, value in data.items():
            info = fields.get(name)
            if info is None or value is None:
                continue
            share = name.endswith(SHARE_SUFFIXES)  # (a % written for it has a share to say)
            if _is_number(info.annotation) and isinstance(value, bool | str):
                raise ValueError(f"{name}: {_not_a_number(value, share)}")
            if _is_number_sequence(info.annotation) and isinstance(value, list | tuple):
                for i, item in enumerate(value):
                    if isinstance(item, bool | str):
                        raise ValueError(f"{name}[{i}]: {_not_a_number(item, share)}")
            if _is_bool(info.annotation) and not isinstance(value, bool):
                raise ValueError(f"{name}: expected true or false, got {value!r}")
    return data


def is_int_at_least(value: object, minimum: int) -> TypeGuard[int]:
    """Whether ``value`` is an integer >= ``minimum``; ``True`` and ``False`` are not (JSON and
    TOML booleans, which Python counts as 1 and 0)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


# config fields that are a share of 1 (a rate, a fraction of memory): "69.1%" written for one,
# as vLLM's log prints a rate, is told the share it stands for
SHARE_SUFFIXES = ("_rate", "_rates", "_perc", "utilization")


def _not_a_number(value: bool | str, share: bool = False) -> str:
    if isinstance(value, bool):
        return f"expected a number, got {str(value).lower()}"
    try:
        number = float(value)
    except ValueError:
        percent = value.strip().removesuffix("%")
        if share and percent != value.strip():
            try:
                part = float(percent) / 100
            except ValueError:
                part = math.nan
            if 0 <= part <= 1:
                return f"expected a share of 1, got {value!r}: write {part:g}"
        return f"expected a number, got {value!r}"
    if not math.isfinite(number):
        return f"expected a finite number, got {value!r}"
    if not value.isascii():  # (float() reads other scripts' digits, TOML and JSON do not)
        return f"expected a number in ASCII digits (0-9), got {value!r}"
    return f"expected a number, got the string {value!r} (write it without quotes)"


def field_kinds(annotation: Any) -> tuple[Any, ...]:
    """The types a field takes, ``None`` left out (``int | None`` -> ``(int,)``); a generic is
    one kind (``tuple[float, ...]`` -> ``(tuple[float, ...],)``), its arguments not members."""
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    kinds = typing.get_args(annotation) if union else (annotation,)
    return tuple(kind for kind in kinds if kind is not type(None))


def _is_number(annotation: Any) -> bool:
    """A field of numbers only (``int``, ``float``, either, optional or not)."""
    kinds = field_kinds(annotation)
    return bool(kinds) and all(kind in (int, float) for kind in kinds)


def _is_number_sequence(annotation: Any) -> bool:
    """A field of a tuple or list of numbers (``tuple[float, ...]``, optional or not)."""
    kinds = field_kinds(annotation)
    return (
        len(kinds) == 1
        and typing.get_origin(kinds[0]) in (tuple, list)
        and all(_is_number(arg) for arg in typing.get_args(kinds[0]) if arg is not Ellipsis)
    )


def _is_bool(annotation: Any) -> bool:
    return field_kinds(annotation) == (bool,)
