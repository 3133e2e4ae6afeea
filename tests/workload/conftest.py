"""Fixtures for workload tests: the real trace folder (skipped when absent) and a seeded rng."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvsim.workload import DataNotFoundError, data_dir


@pytest.fixture
def traces_dir() -> Path:
    """The shared trace folder; skip the test when it is not available."""
    try:
        return data_dir()
    except DataNotFoundError as exc:
        pytest.skip(f"trace data not available: {exc}")


@pytest.fixture
def wl_rng() -> np.random.Generator:
    """A fresh, seeded generator."""
    return np.random.default_rng(12345)
