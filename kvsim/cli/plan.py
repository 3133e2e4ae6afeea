"""``kvsim plan``: the smallest KV budget (or largest rate, smallest TP, largest max_num_seqs)
that meets latency targets, by bisection over cached sweep points.

    kvsim plan --smallest kv --target "time_to_first_token_seconds_p99<=2" \\
        --set workload=azure_conv --set workload.rate_per_s=5
    kvsim plan bursty-kv            # a shipped question (kvsim plan --list)
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from rich.markup import escape
from rich.table import Table

from kvsim.base.textfile import read_text, read_toml, toml_key_line
from kvsim.cli.common import (
    NoProgress,
    check_out_dir,
    console,
    folder_name,
    guard,
    not_an_override,
    parse_overrides,
    print_whole,
    refuse_results,
    say_if_another_answer_goes,
    warn_many_jobs,
)
from kvsim.config.file_kinds import EXPERIMENT_KEYS, PLAN_KEYS, check_kind, file_kinds
from kvsim.view.labels import (
    LATENCY_SHORT_NAMES,
    metric_unit,
)

QUICK_SET = {"workload.num_requests": 100}  # --quick's small runs on a config (no [quick] table)
ALIASES = {
    "kv": "cache.kv_cache_gib",
    "kv_cache_gib": "cache.kv_cache_gib",
    "rate": "workload.rate_per_s",
    "rate_per_s": "workload.rate_per_s",
    "tp": "parallel.tensor_parallel_size",
    "tensor_parallel_size": "parallel.tensor_parallel_size",
    "max_num_seqs": "scheduler.max_num_seqs",
}


def _source(source: str | None) -> tuple[Path | None, bool]:
    """``(path, is_plan)``: a shipped plan name, a plan TOML (``kvsim.config.file_kinds``) or a
    config; an experiment or a workload preset is refused, naming the command that runs it."""
    from kvsim.presets import plans_dir

    if source is None:
        return None, False
    shipped = plans_dir() / f"{source}.toml"
    if not source.endswith(".toml") and shipped.is_file():
        return shipped, True
    path = Path(source)
    refuse_results(path, "a config or plan TOML")
    if path.is_dir():
        raise ValueError(f"plan: {source!r} is a folder; give a config or plan TOML file")
    if not path.is_file():
        from kvsim.presets import names as preset_names

        names = ", ".join(preset_names(plans_dir()))
        raise ValueError(
            f"plan: {source!r} is neither a file nor a shipped plan (shipped: {names})"
        )
    data = read_toml(path)
    check_kind(path, data, "config", "plan")
    kinds = file_kinds(data)
    if not kinds:  # (a key of no kind: a plan's own keys make it one, whose check names it)
        return path, bool(set(data) & (PLAN_KEYS - EXPERIMENT_KEYS))
    return path, "plan" in kinds and "config" not in kinds


def _fmt(value: Any, metric: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    unit = metric_unit(metric)
    text = f"{value:.4g}" if isinstance(value, float) else str(value)
    return f"{text} {unit}" if unit and unit != "count" else text


def plan(
    source: Annotated[
        str | None,
        typer.Argument(
            help="A shipped plan (kvsim plan --list), a plan TOML, or a config TOML "
            "(default: the built-in config).",
            callback=not_an_override,
        ),
    ] = None,
    smallest: Annotated[
        str | None,
        typer.Option(help="Knob to minimise: kv (cache.kv_cache_gib), tp, or a dotted field."),
    ] = None,
    largest: Annotated[
        str | None,
        typer.Option(help="Knob to maximise: rate, max_num_seqs, or a dotted field."),
    ] = None,
    target: Annotated[
        list[str] | None,
        typer.Option(
            metavar="METRIC<=BOUND", help="An upper bound, repeatable (metric names: below)."
        ),
    ] = None,
    lo: Annotated[float | None, typer.Option(help="Bracket's low end (knob units).")] = None,
    hi: Annotated[float | None, typer.Option(help="Bracket's high end (knob units).")] = None,
    resolution: Annotated[
        float | None, typer.Option(help="Stop when hi/lo <= 1 + RESOLUTION (real knobs).")
    ] = None,
    min_window_s: Annotated[
        float | None,
        typer.Option(
            "--window",
            metavar="SECONDS",
            help="With --largest rate: each rate draws at least this many seconds of arrivals "
            "(default 600; not in --quick runs).",
        ),
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set", metavar="KEY=VALUE", help="Override a config field, e.g. workload.rate_per_s=5"
        ),
    ] = None,
    name: Annotated[str | None, typer.Option(help="Results folder name (OUT/plan/NAME).")] = None,
    out: Annotated[Path, typer.Option(parser=folder_name, help="Results root.")] = Path("results"),
    jobs: Annotated[
        int,
        typer.Option(
            "-j",
            "--jobs",
            min=1,
            metavar="N",
            help="Processes: this one and N-1 workers share each round's 2 points.",
        ),
    ] = 1,
    draws: Annotated[
        int | None,
        typer.Option(
            min=0,
            max=20,
            metavar="N",
            help="Run the answer on N other draws of the workload (seeds after the config's) "
            "and say whether it holds there (0: none; default 2).",
        ),
    ] = None,
    quick: Annotated[
        bool,
        typer.Option(
            "--quick",
            help="Small runs to try a question in seconds: a named plan's \\[quick] table, "
            "else 100 requests a point; a field --set gives keeps its value.",
        ),
    ] = False,
    no_progress: NoProgress = False,
    list_: Annotated[bool, typer.Option("--list", help="List the shipped plans.")] = False,
    cheapest: Annotated[
        bool,
        typer.Option(
            "--cheapest",
            help="Find the cheapest fleet meeting the targets: GPU type x TP x replicas "
            "(x --split), priced per GPU-hour by the price table.",
        ),
    ] = False,
    gpus: Annotated[
        str | None,
        typer.Option(
            metavar="LIST",
            help="With --cheapest: GPU presets, comma-separated (default: H100, H200, A100 80GB).",
        ),
    ] = None,
    tp: Annotated[
        str | None,
        typer.Option(
            metavar="LIST", help="With --cheapest: TP sizes, comma-separated (default 1,2,4,8)."
        ),
    ] = None,
    split: Annotated[
        list[str] | None,
        typer.Option(
            metavar="P:D",
            help="With --cheapest: also disaggregated fleets, P prefill and D decode replicas "
            "per unit (repeatable).",
        ),
    ] = None,
    max_replicas: Annotated[
        int | None,
        typer.Option(
            "--replicas", metavar="N", help="With --cheapest: most replicas of one kind (16)."
        ),
    ] = None,
    scheduler: Annotated[
        str | None,
        typer.Option(
            metavar="ADDRESS",
            help="Run the points on Dask: 'local' or tcp://HOST:PORT (as kvsim sweep).",
        ),
    ] = None,
) -> None:
    """Find the smallest KV budget, largest rate, smallest TP or largest max_num_seqs for targets.

    Prints the answer, its margin and the binding target, and draws the curve with the target
    lines and the answer (OUT/plan/NAME/plan.png). A named plan answers its own question: to ask
    another (--smallest, --largest, --target) on its config, give --name for its results.
    """
    from kvsim.base.units import plural
    from kvsim.config import apply_overrides, config_from_dict
    from kvsim.study.plan import (
        QuickSetError,
        Target,
        UnknownConfigFieldError,
        failure,
        format_value,
        is_unknown_field,
        load_plan,
        other_draws,
        plan_folder,
        plan_from_dict,
        quick_overrides,
        run_plan,
        tightest,
    )
    from kvsim.study.plan_figure import save_plan
    from kvsim.study.sweep import PointBar

    if list_:
        _list_plans()
        return

    def go() -> None:
        check_out_dir(out)
        warn_many_jobs(jobs)
        if smallest and largest:
            raise ValueError("plan: give --smallest or --largest, not both")
        path, is_plan = _source(source)
        fleet_flags = [
            flag
            for flag, value in (
                ("--gpus", gpus),
                ("--tp", tp),
                ("--split", split),
                ("--replicas", max_replicas),
            )
            if value is not None
        ]
        if fleet_flags and not cheapest:  # (they shape the fleet search alone)
            raise ValueError(
                f"plan: {', '.join(fleet_flags)} shape --cheapest's search of fleets; add "
                "--cheapest, or set the fleet in the config (--set fleet.replicas=N, "
                "--set gpu=NAME, --set parallel.tensor_parallel_size=N)"
            )
        if cheapest:
            most = 16 if max_replicas is None else max_replicas
            if not 1 <= most <= 1024:
                raise ValueError(f"--replicas: expected 1 to 1024, got {most}")
            if smallest or largest or is_plan:
                raise ValueError(
                    "plan --cheapest searches GPU type, TP and replicas itself: give a config "
                    "(not a plan) and targets, without --smallest or --largest"
                )
            unused = [
                f"--{flag}"
                for flag, value in (
                    ("lo", lo),
                    ("hi", hi),
                    ("resolution", resolution),
                    ("window", min_window_s),
                    ("draws", draws),
                )
                if value is not None
            ]
            if unused:  # (they shape one knob's search; --replicas bounds the replicas')
                raise ValueError(
                    f"plan --cheapest: {', '.join(unused)} shape a one-knob plan and are not "
                    "read here; the replicas are bounded by --replicas"
                )
            from kvsim.cli.cheapest import run_cheapest_command

            base = _config_table(path)
            set_fields = parse_overrides(set_ or [])
            apply_overrides(base, set_fields)
            try:  # (a misspelt field fails every fleet alike: said once, before any)
                config_from_dict(base, warn=False)
            except ValueError as err:
                if is_unknown_field(str(err)):
                    _place_config_error(path, False, parse_overrides(set_ or []), str(err))
            targets = list(tightest([Target.parse(t) for t in target or []]))
            _check_targets(targets)
            run_cheapest_command(
                base,
                targets,
                gpus=gpus,
                tp=tp,
                splits=split or [],
                max_replicas=most,
                name=name,
                out=out,
                jobs=jobs,
                scheduler=scheduler,
                # (--quick's small runs, but for a count --set gives)
                quick=quick_overrides(QUICK_SET, list(set_fields)) if quick else None,
            )
            return
        question: dict[str, Any] = {}
        knob = smallest or largest
        if knob:
            field = ALIASES.get(knob.replace("-", "_"), knob)
            question.update(field=field, direction="smallest" if smallest else "largest")
        if target:
            parsed = tightest([Target.parse(t) for t in target])
            question["targets"] = {t.metric: t.bound for t in parsed}
        asked = (("lo", lo), ("hi", hi), ("resolution", resolution))
        for key, value in (*asked, ("min_window_s", min_window_s)):
            if value is not None:
                question[key] = value
        overrides = parse_overrides(set_ or [])
        if is_plan:
            assert path is not None
            the_plan = load_plan(path, overrides, **question)
            given = [f"--{o}" for o, v in (("smallest", smallest), ("largest", largest)) if v]
            given += ["--target"] if target else []
            given += ["--window"] if min_window_s is not None else []
            _keep_its_question(str(source), path, overrides, the_plan, given, name, out, quick)
        else:
            if "field" not in question or "targets" not in question:
                raise ValueError(
                    "plan: say what to find (--smallest kv, --largest rate, ...) and at least "
                    "one --target METRIC<=BOUND, or name a plan (kvsim plan --list)"
                )
            base = _config_table(path)
            apply_overrides(base, overrides)
            the_plan = plan_from_dict(  # (a config has no [quick] table: --quick's 100 requests)
                _default_name(question),
                base,
                question,
                {"quick": {"set": QUICK_SET}},
                varied=tuple(overrides),
            )
        if name is not None:  # (an empty --name is refused as a folder name, not ignored)
            the_plan = dataclasses.replace(the_plan, name=name)
        if quick and the_plan.min_window_s is not None:  # (the quick settings draw the arrivals)
            if min_window_s is not None:
                logging.getLogger("kvsim.cli").warning(
                    "plan: --window is not read with --quick (the plan's quick settings draw "
                    "each point's arrivals)"
                )
            the_plan = dataclasses.replace(the_plan, min_window_s=None)
        _keep_other_plans_answers(the_plan.name, path if is_plan else None, out, quick)
        try:
            _check_targets(the_plan.targets)
        except ValueError as err:
            if not is_plan or target:
                raise
            assert path is not None  # (the plan file's own targets: its line)
            line = toml_key_line(read_text(path), "question.targets", set_only=True)
            at = f"{path} line {line}" if line else str(path)
            raise ValueError(
                f"{at}: [question] targets: {str(err).removeprefix('--target: ')}"
            ) from None
        bounds = {t.metric: t.bound for t in the_plan.targets}
        folder = plan_folder(out, the_plan.name, quick=quick)
        say_if_another_answer_goes(
            folder, (the_plan.field, the_plan.direction, bounds, the_plan.min_window_s)
        )
        try:
            the_plan.check_field()
        except UnknownConfigFieldError as err:
            _place_config_error(path, is_plan, overrides, str(err))
        console.print(
            f"plan {the_plan.name}: {the_plan.direction} {the_plan.field} in "
            f"[{the_plan.lo:g}, {the_plan.hi:g}] with "
            + ", ".join(f"{t.metric} <= {t.bound:g}" for t in the_plan.targets)
            + _setup_text(the_plan, quick)
        )
        bar = PointBar(
            desc=the_plan.name,
            unit="pt",
            disable=None if not no_progress else True,  # None: off on a non-terminal
        )

        def show(value: float | int, summary: dict[str, Any], meets: bool) -> None:
            verdict = "[green]meets[/]" if meets else "[red]fails[/]"
            if "error" in summary or summary.get("num_rejected_kv_pool", 0):
                detail = failure(the_plan, summary)
            else:
                detail = ", ".join(
                    f"{t.metric} {_fmt(summary.get(t.metric), t.metric)}" for t in the_plan.targets
                )
            with bar.external_write_mode():  # the line above the bar, not through it
                console.print(
                    f"  {the_plan.field} = {format_value(value, the_plan.field):<8} {verdict}  "
                    f"{escape(detail)}",
                    highlight=False,
                )
            bar.update(1)

        with bar:
            try:
                result = run_plan(
                    the_plan, out, jobs=jobs, quick=quick, on_point=show, scheduler=scheduler
                )
            except QuickSetError as err:  # (a plan file's own [quick] set: its line)
                line = None
                if path is not None and is_plan:
                    line = toml_key_line(read_text(path), f"quick.set.{err.field}", set_only=True)
                if line is None:
                    raise
                raise ValueError(f"{path} line {line}: {err}") from None
        num_draws = 2 if draws is None else draws
        if result.answer is not None and num_draws:
            console.print(
                f"the answer on {plural(num_draws, 'other draw')} of the workload (seed + 1 ...)",
                highlight=False,
            )
        result = other_draws(result, num_draws, jobs=jobs, quick=quick, scheduler=scheduler)
        written = save_plan(result)
        print_whole(_answer_table(result))
        if quick:  # (a few requests a point: a queue past the knee has no time to show)
            console.print(
                "[yellow]note:[/] --quick runs each point on the plan's quick settings (a few "
                "requests) to try the question in seconds; its answer is not one to rely on "
                "(a rate past the knee, say, needs minutes of arrivals to show): rerun without "
                "--quick",
                highlight=False,
            )
        failing = [d.seed for d in result.other_draws if not d.meets]
        if failing:
            seeds = ", ".join(map(str, failing))
            console.print(
                f"[yellow]note:[/] the answer fails its targets on {len(failing)} of "
                f"{plural(len(result.other_draws), 'other draw')} of the workload (seed {seeds}): "
                "where a target crosses its bound moves with the draw; more requests "
                "(workload.num_requests, or --window for a rate) steady it, or take a margin",
                highlight=False,
            )
        if not result.monotone:
            console.print(
                "[yellow]warning:[/] the evaluated points are not monotone in the knob "
                "(see points.csv); the answer is the bisection's and may not be unique"
            )
        console.print(f"wrote {', '.join(str(p) for p in written)}")

    guard(go)


def _asks(the_plan: Any) -> tuple[str, str, tuple[tuple[str, float], ...], float | None]:
    """What a plan asks: its knob, direction, targets and arrival window (not the bracket or
    resolution, which only say where and how finely to look)."""
    targets = tuple(sorted((t.metric, t.bound) for t in the_plan.targets))
    return the_plan.field, the_plan.direction, targets, the_plan.min_window_s


def _setup_text(the_plan: Any, quick: bool) -> str:
    """The plan's setup, a line of its own: model, GPU, allocator and workload (its config at the
    bracket's ``hi``; ``""`` where that is invalid: the search then says why)."""
    from kvsim.cli.run import workload_text
    from kvsim.config import config_from_dict
    from kvsim.study.plan import RATE_FIELD

    spec = the_plan.config(the_plan.hi, quick=quick)
    try:
        config = config_from_dict(spec["data"], spec["overrides"], warn=False)
    except ValueError:
        return ""
    rate = None
    if the_plan.field == RATE_FIELD:  # (not the bracket's top)
        rate = "the rate tried"
        if the_plan.min_window_s is not None and not quick:
            rate += f", at least {the_plan.min_window_s:g} s of arrivals each"
    return (
        f"\n  {config.model.name} on {config.gpu.name}, {config.cache.allocator}; workload: "
        f"{workload_text(config.workload, rate)}"
    )


