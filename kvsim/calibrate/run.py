"""Timing harness: the microkernel over (batch, context, block size); CUDA events, L2 flushed.

For each ``(batch_size, context_tokens)`` it fills random fp16 K/V caches, one region per sequence
(contiguous), and for each block size scatters them into a shuffled block pool through random
block tables (paged). Before timing, the paged output must equal the contiguous one (same maths,
same token order, so to fp32 rounding), and once per run a small case is checked against the
NumPy reference. Each timing is the median of ``repeats`` launches, each after ``warmup`` untimed
launches and with the L2 cache flushed (a write over twice its size) before the start event.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvsim.calibrate.kernel import DecodeAttentionKernel, KernelShape, import_cupy
from kvsim.calibrate.reference import (
    decode_attention_online,
    make_block_tables,
    scatter_to_pool,
)
from kvsim.calibrate.table import CalibrationTable, metadata_now, nvidia_driver_version

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CalibrationGrid:
    """What to time. Defaults fit in about a minute of an H100/H200 (compilation included).

    Attributes:
        batch_sizes: sequences per launch.
        context_tokens: tokens per sequence (multiples of every block size not above them).
        block_sizes: paged block sizes, tokens (those above a context are not timed there).
        max_batch_tokens: largest batch x context timed (larger points are left out).
        shape: heads of the kernel (default Llama-3-8B-like GQA: 32 query, 8 KV heads, 128 dims).
        warmup: untimed launches per point.
        repeats: timed launches per point (the median is kept).
        seed: seed of the data and the block-table shuffles.
    """

    batch_sizes: Sequence[int] = (1, 8, 32, 128)
    context_tokens: Sequence[int] = (64, 256, 1024, 4096, 16384, 32768)
    block_sizes: Sequence[int] = (1, 2, 4, 8, 16, 32, 64, 128, 256)
    max_batch_tokens: int = 1 << 20
    shape: KernelShape = field(default_factory=KernelShape)
    warmup: int = 3
    repeats: int = 20
    seed: int = 0

    def __post_init__(self) -> None:
        for ctx in self.context_tokens:
            bad = [b for b in self.block_sizes if b <= ctx and ctx % b]
            if bad:
                raise ValueError(f"context_tokens {ctx} is not a multiple of block sizes {bad}")


def device_metadata(cp: Any) -> dict[str, str]:
    """Device name, NVIDIA driver, CUDA runtime/driver API and CuPy versions, UTC date."""
    dev = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    driver = nvidia_driver_version(dev.id)
    if driver is None:
        driver = f"CUDA driver API {cp.cuda.runtime.driverGetVersion()}"
    return metadata_now(
        source="measured",
        device_name=name,
        driver_version=driver,
        cuda_runtime=str(cp.cuda.runtime.runtimeGetVersion()),
        cupy_version=cp.__version__,
        l2_cache_bytes=props["l2CacheSize"],
        hbm_bus_width_bits=props.get("memoryBusWidth", ""),
    )


def time_launch(
    cp: Any, launch: Callable[[], None], flush: Callable[[], None], *, warmup: int, repeats: int
) -> float:
    """Median seconds of ``launch`` over ``repeats`` CUDA-event timings, L2 flushed before each."""
    for _ in range(warmup):
        launch()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for _ in range(repeats):
        flush()
        start.record()
        launch()
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end) * 1e-3)
    return float(np.median(times))


def check_against_reference(cp: Any, shape: KernelShape, seed: int = 1) -> float:
    """Run both layouts on a small case and compare with the NumPy reference.

    Returns:
        The largest absolute error of either layout (raises ``AssertionError`` above 2e-3).
    """
    rng = np.random.default_rng(seed)
    batch, ctx, block = 3, 64, 16
    q = rng.standard_normal((batch, shape.num_heads, shape.head_dim)).astype(np.float16)
    kv = rng.standard_normal((2, batch, ctx, shape.num_kv_heads, shape.head_dim)).astype(np.float16)
    lens = np.array([64, 37, 1], np.int32)
    want = decode_attention_online(q, kv[0], kv[1], lens, shape.num_warps)
    tables = make_block_tables(rng, batch, ctx, block)
    errors = []
    for block_size in (None, block):
        kernel = DecodeAttentionKernel(shape, block_size)
        out = cp.zeros((batch, shape.num_heads, shape.head_dim), cp.float32)
        k, v = cp.asarray(kv[0]), cp.asarray(kv[1])
        tab = None
        if block_size is not None:
            tab = cp.asarray(tables)
            k, v = (scatter_to_pool(x, tab, block, cp) for x in (k, v))
        kernel(cp.asarray(q), k, v, cp.asarray(lens), out, block_tables=tab, max_ctx=ctx)
        errors.append(float(np.abs(cp.asnumpy(out) - want).max()))
    worst = max(errors)
    assert worst < 2e-3, f"kernel disagrees with the NumPy reference: max abs error {errors}"
    return worst


def run_calibration(
    grid: CalibrationGrid | None = None, progress: Callable[[str], None] | None = None
) -> CalibrationTable:
    """Time both layouts over ``grid`` on the current GPU and return the measured table.

    Raises:
        CalibrationUnavailableError: no CuPy or no GPU.
    """
    grid = grid or CalibrationGrid()
    cp = import_cupy()
    say = progress or (lambda msg: logger.info("%s", msg))
    meta = device_metadata(cp)
    s = grid.shape
    meta.update(
        {
            "num_heads": str(s.num_heads),
            "num_kv_heads": str(s.num_kv_heads),
            "head_dim": str(s.head_dim),
            "num_warps": str(s.num_warps),
            "dtype": "float16",
            "warmup": str(grid.warmup),
            "repeats": str(grid.repeats),
            "reference_max_abs_error": f"{check_against_reference(cp, s):.2e}",
        }
    )
    say(
        f"{meta['device_name']}: kernel matches the NumPy reference "
        f"(max abs error {meta['reference_max_abs_error']})"
    )
    flush_buf = cp.empty(2 * int(meta["l2_cache_bytes"]), cp.uint8)
    kernels = {b: DecodeAttentionKernel(s, b) for b in (None, *grid.block_sizes)}
    rng = np.random.default_rng(grid.seed)
    rows = []
    for batch in grid.batch_sizes:
        for ctx in grid.context_tokens:
            if batch * ctx > grid.max_batch_tokens:
                continue
            point = _time_point(cp, kernels, grid, rng, batch, ctx, lambda: flush_buf.fill(1))
            rows += point
            say(
                f"batch {batch:4d} context {ctx:5d}: "
                + " ".join(
                    f"B{int(r['block_size_tokens'])}={r['paged_s'] / r['contiguous_s']:.2f}"
                    for r in point
                )
            )
    return CalibrationTable(meta, rows)


def _time_point(
    cp: Any,
    kernels: dict[int | None, DecodeAttentionKernel],
    grid: CalibrationGrid,
    rng: np.random.Generator,
    batch: int,
    ctx: int,
    flush: Callable[[], None],
) -> list[dict[str, float]]:
    s = grid.shape
    shape = (batch, ctx, s.num_kv_heads, s.head_dim)
    k = cp.random.standard_normal(shape, dtype=cp.float32).astype(cp.float16)
    v = cp.random.standard_normal(shape, dtype=cp.float32).astype(cp.float16)
    q = cp.random.standard_normal((batch, s.num_heads, s.head_dim), dtype=cp.float32).astype(
        cp.float16
    )
    lens = cp.full(batch, ctx, cp.int32)
    kv_bytes = 2 * k.nbytes
    ref = cp.empty((batch, s.num_heads, s.head_dim), cp.float32)
    kernels[None](q, k, v, lens, ref, max_ctx=ctx)
    contiguous_s = time_launch(
        cp,
        lambda: kernels[None](q, k, v, lens, ref, max_ctx=ctx),
        flush,
        warmup=grid.warmup,
        repeats=grid.repeats,
    )
    out = cp.empty_like(ref)
    rows = []
    for block in (b for b in grid.block_sizes if b <= ctx):
        tables = cp.asarray(make_block_tables(rng, batch, ctx, block))
        k_pool, v_pool = (
            scatter_to_pool(k, tables, block, cp),
            scatter_to_pool(v, tables, block, cp),
        )
        kern = kernels[block]

        def launch(
            kern: DecodeAttentionKernel = kern,
            kp: Any = k_pool,
            vp: Any = v_pool,
            tab: Any = tables,
        ) -> None:
            kern(q, kp, vp, lens, out, block_tables=tab, max_ctx=ctx)

        launch()
        err = float(cp.abs(out - ref).max())
        assert err < 1e-4, f"paged (B={block}) and contiguous outputs differ by {err}"
        paged_s = time_launch(cp, launch, flush, warmup=grid.warmup, repeats=grid.repeats)
        rows.append(
            {
                "batch_size": float(batch),
                "context_tokens": float(ctx),
                "block_size_tokens": float(block),
                "contiguous_s": contiguous_s,
                "paged_s": paged_s,
                "kv_bytes": float(kv_bytes),
            }
        )
        del k_pool, v_pool
    return rows
