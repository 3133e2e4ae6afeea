"""Fixtures for workload tests: the real trace folder (skipped when absent) and a seeded rng."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvsim.workload import DataNotFoundError, data_dir
from tests.conftest import missing_trace


@pytest.fixture
def traces_dir() -> Path:
    """The shared trace folder; skip the test when it is not available (``tests/conftest.py``
    marks the tests that take this fixture skipped then, before they start)."""
    try:
        return data_dir()
    except DataNotFoundError:
        pytest.skip(missing_trace() or "no trace folder")


@pytest.fixture
def wl_rng() -> np.random.Generator:
    """A fresh, seeded generator."""
    return np.random.default_rng(12345)