def _question_text(the_plan: Any) -> str:
    text = f"the {the_plan.direction} {the_plan.field} with " + ", ".join(
        f"{t.metric} <= {t.bound:g}" for t in the_plan.targets
    )
    if the_plan.min_window_s is not None:
        text += f" over at least {the_plan.min_window_s:g} s of arrivals"
    return text


def _keep_its_question(
    source: str,
    path: Path,
    overrides: dict[str, Any],
    asked: Any,
    given: list[str],
    name: str | None,
    out: Path,
    quick: bool,
) -> None:
    """Refuse to answer another question than a named plan's own, or its question on another
    config (``--set`` overrides that change the config it runs), in the plan's folder: its answer
    there would be replaced. With ``--name`` (another folder) the question is asked on the plan's
    config, and said so.

    Args:
        source: the plan as named on the command line.
        path: its file.
        overrides: the ``--set`` fields (they edit the config, not the question).
        asked: the plan with the command line's question.
        given: the question's options on the command line (``--smallest``, ``--target``...).
        name: ``--name``, or ``None``.
        out: the results root.
        quick: ``--quick`` (the plan's folder is ``OUT/plan/quick/NAME``).

    Raises:
        ValueError: ``--set`` changes the plan's config, or ``--smallest``, ``--largest`` or
            ``--target`` change its knob, direction or targets, and ``--name`` does not send the
            results elsewhere.
    """
    from kvsim.study.plan import load_plan, plan_folder

    try:
        own = load_plan(path, overrides)
        plain = load_plan(path) if overrides else own  # as its file has it
    except ValueError:  # the file's [question] is incomplete: the options complete it
        return
    elsewhere = bool(name) and name != own.name
    if overrides and not elsewhere and not _same_configs(plain, own, quick):
        folder = plan_folder(out, own.name, quick=quick)
        raise ValueError(
            f"plan: --set {', '.join(overrides)} changes {source}'s config, so its answer would "
            f"replace the plan's own in {folder}/. Add --name NAME to keep both (e.g. --name "
            f"{own.name}-mine)"
        )
    if _asks(asked) == _asks(own):
        return
    if elsewhere:
        console.print(
            f"plan {name}: {source}'s config with your question, not its own "
            f"({_question_text(own)}; kvsim plan {source} answers that)",
            highlight=False,
        )
        return
    folder = plan_folder(out, own.name, quick=quick)
    verb = "asks" if len(given) == 1 else "ask"
    raise ValueError(
        f"plan: {source} asks for {_question_text(own)}; {'/'.join(given)} {verb} for "
        f"{_question_text(asked)}, whose answer would replace its own in {folder}/. Run the plan "
        f"as shipped (kvsim plan {source}), add --name NAME to ask your question of {source}'s "
        "config, or ask it of a config of your own (kvsim plan CONFIG.toml ...)"
    )


