"""``kvsim compare RUN_A RUN_B``: two runs' summaries side by side with their differences."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from kvsim.cli.common import console, guard, print_whole


def load_summary(folder: Path) -> dict[str, Any]:
    """A run's ``summary.json`` (a folder written by ``kvsim run --out``, a sweep point, or the
    file itself); ``null`` metrics read as NaN.

    Raises:
        ValueError: no such file, or not UTF-8, invalid JSON, not a JSON object, a value
            ``read_summary`` refuses, or no run's (no ``config_key``), naming it.
    """
    path = folder / "summary.json" if folder.is_dir() else folder
    if not path.is_file() or path.suffix != ".json":  # (a run's folder or its summary.json)
        from kvsim.results.folders import check_folder

        check_folder(folder, "run", str(folder))  # (says what it is instead)
    from kvsim.results import read_summary
    from kvsim.results.tables import is_run_summary

    summary = read_summary(path)
    if not is_run_summary(summary):  # ({} printed a table of dashes)
        raise ValueError(
            f"{path}: not a kvsim run's summary (no config_key); expected the summary.json "
            "of kvsim run --out, or a sweep point's"
        )
    return summary


def compare(
    run_a: Annotated[Path, typer.Argument(help="A results folder (kvsim run --out A).")],
    run_b: Annotated[Path, typer.Argument(help="Another results folder.")],
) -> None:
    """Print two runs' summaries side by side with their differences (B - A)."""

    def go() -> None:
        from kvsim.view.summary import compare_table

        a, b = load_summary(run_a), load_summary(run_b)
        if _folder(run_a).resolve() == _folder(run_b).resolve():
            raise ValueError(
                f"{str(run_a)!r} and {str(run_b)!r} are the same run; give two runs to compare"
            )
        print_whole(compare_table(a, b, str(run_a), str(run_b)))
        note = replicas_note(a, b, str(run_a), str(run_b))
        if note:
            console.print(note, highlight=False, markup=False)
        try:
            differs = config_differences(_folder(run_a), _folder(run_b))
        except ValueError as err:  # (the summaries compare all the same)
            console.print(f"configs not compared: {err}", highlight=False, markup=False)
            return
        if differs:
            console.print(f"configs differ in: {differs}", highlight=False, markup=False)
        note = workload_note(a, b, _folder(run_a), _folder(run_b))
        if note:
            console.print(note, highlight=False, markup=False)

    guard(go)


def replicas_note(a: dict[str, Any], b: dict[str, Any], name_a: str, name_b: str) -> str:
    """A note when the runs have different numbers of replicas (``num_replicas``, 1 for a
    single engine's run): a fleet's gauges and KV shares are its replicas' means and its
    counters their sums (``kvsim.fleet.summary``), so a row reads per replica or per fleet;
    ``""`` where both have as many."""
    counts = [int(s.get("num_replicas") or 1) for s in (a, b)]
    if counts[0] == counts[1]:
        return ""
    shown = [
        f"{name} {n} replica{'s' if n > 1 else ''}"
        for name, n in zip((name_a, name_b), counts, strict=True)
    ]
    return (
        f"note: {' and '.join(shown)}: a fleet's gauges and KV shares (num_requests_running, "
        "kv_cache_usage_perc, token states...) are its replicas' means, weighted by the time "
        "each was busy, and its counters (num_steps, num_preemptions...) their sums; latencies "
        "and throughputs are the whole fleet's"
    )


def workload_note(a: dict[str, Any], b: dict[str, Any], folder_a: Path, folder_b: Path) -> str:
    """A note when two runs whose configs give the same ``workload`` table served different
    requests (their prompt or output token totals differ): parametric lengths are drawn below
    each run's ``max_model_len`` and a trace's rows are filtered by it, so a model with
    another context draws another workload from the same preset; ``""`` otherwise (or where a
    ``config.json`` cannot be read: ``config_differences`` says so)."""
    from kvsim.base.textfile import read_json

    try:
        tables = [read_json(f / "config.json").get("workload") for f in (folder_a, folder_b)]
    except (OSError, ValueError, AttributeError):
        return ""
    totals = [(s.get("prompt_tokens_total"), s.get("generation_tokens_total")) for s in (a, b)]
    if tables[0] != tables[1] or totals[0] == totals[1]:
        return ""

    def shown(value: Any) -> str:
        return f"{value:,}" if isinstance(value, int) else str(value)

    lengths = ""
    if a.get("max_model_len") != b.get("max_model_len"):
        lengths = f" ({shown(a.get('max_model_len'))} -> {shown(b.get('max_model_len'))})"
    return (
        "note: the runs' workloads are configured alike but served different requests (prompt "
        f"tokens {shown(totals[0][0])} -> {shown(totals[1][0])}, output tokens "
        f"{shown(totals[0][1])} -> {shown(totals[1][1])}): lengths are drawn, or trace rows "
        f"kept, below each run's max_model_len{lengths}, so the rows above compare two workloads"
    )


def _folder(run: Path) -> Path:
    """The run's folder (``run`` may name its ``summary.json``)."""
    return run if run.is_dir() else run.parent


def config_differences(a: Path, b: Path, most: int = 8) -> str:
    """The dotted config fields whose values differ between the runs in folders ``a`` and ``b``
    (their ``config.json``), each as ``field (A -> B)``, marked where one run's config does not
    read it (``kvsim.config.ignored``: a paged pool's reservation rule) and left out where
    neither does; at most ``most`` then a count; ``""`` where they agree.

    Raises:
        ValueError: a folder's ``config.json`` is missing, unreadable or not a valid config
            (naming the file)."""
    from pydantic import ValidationError

    from kvsim.base.say_once import held_back
    from kvsim.base.textfile import read_json
    from kvsim.config import SimConfig
    from kvsim.config.ignored import moot_reason
    from kvsim.config.sim import dotted_fields, format_validation_error

    configs = []
    for path in (a / "config.json", b / "config.json"):
        try:
            data = read_json(path)
            with held_back():  # (the runs said their configs' warnings when they ran)
                configs.append((data, SimConfig.model_validate(data)))
        except FileNotFoundError:
            raise ValueError(f"{path} is missing") from None
        except ValidationError as err:
            said = format_validation_error(err).splitlines()[0]
            raise ValueError(f"{path} is not a readable config ({said})") from None
        except (OSError, ValueError) as err:
            raise ValueError(f"{path} is not a readable config ({err})") from None
    (one, ca), (two, cb) = configs
    fa, fb = dotted_fields(one), dotted_fields(two)
    keys, shown = [], []
    for k in dict.fromkeys([*fa, *fb]):
        if fa.get(k) == fb.get(k):
            continue
        unread = [n for n, c, d in (("A", ca, one), ("B", cb, two)) if moot_reason(c, d, k)]
        if len(unread) == 2:
            continue
        keys.append(k)
        shown.append(
            f"{k} ({fa.get(k, '-')} -> {fb.get(k, '-')}"
            + (f"; {unread[0]} does not read it)" if unread else ")")
        )
    shown = shown[:most]
    more = f" and {len(keys) - most} more" if len(keys) > most else ""
    return ", ".join(shown) + more


def register(app: typer.Typer) -> None:
    """Add ``compare`` to the ``kvsim`` app."""
    app.command("compare")(compare)
