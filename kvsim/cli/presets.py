"""``kvsim presets``: the shipped models, GPUs, workloads, experiments and plans."""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from kvsim.cli.common import guard, print_whole

KINDS = ("models", "gpus", "workloads", "experiments", "plans")
PROSE_WIDTH = 80  # characters of a description column's line


def described_table(folder: Path, title: str, hint: str) -> Table:
    """The TOML files of ``folder``, a row each: the name and its ``description`` (or the first
    sentence of its leading comment), wrapped at ``PROSE_WIDTH``."""
    table = Table(title=f"{title} ({hint})", title_justify="left")
    table.add_column("name")
    table.add_column("what", max_width=PROSE_WIDTH)  # (prose wraps: piped, it ran 900 wide)
    for path in sorted(folder.glob("*.toml")):
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        text = str(data.get("description", "")) or _first_comment(path)
        table.add_row(path.stem, text)
    return table


def _first_comment(path: Path) -> str:
    """The first sentence of the file's leading comment block (which may span lines)."""
    lines: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            if lines:
                break
            continue
        lines.append(line.lstrip("#").strip())
    text = " ".join(lines)
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]


def _models() -> Table:
    from kvsim.config import ModelSpec, preset_table

    table = Table(
        title="models (model = NAME; KV KiB/token: every layer keeping KV for the token, a\n"
        "sliding one while the token is in its window)",
        title_justify="left",
    )
    columns = ("name", "layers", "sliding (window)", "state", "kv heads", "head dim")
    for col in (*columns, "KV KiB/token", "params (B)"):
        table.add_column(col)
    for name, m in preset_table("models").items():
        spec = ModelSpec.model_validate(m)
        attention = spec.attention
        sliding = state = "-"
        if attention is not None and attention.num_sliding_layers:
            sliding = f"{attention.num_sliding_layers} ({attention.sliding_window_tokens:,})"
        if attention is not None and attention.num_state_layers:
            state = str(attention.num_state_layers)
        table.add_row(
            name,
            str(m["num_layers"]),
            sliding,
            state,
            str(m["num_kv_heads"]),
            str(m["head_dim"]),
            f"{spec.bytes_per_token / 1024:g}",
            f"{m['num_params'] / 1e9:.1f}",
        )
    return table


def _gpus() -> Table:
    from kvsim.config import preset_table

    table = Table(title="GPUs (gpu = NAME)", title_justify="left")
    for col in ("name", "memory (GiB)", "HBM (TB/s)", "FP16 (TFLOP/s)"):
        table.add_column(col)
    for name, g in preset_table("gpus").items():
        table.add_row(
            name,
            f"{g['memory_bytes'] / 2**30:.1f}",
            f"{g['hbm_bandwidth_bytes_per_s'] / 1e12:.2f}",
            f"{g['fp16_flops_per_s'] / 1e12:.0f}",
        )
    return table


def presets(
    kind: Annotated[
        str | None,
        typer.Argument(help="models, gpus, workloads, experiments or plans (default: all)."),
    ] = None,
) -> None:
    """List the shipped presets: models, GPUs, workloads, experiments and plans."""

    def go() -> None:
        from kvsim.presets import experiments_dir, plans_dir, workloads_dir

        if kind is not None and kind not in KINDS:
            raise ValueError(f"presets: unknown kind {kind!r}; choose from {', '.join(KINDS)}")
        tables: dict[str, Callable[[], Table]] = {
            "models": _models,
            "gpus": _gpus,
            "workloads": lambda: described_table(workloads_dir(), "workloads", "workload = NAME"),
            "experiments": lambda: described_table(
                experiments_dir(), "experiments", "kvsim sweep experiments/NAME.toml"
            ),
            "plans": lambda: described_table(plans_dir(), "plans", "kvsim plan NAME"),
        }
        for name in KINDS if kind is None else (kind,):
            print_whole(tables[name]())

    guard(go)


def register(app: typer.Typer) -> None:
    """Add ``presets`` to the ``kvsim`` app."""
    app.command("presets")(presets)
