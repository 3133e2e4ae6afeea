"""The step cost's parts timed on a GPU with PyTorch: HBM reads, GEMMs, SDPA, whole decode steps.

``kvsim calibrate --parts DIR`` (``python -m kvsim.calibrate --parts DIR``) writes CSV files
into ``DIR``, each with the device, driver, CUDA, PyTorch versions and date as ``# key: value``
lines (``parts_meta``):

- ``hbm.csv``: a large contiguous read (a sum over a bf16 tensor) and a copy; attained bytes/s.
- ``host.csv``: copies between pinned host memory and the GPU, each direction, by size, and a
  batch of block-sized copies (the time per copy the swap and offload terms charge).
- ``gemm.csv``: the linear layers of one tensor-parallel rank (``PART_MODELS``) at the token counts
  of decode steps and prefill chunks, and one 8192^3 product; attained FLOP/s and bytes/s.
- ``sdpa.csv``: ``scaled_dot_product_attention`` (bf16) at decode shapes (one query per sequence,
  grouped-query heads folded into the query length) and at prefill shapes (causal chunk).
- ``steps.csv``: whole synthetic forwards of every layer of the rank
  (``kvsim.calibrate.synthetic_steps``): the step the cost model prices, without the scheduler,
  sampling or all-reduces.

Every time is the median of ``repeats`` CUDA-event timings, the L2 cache flushed (a write over
twice its size) before each. Tensors are random; only shapes and bytes matter to the times.
PyTorch is imported lazily (it is not a kvsim dependency); on a machine without CUDA the module
runs on the CPU with wall-clock timers (a dry run of shapes and files, not a measurement).
"""

from __future__ import annotations

import csv
import datetime
import time
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from kvsim.calibrate.parts_setup import PART_MODELS, PartModel, PartsGrid, Timer, decode_points
from kvsim.calibrate.synthetic_steps import time_steps
from kvsim.calibrate.table import nvidia_driver_version


def parts_meta(torch: Any, device: str) -> dict[str, str]:
    """Device, driver, CUDA and PyTorch versions, multiprocessors, L2 bytes, UTC date."""
    meta = {
        "source": "measured" if device == "cuda" else "dry run on the CPU (not a measurement)",
        "torch_version": torch.__version__,
        "cuda_runtime": str(torch.version.cuda),
        "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
    }
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        meta.update(
            device_name=props.name,
            multiprocessors=str(props.multi_processor_count),
            l2_cache_bytes=str(props.L2_cache_size),
            memory_bytes=str(props.total_memory),
        )
        meta["driver_version"] = nvidia_driver_version(0) or "unknown"
    else:
        meta.update(device_name="cpu", driver_version="none")
    return meta


def write_rows(path: Path, meta: dict[str, str], rows: Iterable[dict[str, object]]) -> Path:
    """Write ``rows`` as CSV under ``# key: value`` metadata lines; returns ``path``."""
    rows = list(rows)
    with path.open("w", newline="") as f:
        for key, value in meta.items():
            f.write(f"# {key}: {value}\n")
        if rows:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return path


def time_hbm(torch: Any, timer: Timer, nbytes: int) -> list[dict[str, object]]:
    """A sum over ``nbytes`` of bf16 (bytes read) and a copy of them (read + written)."""
    n = nbytes // 2
    x = torch.randn(n, dtype=torch.bfloat16, device=timer.device)
    y = torch.empty_like(x)
    rows = []
    for op, moved, launch in (
        ("sum", nbytes, lambda: torch.sum(x, dtype=torch.float32)),
        ("copy", 2 * nbytes, lambda: y.copy_(x)),
    ):
        s = timer(launch)
        rows.append({"op": op, "bytes": moved, "seconds": s, "bytes_per_s": moved / s})
    return rows


def time_host_link(
    torch: Any, timer: Timer, sizes: Sequence[int], block_copies: int, block_bytes: int
) -> list[dict[str, object]]:
    """Copies between pinned host memory and the GPU, each direction: one copy of each size,
    and ``block_copies`` copies of ``block_bytes`` each (one ``cudaMemcpyAsync`` apiece, as
    vLLM's ``swap_blocks`` issues one per block per layer for K and for V)."""
    dev = timer.device
    top = max(max(sizes), block_copies * block_bytes)
    host = torch.empty(top, dtype=torch.uint8, pin_memory=dev == "cuda")
    gpu = torch.empty(top, dtype=torch.uint8, device=dev)
    host.fill_(1)
    rows = []
    for direction, dst, src in (("host_to_gpu", gpu, host), ("gpu_to_host", host, gpu)):
        for size in sizes:
            d, s = dst[:size], src[:size]
            seconds = timer(partial(d.copy_, s, non_blocking=True))
            rows.append(_link_row(direction, size, 1, seconds))
        pairs = [
            (
                dst[i * block_bytes : (i + 1) * block_bytes],
                src[i * block_bytes : (i + 1) * block_bytes],
            )
            for i in range(block_copies)
        ]

        def many(pairs: list[tuple[Any, Any]] = pairs) -> None:
            for d, s in pairs:
                d.copy_(s, non_blocking=True)

        rows.append(_link_row(direction, block_bytes, block_copies, timer(many)))
    return rows


def _link_row(direction: str, size: int, copies: int, seconds: float) -> dict[str, object]:
    return {
        "direction": direction,
        "bytes_per_copy": size,
        "copies": copies,
        "seconds": seconds,
        "bytes_per_s": size * copies / seconds,
        "seconds_per_copy": seconds / copies,
    }


