"""``kvsim validate RUN...``: replay measured real-vLLM runs and compare, request by request.

``kvsim validate codellama-34b-tp2-codegen`` replays one run (any unique part of its name, or a
group: ``train``, ``validate``, ``held-out``, ``all``) on its own model, GPU, parallelism, KV pool
and scheduler settings at its recorded arrivals, and writes under ``--out``: ``requests.csv``
(per request, measured and predicted TTFT, E2E, TPOT, queue time), ``errors.csv`` (per load
stage: the error of mean, p50, p90, p99), ``kv_usage.csv`` (where vLLM logged its own) and
``replay.png``. ``--table`` writes the error table of ``make validate`` (the held-out runs beside
the peers', the train runs apart, the fitted efficiencies) and, with ``--docs``, puts it into
that Markdown file. The measured runs are read from ``$KVSIM_REAL_VLLM``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer

from kvsim.cli.common import check_out_dir, check_out_file, console, folder_name, guard


def validate(
    runs: Annotated[
        list[str] | None,
        typer.Argument(
            help="Runs to replay (one at least, unless --table): names, unique parts of names, "
            "or a group: train, validate, held-out, all."
        ),
    ] = None,
    out: Annotated[Path, typer.Option(parser=folder_name, help="Folder for the outputs.")] = Path(
        "results/validate"
    ),
    table: Annotated[
        bool, typer.Option("--table", help="Write the error table of every run (make validate).")
    ] = False,
    docs: Annotated[
        Path | None, typer.Option(help="With --table: the Markdown file to put the table in.")
    ] = None,
    readme: Annotated[
        Path | None,
        typer.Option(help="With --table: the Markdown file to put the short table in."),
    ] = None,
    cost: Annotated[
        str | None, typer.Option(help="A cost preset instead of the fitted table (e.g. lean).")
    ] = None,
) -> None:
    """Replay measured vLLM runs in kvsim and compare latency (and KV usage) per request."""

    def go() -> None:
        from kvsim.config import CostSpec
        from kvsim.config.hardware import resolve_preset
        from kvsim.validate.catalog import list_runs, resolve_names

        check_out_dir(out)  # (before replaying: an OS error after it named no option)
        for option, path in (("--docs", docs), ("--readme", readme)):
            _check_markdown(option, path, table)
        if cost is not None:
            try:
                resolve_preset("costs", cost)
            except ValueError as err:  # (CostSpec's own message is pydantic's, many lines)
                raise ValueError(f"--cost: {err}") from None
        spec = CostSpec.model_validate(cost) if cost is not None else None
        if table:
            if runs:  # (the table is every run's: names would be ignored)
                raise ValueError(
                    f"--table replays every run; give run names ({' '.join(runs)}) without "
                    "--table, or --table alone"
                )
            _table(out, docs, readme, spec, cost)
            return
        if not runs:
            names = ", ".join(sorted(list_runs()))
            raise ValueError(
                f"name a run to replay (or a group: train, validate, held-out, all): {names}"
            )
        chosen = resolve_names(runs)
        for name in chosen:  # (before any replay: one refused after minutes lost them)
            check_replay_folder(out / name)
        for name in chosen:
            _one(name, out / name, spec)

    guard(go)


def _check_markdown(option: str, path: Path | None, table: bool) -> None:
    """Check ``--docs`` or ``--readme`` before the replays: given with ``--table``, a Markdown
    file that can be written.

    Raises:
        ValueError: ``path`` given without ``--table``, not a ``.md`` file, in no folder, or
            not writable.
    """
    if path is None:
        return
    if not table:
        raise ValueError(
            f"{option} {str(path)!r} needs --table (the file --table writes its table into); "
            f"add --table or leave {option} out"
        )
    check_out_file(path, option, "a Markdown file", suffixes=(".md",))
    from kvsim.validate.markdown import markdown_text

    markdown_text(path, option)  # (its markers and text, before the replays: not after them)
    if not path.parent.is_dir():  # (the table is written into it after every replay)
        raise ValueError(
            f"{option}: the folder {str(path.parent)!r} of {str(path)!r} does not exist; create "
            "it or give a file in a folder that does"
        )


# the files a replay writes in its run's folder (``_one``)
REPLAY_FILES = ("requests.csv", "errors.csv", "kv_usage.csv", "replay.png")


def check_replay_folder(folder: Path) -> None:
    """Refuse a run's output folder that a replay would overwrite or mix with what the user
    has: a file in its place, or a folder holding files that are not an earlier replay's (one
    with ``errors.csv`` of a replay's columns, whose files the new replay replaces).

    Raises:
        ValueError: naming ``--out``, the folder and the first few files it holds."""
    if folder.exists() and not folder.is_dir():
        raise ValueError(
            f"--out: {str(folder)!r} is a file, where the run's replay writes a folder"
        )
    if not folder.is_dir():
        return
    held = sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))
    if not held:
        return
    earlier = False
    try:
        with (folder / "errors.csv").open(encoding="utf-8") as handle:
            earlier = handle.readline().startswith("experiment,split,stage,")
    except (OSError, UnicodeDecodeError):
        pass
    if earlier and set(held) <= set(REPLAY_FILES):
        return
    first = ", ".join(held[:3]) + (f" and {len(held) - 3:,} more" if len(held) > 3 else "")
    raise ValueError(
        f"--out: {str(folder)!r} holds files of its own ({first}) and no earlier replay: the "
        "replay would overwrite or mix with them; choose another --out"
    )


def _one(name: str, folder: Path, cost: object) -> None:
    from kvsim.config import CostSpec
    from kvsim.validate.catalog import load_run
    from kvsim.validate.errors import kv_usage_error, stage_errors
    from kvsim.validate.replay import replay_run
    from kvsim.view.validate_plots import replay_figure

    run = load_run(name)
    replay = replay_run(run, cost if isinstance(cost, CostSpec) else None)
    folder.mkdir(parents=True, exist_ok=True)
    replay.requests.to_csv(folder / "requests.csv", index=False)
    errors = stage_errors(replay)
    errors.to_csv(folder / "errors.csv", index=False)
    if replay.kv_usage is not None:
        replay.kv_usage.to_csv(folder / "kv_usage.csv", index=False)
    replay_figure(replay.requests, replay.kv_usage, title=name).savefig(
        folder / "replay.png", dpi=110
    )
    whole = errors[errors["stage"] == errors["stage"].min()]
    counts = f"{len(run.measured)} requests measured, {run.num_left_out} left out"
    console.print(f"[bold]{name}[/] ({run.split}; {counts})")
    for metric in ("e2e_s", "ttft_s", "tpot_s"):
        part = whole[whole["metric"] == metric].set_index("statistic")["error_pct"]
        shown = "  ".join(f"{s} {part[s]:+.1f} %" for s in part.index)
        console.print(f"  {metric:7s} {shown}")
    kv = kv_usage_error(replay)
    if kv is not None:
        console.print(f"  KV usage: mean |kvsim - vLLM| {kv['kv_mean_abs_diff_points']:.2f} points")
    print_notes(run.notes)
    say(f"  wrote {folder}/")


def say(text: str) -> None:
    """Print ``text`` as written (paths and notes may hold ``[...]``, which Rich reads as
    style tags)."""
    console.print(text, highlight=False, markup=False)


def print_notes(notes: Sequence[str]) -> None:
    """A run's notes as written (``[offload]`` is text here, not a Rich style)."""
    for note in notes:
        say(f"  not modelled / assumed: {note}")


