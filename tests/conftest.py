"""Shared fixtures: a fresh SimPy environment, a seeded rng, tiny pools, request factory."""

from __future__ import annotations

import itertools
import json
import logging
import os
from typing import Any

import numpy as np
import pytest
import simpy

from kvsim.core.kv import ALLOCATORS, accepted_arguments, make_allocator
from kvsim.core.kv.base import Allocator
from kvsim.workload.request import Request

# A tiny pool: 11 blocks x 4 tokens = 44 slots; contiguous slabs capped at 16 tokens.
SMALL_CAPACITY = 44
SMALL_BLOCK = 4
SMALL_MAX_MODEL_LEN = 16


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Runs the ``full`` tests longest first (``full(seconds=...)``, seconds measured on 2 cores):
    under ``-n 2 --dist worksteal`` the longest then starts at once while the other worker takes
    the rest, instead of starting late and running alone. Without the trace folder, marks the
    tests that take the ``traces_dir`` fixture skipped (a mark's skips are one line a file in
    ``-rs``'s summary; a fixture's, one a test)."""
    items.sort(key=lambda item: -expected_seconds(item))  # stable: the rest keep their order
    takers = [item for item in items if "traces_dir" in getattr(item, "fixturenames", ())]
    reason = missing_trace() if takers else None
    for item in takers if reason else ():
        item.add_marker(pytest.mark.skip(reason=reason))


def pytest_configure(config: pytest.Config) -> None:
    """No ``COLUMNS`` unless a test sets it, from before any test module imports kvsim's
    console: pytest-xdist's workers inherit ``COLUMNS=80``, which ``kvsim``'s tables then keep
    to (``kvsim.cli.common``), while a plain run has none."""
    os.environ.pop("COLUMNS", None)


def forget_warnings(caplog: pytest.LogCaptureFixture) -> None:
    """Clear ``caplog`` and forget the messages said so far: kvsim says each once a process
    (``kvsim.base.say_once``), so a later config's same warning would be silent, and a check
    that it is *not* said could not fail."""
    from kvsim.base import say_once

    caplog.clear()
    say_once.SAID.clear()


@pytest.fixture
def fresh_warnings(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Forget the messages already said (each is said once a process) and capture kvsim.config's
    warnings anew, for the whole test (``forget_warnings`` forgets them again mid-test)."""
    from kvsim.base import say_once

    monkeypatch.setattr(say_once, "SAID", set())
    caplog.set_level(logging.WARNING, logger="kvsim.config")


def moot_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The ignored-setting warnings captured (``kvsim.config.ignored``: "... has no effect")."""
    return [r.getMessage() for r in caplog.records if "has no effect" in r.getMessage()]


def summary_without(config: Any, *labels: str) -> dict[str, Any]:
    """``config``'s run summary, through JSON (so NaN equals itself), less its ``config_key``
    and the ``labels`` (keys that only name a setting, not what it did): two runs that differ
    only in an ignored setting compare equal."""
    from kvsim.engine import simulate

    drop = {"config_key", *labels}
    summary = {k: v for k, v in simulate(config).summary.items() if k not in drop}
    return json.loads(json.dumps(summary, sort_keys=True, default=str))


def missing_trace(trace: str | None = None) -> str | None:
    """Why a test that reads ``trace`` (a trace's short name; ``None``: the trace folder) skips,
    in one line naming the file and ``KVSIM_DATA``; ``None`` when it is there. (The catalogue's
    own error lists where every trace comes from: a dozen skips repeated it in ``-rs``.)"""
    from kvsim.workload import DataNotFoundError, data_dir, resolve_trace
    from kvsim.workload.catalog import ENV_VAR, TRACES

    try:
        if trace is None:
            data_dir()
        else:
            resolve_trace(trace)
    except DataNotFoundError:
        where = os.environ.get(ENV_VAR)
        place = f"{ENV_VAR}={where}" if where else f"{ENV_VAR} not set"
        if trace is None:
            return f"no trace folder ({place}; `kvsim data fetch`)"
        name = TRACES[trace].file_name if trace in TRACES else trace
        return f"no trace file {name} ({place}; `kvsim data fetch`)"
    return None


def expected_seconds(item: pytest.Item) -> float:
    """A ``full`` test's expected duration (its ``seconds`` argument, 1 if none); 0 otherwise."""
    marker = item.get_closest_marker("full")
    return float(marker.kwargs.get("seconds", 1.0)) if marker else 0.0


@pytest.fixture
def env() -> simpy.Environment:
    return simpy.Environment()


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(12345)


_ids = itertools.count(1000)


def make_request(
    prompt: int, output: int, *, max_tokens: int | None = None, req_id: int | None = None
) -> Request:
    """A request with the given true sizes (tokens)."""
    return Request(
        next(_ids) if req_id is None else req_id,
        0.0,
        prompt,
        output,
        max_tokens if max_tokens is not None else output,
    )


def small_allocator(name: str, **kw: object) -> Allocator:
    """``name`` on the 44-slot pool (reservation ``oracle`` for slabs, so sizes are exact)."""
    args: dict[str, object] = {
        "capacity_tokens": SMALL_CAPACITY,
        "bytes_per_token": 2,
        "block_size_tokens": SMALL_BLOCK,
        "reservation": "oracle",
        "max_model_len": SMALL_MAX_MODEL_LEN,
        # vattention: 2 bytes a token over 2 tensors = 1 byte a tensor, so 4-byte pages hold 4
        # tokens and the 88-byte pool 88 // (4 x 2) = 11 page rows, the paged pool's shape
        "page_size_bytes": 4,
        "num_kv_tensors": 2,
    }
    # the shared defaults this policy takes; a caller's own arguments pass unfiltered, so a
    # misspelt one raises instead of being dropped
    takes = accepted_arguments(name)
    defaults = {k: v for k, v in args.items() if k in takes and k not in kw}
    return make_allocator(name, **defaults, **kw)


@pytest.fixture(params=sorted(ALLOCATORS))
def allocator_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)
