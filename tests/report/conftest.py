"""Run folders for the report's tests, written by `kvsim run --out` itself (in-process)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser
from typer.testing import CliRunner

from kvsim.cli import app
from tests.report.browser import INSTALL_HINT, chromium_browser, chromium_path

# 2 GiB of OPT-13B KV = 2,621 slots: a few 2,048-slot Max slabs, or ~160 paged blocks of 16.
SMALL = ["cache.kv_cache_gib=2.0", "workload.num_requests=120", "workload.rate_per_s=3"]
CONTIGUOUS = ["cache.allocator=first_fit", "cache.reservation=max"]


def kvsim_run(out: Path, settings: list[str], *extra: str) -> Path:
    """``kvsim run --no-progress --out OUT --set S ...``; fails the test on a non-zero exit."""
    args = ["run", "--no-progress", "--out", str(out), *extra]
    for s in settings:
        args += ["--set", s]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="session")
def small_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(contiguous first-fit / Max, paged 16) on the same 120 requests, 100 map frames each."""
    root = tmp_path_factory.mktemp("runs")
    return (
        kvsim_run(root / "contiguous", SMALL + CONTIGUOUS, "--map-frames", "100"),
        kvsim_run(root / "paged", SMALL, "--map-frames", "100"),
    )


@pytest.fixture(scope="session")
def radix_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A radix-tree run: no physical memory map."""
    root = tmp_path_factory.mktemp("runs")
    return kvsim_run(root / "radix", [*SMALL, "cache.allocator=radix"])


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    """Headless Chromium, shared by a worker's tests; skips them where none is installed."""
    if chromium_path() is None:
        pytest.skip(f"headless Chromium not found at /usr/bin/chromium; {INSTALL_HINT}")
    with chromium_browser() as b:
        yield b