def _table(
    out: Path, docs: Path | None, readme: Path | None, cost: object, cost_name: str | None
) -> None:
    from kvsim.config import CostSpec
    from kvsim.validate.markdown import (
        efficiencies_markdown,
        held_out_markdown,
        readme_markdown,
        train_markdown,
        write_between_markers,
    )
    from kvsim.validate.table import build_table, efficiencies

    spec = cost if isinstance(cost, CostSpec) else None
    fitted = build_table(cost=spec, progress=say)
    held = [n for n in fitted.replays if fitted.replays[n].run.split in ("validate", "held-out")]
    before = build_table(
        held, cost=CostSpec.model_validate("lean"), frontend_latency_s=0.0, progress=say
    )
    out.mkdir(parents=True, exist_ok=True)
    fitted.errors.to_csv(out / "errors.csv", index=False)
    fitted.headline.to_csv(out / "table.csv", index=False)
    before.headline.to_csv(out / "table_before.csv", index=False)
    command = "make validate" + (f" (cost {cost_name})" if cost_name else "")
    text = "\n\n".join(
        [
            "### Held-out runs: the validate split and the RTX 4090 run",
            held_out_markdown(fitted, before, command),
            "### Train runs (fitted on: not a measure of prediction)",
            train_markdown(fitted),
            "### Efficiencies the fit found, beside the datasheet peaks",
            efficiencies_markdown(efficiencies()),
        ]
    )
    (out / "table.md").write_text(text + "\n", encoding="utf-8")
    say(text)
    if docs is not None:
        write_between_markers(docs, text)
        say(f"wrote the table into {docs}")
    if readme is not None:
        write_between_markers(readme, readme_markdown(fitted, command), "--readme")
        say(f"wrote the short table into {readme}")
    say(f"wrote {out}/table.md, table.csv, errors.csv")


def register(app: typer.Typer) -> None:
    """Add ``validate`` to the ``kvsim`` app."""
    app.command("validate")(validate)