def time_gemms(
    torch: Any, timer: Timer, models: Sequence[PartModel], tokens: Sequence[int]
) -> list[dict[str, object]]:
    """Each linear layer (and the LM head) of each model at each token count, and 8192^3."""
    rows = []
    dev = timer.device
    for model in models:
        shapes = dict(model.linear_shapes(), lm_head=(model.hidden, model.vocab))
        for op, (k, n) in shapes.items():
            w = torch.randn(k, n, dtype=torch.bfloat16, device=dev) * 0.02
            for t in tokens:
                x = torch.randn(t, k, dtype=torch.bfloat16, device=dev)
                out = torch.empty(t, n, dtype=torch.bfloat16, device=dev)
                s = timer(partial(torch.matmul, x, w, out=out))
                moved = 2 * (k * n + t * k + t * n)
                rows.append(_gemm_row(model.name, op, t, k, n, s, moved))
            del w
    big = 8192 if dev == "cuda" else 256
    a = torch.randn(big, big, dtype=torch.bfloat16, device=dev)
    b = torch.randn(big, big, dtype=torch.bfloat16, device=dev)
    s = timer(lambda: torch.matmul(a, b))
    rows.append(_gemm_row("square", "square", big, big, big, s, 6 * big * big))
    return rows


def _gemm_row(
    model: str, op: str, t: int, k: int, n: int, s: float, moved: int
) -> dict[str, object]:
    flops = 2 * t * k * n
    return {
        "model": model,
        "op": op,
        "tokens": t,
        "in_features": k,
        "out_features": n,
        "seconds": s,
        "flops": flops,
        "bytes": moved,
        "flops_per_s": flops / s,
        "bytes_per_s": moved / s,
    }


def time_sdpa(
    torch: Any, timer: Timer, models: Sequence[PartModel], grid: PartsGrid
) -> list[dict[str, object]]:
    """One layer's attention: decode (one query per sequence over ``context`` keys) and prefill
    (a causal chunk). KV bytes read and attention FLOPs (``4 * heads * head_dim`` per pair)."""
    fn = torch.nn.functional
    dev = timer.device
    rows = []
    for model in models:
        group, d = model.heads // model.kv_heads, model.head_dim
        for batch, ctx in decode_points(grid):
            # GQA folded: the group's query heads are one KV head's query rows (no mask needed).
            q = torch.randn(batch, model.kv_heads, group, d, dtype=torch.bfloat16, device=dev)
            k = torch.randn(batch, model.kv_heads, ctx, d, dtype=torch.bfloat16, device=dev)
            v = torch.randn_like(k)
            s = timer(partial(fn.scaled_dot_product_attention, q, k, v))
            kv = 2 * k.numel() * 2
            pairs = batch * ctx
            rows.append(_sdpa_row(model, "decode", batch, 1, ctx, s, kv, pairs))
            del q, k, v
        for chunk in grid.prefill_chunks:
            q = torch.randn(1, model.heads, chunk, d, dtype=torch.bfloat16, device=dev)
            k = torch.randn(1, model.kv_heads, chunk, d, dtype=torch.bfloat16, device=dev)
            v = torch.randn_like(k)
            gqa = {"enable_gqa": True} if group > 1 else {}
            s = timer(partial(fn.scaled_dot_product_attention, q, k, v, is_causal=True, **gqa))
            pairs = chunk * (chunk + 1) // 2
            rows.append(_sdpa_row(model, "prefill", 1, chunk, chunk, s, 2 * k.numel() * 2, pairs))
            del q, k, v
    return rows


def _sdpa_row(
    model: PartModel, phase: str, batch: int, q_len: int, ctx: int, s: float, kv: int, pairs: int
) -> dict[str, object]:
    flops = 4 * model.heads * model.head_dim * pairs
    return {
        "model": model.name,
        "phase": phase,
        "batch": batch,
        "query_tokens": q_len,
        "context_tokens": ctx,
        "seconds": s,
        "kv_bytes": kv,
        "flops": flops,
        "bytes_per_s": kv / s,
        "flops_per_s": flops / s,
    }


def measure_parts(
    out_dir: Path,
    grid: PartsGrid | None = None,
    models: Sequence[PartModel] = PART_MODELS,
    say: Callable[[str], None] = print,
    layers: int | None = None,
    only: Sequence[str] | None = None,
) -> list[Path]:
    """Time every part on the current device and write the CSV files into ``out_dir``.

    Args:
        layers: layers per synthetic rank (default: the model's; fewer for a CPU dry run).
        only: the parts to time (``hbm``, ``host``, ``gemm``, ``sdpa``, ``steps``; all by
            default).

    Returns:
        The files written, in order (each written as soon as its part is timed).
    """
    import torch

    grid = grid or PartsGrid()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    out_dir.mkdir(parents=True, exist_ok=True)
    meta = parts_meta(torch, device)
    say(f"{meta['device_name']} (driver {meta['driver_version']}, torch {meta['torch_version']})")
    timer = Timer(torch, device, grid.warmup, grid.repeats)
    written = []
    every: list[tuple[str, Callable[[], list[dict[str, object]]]]] = [
        ("hbm", lambda: time_hbm(torch, timer, grid.hbm_bytes)),
        (
            "host",
            lambda: time_host_link(
                torch, timer, grid.link_sizes, grid.block_copies, grid.block_bytes
            ),
        ),
        ("gemm", lambda: time_gemms(torch, timer, models, grid.gemm_tokens)),
        ("sdpa", lambda: time_sdpa(torch, timer, models, grid)),
        ("steps", lambda: time_steps(torch, timer, models, grid, layers)),
    ]
    for name, part in every:
        if only is not None and name not in only:
            continue
        t0 = time.perf_counter()
        rows = part()
        written.append(write_rows(out_dir / f"{name}.csv", meta, rows))
        say(f"{name}: {len(rows)} points in {time.perf_counter() - t0:.1f} s")
        if device == "cuda":
            torch.cuda.empty_cache()
    return written