def _same_configs(plain: Any, changed: Any, quick: bool) -> bool:
    """The two plans (one question) run the same configs: equal once validated at the knob's
    first, middle and last candidates (``--set cache.kv_cache_gib=2`` restating the plan's own
    value changes nothing), or, where neither validates at any of them, equal tables."""
    from kvsim.study.plan import candidates

    grid = candidates(plain)
    validated = False
    for x in (grid[0], grid[len(grid) // 2], grid[-1]):
        ours, theirs = _resolved(plain, x, quick), _resolved(changed, x, quick)
        if ours != theirs:
            return False
        validated = validated or not ours.startswith("error: ")
    return validated or plain.config(plain.hi, quick=quick) == changed.config(
        changed.hi, quick=quick
    )


def _resolved(the_plan: Any, x: float, quick: bool) -> str:
    """The plan's config at knob value ``x`` as canonical JSON, or ``"error: ..."``."""
    from kvsim.config import config_from_dict

    spec = the_plan.config(x, quick=quick)
    try:  # no warnings: this config is only compared (the run says its own)
        return config_from_dict(spec["data"], spec["overrides"], warn=False).canonical_json()
    except ValueError as err:
        return f"error: {err}"


def _keep_other_plans_answers(name: str, path: Path | None, out: Path, quick: bool) -> None:
    """Refuse results under a shipped plan's name (``OUT/plan/NAME``) unless they are that plan's
    own (its file, whose question and config ``_keep_its_question`` keeps).

    Raises:
        ValueError: ``name`` is a shipped plan's and ``path`` is not its file.
    """
    from kvsim.presets import names, plans_dir
    from kvsim.study.plan import plan_folder

    if name not in names(plans_dir()):
        return
    if path is not None and path.resolve() == (plans_dir() / f"{name}.toml").resolve():
        return
    folder = plan_folder(out, name, quick=quick)
    raise ValueError(
        f"plan: {name} is a shipped plan's name: these results would replace its answer in "
        f"{folder}/. Choose another --name (e.g. --name {name}-mine), or run that plan as "
        f"shipped (kvsim plan {name})"
    )


def _place_config_error(
    path: Path | None, is_plan: bool, overrides: dict[str, Any], message: str
) -> None:
    """Raise the base config's own error ``message`` as ``kvsim run`` says it: at the line of
    the config file (``load_config``), or of the plan file's ``[set]`` or ``[base]`` that sets
    the field, or naming the ``--set`` that gave it.

    Raises:
        ValueError: always."""
    from kvsim.base.textfile import at_lines
    from kvsim.config.config_file import load_config

    named = message.split(":", 1)[0]
    if named in overrides:
        shown = json.dumps(overrides[named]) if not isinstance(overrides[named], str) else ""
        raise ValueError(f"--set {named}={shown or overrides[named]}: {message}")
    if path is not None and not is_plan:
        load_config(path, overrides)  # (raises, placing the blame as kvsim run does)
    if path is not None:
        text = read_text(path)
        for table in ("set", "base"):
            if toml_key_line(text, f"{table}.{named}"):
                raise ValueError(at_lines(path, message, table))
    raise ValueError(message)


def _config_table(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    return read_toml(path)


def _default_name(question: dict[str, Any]) -> str:
    return f"{question['direction']}-{str(question['field']).rpartition('.')[2]}"


# short names of the latency metrics (``kvsim.view.labels.LATENCY_SHORT_NAMES``: ttft, tpot, e2e,
# queue) -> kvsim's full names, and vLLM benchmark_serving's e2el
_SHORT_METRICS = {short.lower(): full for full, short in LATENCY_SHORT_NAMES.items()} | {
    "e2el": "e2e_request_latency_seconds"
}


def _check_targets(targets: Any) -> None:
    """Fail before simulating on a target metric no summary has (a typo), naming the metric a
    short name stands for (``ttft_p99`` -> ``time_to_first_token_seconds_p99``) or the closest
    known ones."""
    import difflib

    from kvsim.study.targets import target_metrics

    known = target_metrics()
    for t in targets:
        if t.metric in known:
            continue
        stem, _, stat = t.metric.rpartition("_")
        full = _SHORT_METRICS.get(stem.lower())
        bare = _SHORT_METRICS.get(t.metric.lower())  # "ttft": a statistic to add
        if full is not None and f"{full}_{stat}" in known:
            close = [f"{full}_{stat}"]
        elif bare is not None:
            close = [f"{bare}_p99", f"{bare}_mean"]
        else:  # the closest first: of the names holding the stem, else of all
            holding = [m for m in known if stem and stem in m]
            close = difflib.get_close_matches(
                t.metric, holding or sorted(known), n=3, cutoff=0 if holding else 0.6
            )
        raise ValueError(
            f"--target: unknown metric {t.metric!r}"
            + (f"; did you mean {' or '.join(repr(m) for m in close)}?" if close else "")
            + " (latency metrics end in _p50, _p90, _p95, _p99 or _mean)"
        )
    for t in targets:
        _warn_suspicious_bound(t.metric, t.bound)


# higher is better: an upper bound asks for the worse end (targets are upper bounds only)
_HIGHER_IS_BETTER = ("slo_attainment", "goodput_", "throughput_", "hit_rate", "token_utilization")


def _warn_suspicious_bound(metric: str, bound: float) -> None:
    """Warn where a target's bound reads as written in another unit than its metric's (a
    latency in ms, a 0-1 share in %) or bounds a higher-is-better metric from above."""
    say = logging.getLogger("kvsim.cli").warning
    if "_seconds" in metric and bound >= 60:
        say(
            "--target %s<=%g: the metric is in seconds, so the bound is %g minutes; "
            "write %g if %g ms was meant",
            metric,
            bound,
            bound / 60,
            bound / 1000,
            bound,
        )
    elif metric.startswith("kv_cache_usage_perc") and bound > 1:
        say(
            "--target %s<=%g: kv_cache_usage_perc is vLLM's 0-1 share and never passes 1, so "
            "the bound is always met; write %g if %g %% was meant",
            metric,
            bound,
            bound / 100,
            bound,
        )
    if any(word in metric for word in _HIGHER_IS_BETTER):
        say(
            "--target %s<=%g: higher is better for this metric, and a target is an upper "
            "bound: the plan looks for values at most %g, not at least",
            metric,
            bound,
            bound,
        )


def _as_utilization(plan_: Any, answer: float) -> str:
    """A KV budget answer as the ``gpu_memory_utilization`` that derives it (vLLM's own knob),
    with the weights and headroom beside it; ``""`` where ``answer_utilization`` has none."""
    from kvsim.base.units import format_gib
    from kvsim.config.memory import utilization_for_budget
    from kvsim.study.plan import answer_config

    config = answer_config(plan_, answer)  # (built once: answer_utilization would again)
    if config is None:
        return ""
    share = utilization_for_budget(config)
    parts = (
        f"KV + {format_gib(config.weight_bytes_per_gpu)} of weights + "
        f"{format_gib(config.cache.activation_headroom_bytes)} of activation headroom"
    )
    gpu = format_gib(config.gpu.memory_bytes)
    if share > 1:
        return f"above 1: {parts} exceed the {gpu} GPU"
    return f"{share:.3f} of {gpu} ({parts})"


def _answer_table(result: Any) -> Table:
    from kvsim.study.plan import bracket_at_limit, format_value

    plan_ = result.plan
    knob = plan_.field
    table = Table(title=f"{plan_.name}: {plan_.direction} {plan_.field}", show_header=False)
    table.add_column("")
    # (a long reason, a choice skipped, folds: piped, the table was as wide as its longest row)
    table.add_column("", justify="right", overflow="fold", max_width=100)
    if result.answer is None:
        table.add_row("answer", escape(f"none: {result.why_none}"))
    else:
        value = plan_.value(result.answer)
        shown = format_value(value, knob, unit=False)
        table.add_row("answer", f"{plan_.knob_label()}: {shown}")
        utilization = _as_utilization(plan_, result.answer)
        if utilization:
            table.add_row("as gpu_memory_utilization", utilization)
        if result.interval is not None:
            low, high = (format_value(plan_.value(x), knob) for x in result.interval)
            table.add_row("meets every target", f"{low} to {high}")
        if result.ends_valid_range:  # (no target binds: the next value cannot be run)
            table.add_row(
                "binding target",
                f"none: the knob's valid values end here (tightest target: {result.binding})",
            )
        else:
            table.add_row("binding target", str(result.binding))
        table.add_row("margin", f"{100 * result.headroom:.1f} % under its bound")
        if result.beyond:
            table.add_row("next value fails", escape(result.beyond))
        else:  # the bracket's end meets every target: the answer may lie beyond it
            end: Literal["lo", "hi"] = "hi" if plan_.direction == "largest" else "lo"
            at_limit = bracket_at_limit(plan_, end)
            table.add_row(
                "next value fails",
                escape(
                    f"none: {format_value(value, knob)} ends the bracket "
                    + (
                        f"(widen --{end})"
                        if at_limit is None
                        else f"and the knob's range: {at_limit}"
                    )
                ),
            )
        if result.other_end:
            side = "below" if plan_.direction == "largest" else "above"
            table.add_row(f"{side} the interval", escape(result.other_end))
        for draw in result.other_draws:
            verdict = "meets" if draw.meets else "fails"
            values = ", ".join(f"{_fmt(v, m)}" for m, v in draw.values.items())
            table.add_row(f"at seed {draw.seed}", f"{verdict} ({values})")
    table.add_row("points evaluated", str(len(result.points)))
    for value, why in result.skipped.items():  # choices the model cannot use: not searched
        table.add_row(f"skipped {format_value(value, knob)}", escape(why))
    return table


def _list_plans() -> None:
    from kvsim.cli.presets import described_table
    from kvsim.presets import plans_dir

    print_whole(described_table(plans_dir(), "shipped plans", "kvsim plan NAME"))


# the examples of --target, full width under the options (a metric name fills its column)
TARGET_EXAMPLES = (
    "Targets bound vLLM's metrics from above (<=), e.g. --target "
    "time_to_first_token_seconds_p99<=2, request_time_per_output_token_seconds_p95<=0.1, "
    "e2e_request_latency_seconds_p90<=30, request_queue_time_seconds_p99<=1, "
    "preemptions_per_request<=0.01."
)


def register(app: typer.Typer) -> None:
    """Add ``plan`` to the ``kvsim`` app."""
    app.command("plan", epilog=TARGET_EXAMPLES)(plan)
