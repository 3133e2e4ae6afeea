"""``kvsim calibrate``: time the paged vs contiguous decode-attention microkernel on this GPU, or
(``--from-runs``) fit the step cost on measured vLLM runs.

``python -m kvsim.calibrate`` runs the kernel on its own. Without CuPy or a GPU the command says
so and exits with status 2. ``--from-runs`` needs no GPU: the ``kvsim`` command hands it to the
fit of ``kvsim.validate`` (``register(app, from_runs=...)``; this module imports nothing above
it).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from kvsim.calibrate.kernel import CalibrationUnavailableError, KernelShape, import_cupy


def _ints(text: str, option: str) -> tuple[int, ...]:
    """Comma-separated positive integers of at most 2**20 (a kernel launch's sizes).

    Raises:
        ValueError: naming the option and the text.
    """
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"{option}: expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1 or max(values) > 2**20:
        raise ValueError(f"{option}: expected integers in [1, 1048576], got {text!r}")
    return values


def device_slug(name: str) -> str:
    """File-name form of a CUDA device name: ``"NVIDIA H200"`` -> ``"h200"``."""
    slug = name.lower().removeprefix("nvidia").strip()
    return "-".join(slug.replace("_", " ").split()) or "gpu"


FromRuns = Callable[[Path | None, int], None]
FitParts = Callable[[Path, Path | None, str | None], None]
_FROM_RUNS: list[FromRuns] = []  # the --from-runs fit, when the kvsim command registered one
_FIT_PARTS: list[FitParts] = []  # the --fit-parts fit, likewise


# the kernel table's options, without a mode flag (their defaults)
_KERNEL: dict[str, Any] = {
    "batch_sizes": "1,8,32,128",
    "contexts": "64,256,1024,4096,16384,32768",
    "block_sizes": "1,2,4,8,16,32,64,128,256",
    "num_heads": 32,
    "num_kv_heads": 8,
    "head_dim": 128,
    "repeats": 20,
    "warmup": 3,
}


def calibrate(
    out: Annotated[
        Path | None,
        typer.Option(
            help="table to write (.csv or .json); default kvsim/data/calibration/<device>.csv "
            "(--from-runs: a .toml, default the fitted table kvsim reads, "
            "kvsim/data/cost_fit.toml)"
        ),
    ] = None,
    from_runs: Annotated[
        bool,
        typer.Option(
            "--from-runs",
            help="fit the step cost's free parameters on the measured vLLM runs of the train "
            "split ($KVSIM_REAL_VLLM; no GPU), choose on the validate split",
        ),
    ] = False,
    parts: Annotated[
        Path | None,
        typer.Option(
            help="time the step cost's parts with PyTorch instead (HBM read, GEMMs, SDPA, whole "
            "synthetic steps; kvsim.calibrate.parts) and write their CSV files into this folder",
        ),
    ] = None,
    only: Annotated[
        str | None,
        typer.Option(
            help="--parts: the parts to time, comma-separated (hbm, host, gemm, sdpa, steps; "
            "default all)"
        ),
    ] = None,
    fit_parts: Annotated[
        Path | None,
        typer.Option(
            help="fit the step cost's GPU-side parameters on the steps timed by --parts in this "
            "folder (no GPU) and write results/calibration/<gpu>-steps.toml (or --out)",
        ),
    ] = None,
    gpu: Annotated[
        str | None,
        typer.Option(help="--fit-parts: the GPU preset (default: from the files' device name)"),
    ] = None,
    max_evaluations: Annotated[
        int,
        typer.Option(
            min=2,
            max=10_000,
            help="--from-runs: the fit's evaluations of its loss, each a replay of the train set "
            "(its finite-difference steps replay it more)",
        ),
    ] = 40,
    batch_sizes: Annotated[str, typer.Option(help="sequences per launch")] = _KERNEL["batch_sizes"],
    contexts: Annotated[str, typer.Option(help="tokens per sequence")] = _KERNEL["contexts"],
    block_sizes: Annotated[str, typer.Option(help="paged block sizes, tokens")] = _KERNEL[
        "block_sizes"
    ],
    num_heads: Annotated[int, typer.Option(min=1, max=1024, help="query heads")] = _KERNEL[
        "num_heads"
    ],
    num_kv_heads: Annotated[int, typer.Option(min=1, max=1024, help="KV heads (GQA)")] = _KERNEL[
        "num_kv_heads"
    ],
    head_dim: Annotated[int, typer.Option(help="elements per head: 64, 128 or 256")] = _KERNEL[
        "head_dim"
    ],
    repeats: Annotated[
        int, typer.Option(min=1, max=10_000, help="timed launches per point (median kept)")
    ] = _KERNEL["repeats"],
    warmup: Annotated[
        int, typer.Option(min=0, max=10_000, help="untimed launches per point")
    ] = _KERNEL["warmup"],
) -> None:
    """Time paged vs contiguous KV reads or the step cost's parts on a GPU; fit them without one.

    Modes: --parts (time the step cost's parts), --fit-parts (fit them), --from-runs (fit the
    step cost on measured vLLM runs). Without a mode flag: the kernel table (--batch-sizes,
    --contexts, --block-sizes, --num-heads, --num-kv-heads, --head-dim, --repeats, --warmup
    apply to it alone).
    """
    modes = [
        flag
        for flag, on in (
            ("--from-runs", from_runs),
            ("--parts", parts is not None),
            ("--fit-parts", fit_parts is not None),
        )
        if on
    ]
    misplaced = [
        f"{flag} applies to {needs} only"
        for flag, on, needs in (
            ("--only", only is not None, "--parts"),
            ("--gpu", gpu is not None, "--fit-parts"),
        )
        if on and needs not in modes
    ]
    given = {  # (given with a mode, they were read by nothing)
        "batch_sizes": batch_sizes,
        "contexts": contexts,
        "block_sizes": block_sizes,
        "num_heads": num_heads,
        "num_kv_heads": num_kv_heads,
        "head_dim": head_dim,
        "repeats": repeats,
        "warmup": warmup,
    }
    if modes:
        misplaced += [
            f"--{name.replace('_', '-')} applies to the kernel table only (no mode flag), not "
            f"{modes[0]}"
            for name, value in given.items()
            if value != _KERNEL[name]
        ]
    if len(modes) > 1 or misplaced:
        problem = f"choose one of {modes}" if len(modes) > 1 else misplaced[0]
        typer.echo(f"error: kvsim calibrate: {problem}", err=True)
        raise typer.Exit(2)
    if from_runs:
        if not _FROM_RUNS:
            typer.echo(
                "error: --from-runs needs the kvsim command (kvsim calibrate --from-runs)", err=True
            )
            raise typer.Exit(2)
        _FROM_RUNS[0](out, max_evaluations)
        return
    if fit_parts is not None:
        if not _FIT_PARTS:
            typer.echo("error: --fit-parts needs the kvsim command (kvsim calibrate)", err=True)
            raise typer.Exit(2)
        _FIT_PARTS[0](fit_parts, out, gpu)
        return
    if parts is not None:
        from kvsim.calibrate.parts import measure_parts

        names = None if only is None else [n.strip() for n in only.split(",") if n.strip()]
        known = ("hbm", "host", "gemm", "sdpa", "steps")
        if names is not None and (not names or set(names) - set(known)):
            typer.echo(f"error: --only: expected names from {list(known)}, got {only!r}", err=True)
            raise typer.Exit(2)
        try:
            import torch  # noqa: F401
        except ImportError:
            typer.echo(
                "error: kvsim calibrate --parts needs PyTorch (not installed: "
                "pip install 'kvsim[parts]')",
                err=True,
            )
            raise typer.Exit(2) from None
        for path in measure_parts(parts, say=typer.echo, only=names):
            typer.echo(f"wrote {path}")
        return
    from kvsim.calibrate.run import CalibrationGrid, run_calibration

    try:
        if out is not None and (out.is_dir() or out.suffix.lower() not in (".csv", ".json")):
            raise ValueError(f"--out: expected a .csv or .json file, got {str(out)!r}")
        grid = CalibrationGrid(
            batch_sizes=_ints(batch_sizes, "--batch-sizes"),
            context_tokens=_ints(contexts, "--contexts"),
            block_sizes=_ints(block_sizes, "--block-sizes"),
            shape=KernelShape(num_heads, num_kv_heads, head_dim),
            warmup=warmup,
            repeats=repeats,
        )
        cp = import_cupy()  # after the arguments: a typo is named even without a GPU
    except (CalibrationUnavailableError, ValueError) as err:
        typer.echo(f"error: kvsim calibrate: {err}", err=True)
        raise typer.Exit(2) from None
    table = run_calibration(grid, progress=typer.echo)
    if out is None:
        name = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"]
        name = name.decode() if isinstance(name, bytes) else str(name)
        out = Path("kvsim/data/calibration") / f"{device_slug(name)}.csv"
    table.save(out)
    typer.echo(f"paged / contiguous kernel time, median over the grid ({table.describe()}):")
    for block, ratio in table.ratios_by_block_size().items():
        typer.echo(
            f"  block {block:4d}: {ratio:5.2f}x  ({100 * (ratio - 1):+.0f} %; paper: +20-26 %)"
        )
    typer.echo(f"wrote {out}")


def register(
    app: typer.Typer, from_runs: FromRuns | None = None, fit_parts: FitParts | None = None
) -> None:
    """Add the ``calibrate`` command to the ``kvsim`` app (``from_runs``, ``fit_parts``: what
    ``--from-runs`` and ``--fit-parts`` run)."""
    if from_runs is not None and not _FROM_RUNS:
        _FROM_RUNS.append(from_runs)
    if fit_parts is not None and not _FIT_PARTS:
        _FIT_PARTS.append(fit_parts)
    app.command("calibrate")(calibrate)
