"""Capacity planning: the smallest or largest value of one knob that meets latency targets.

A plan is a base ``SimConfig`` table, the knob to move (a dotted field such as
``cache.kv_cache_gib``, ``workload.rate_per_s``, ``parallel.tensor_parallel_size`` or
``scheduler.max_num_seqs``), the direction (``smallest`` KV budget or TP size; ``largest`` rate or
``max_num_seqs``), a bracket and targets: upper bounds on summary metrics in vLLM's names
(``time_to_first_token_seconds_p99 <= 2``). Meeting each target is assumed monotone in the knob,
not all in one direction (p99 TTFT falls as ``max_num_seqs`` grows, p99 TPOT rises), so the
values meeting them all are an interval; each target's boundary is found by trisection
(``kvsim.study.plan_search``: ``PROBES_PER_ROUND`` points per round, on ``jobs`` processes), and the
answer is the interval's lower (smallest) or upper (largest) end; a point that contradicts
monotonicity is reported. The points a search visits do
not depend on ``jobs``, so neither does its answer where the metric is not monotone. Every
evaluated config is a point of the sweep store (``results/plan/NAME/points/KEY``), so a rerun or
a sharper question reuses them. A config the knob makes invalid (a KV budget that cannot hold
one request) does not meet the targets; an invalid one between two valid ones is refused (the
valid values must be one range); a choice the model cannot use (a TP size that does not
divide its heads) is skipped, not searched.

    plan.toml:  name, description, [base] (a SimConfig table),
                [question] field, direction, lo, hi, targets = {metric = bound}, resolution,
                choices (optional: the only values allowed, e.g. TP sizes), [quick] set = {...}
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from kvsim.base.build import source_build
from kvsim.base.say_once import warn_once
from kvsim.base.textfile import read_text, read_toml, toml_key_line
from kvsim.base.units import GiB, plural
from kvsim.config import apply_overrides, config_from_dict
from kvsim.config.config_file import check_relative_paths
from kvsim.config.file_kinds import PLAN_KEYS, check_kind
from kvsim.config.memory import least_pool_bytes, utilization_for_budget
from kvsim.config.sim import did_you_mean, field_annotation
from kvsim.results import read_summary
from kvsim.study.experiment import Point, check_name
from kvsim.study.plan_search import Condition, Interval, changes_at_most_once, search_interval
from kvsim.study.sweep import (
    POINTS,
    check_results_folder,
    finished_by,
    outcomes,
    point_dir,
    save_outcome,
    warn_stale,
)
from kvsim.study.targets import target_metrics
from kvsim.workload.spec import DEFAULT_NUM_REQUESTS

# the knobs that are a KV budget per GPU
KV_FIELDS = ("cache.kv_cache_gib", "cache.kv_cache_bytes")
logger = logging.getLogger(__name__)

Direction = Literal["smallest", "largest"]
_QUESTION_KEYS = frozenset(
    {"field", "direction", "lo", "hi", "targets", "resolution", "integer", "choices"}
    | {"min_window_s"}
)
RATE_FIELD = "workload.rate_per_s"
# a rate plan's window where its question names none (``Plan.min_window_s``): the paper
# reproductions' 600 s. Judged on 1,000 requests, Llama-3.1-8B on an H100 with the
# shared_system_prompt workload took 71.1 req/s (arriving in 14 s); over 600 s, 28.2
DEFAULT_WINDOW_S = 600.0


class QuestionError(ValueError):
    """A ``[question]`` value that is wrong; ``key`` names the key (a plan file's error gives
    the line that sets it)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


class QuickSetError(ValueError):
    """The plan's ``[quick] set`` makes every value of the knob invalid; ``field`` names the
    field at fault (a plan file's error gives the line that sets it)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class PlanPointError(ValueError):
    """A simulation of the plan failed (not an invalid config: a missing trace, a bug)."""


class UnmeasuredTargetError(ValueError):
    """A target on a metric the plan's runs do not give (the question's fault, not a fleet
    kind's: ``run_cheapest`` lets it through)."""


_MISSING_DATA = "DataNotFoundError: "  # how a worker reports a missing trace file


@dataclass(frozen=True)
class Target:
    """``metric <= bound`` on a run's summary (a NaN metric fails).

    Raises:
        ValueError: the bound is not finite, or is negative for a ``target_metrics`` metric
            (none is ever negative, so no run could meet it).
    """

    metric: str
    bound: float

    def __post_init__(self) -> None:
        if not math.isfinite(self.bound):
            raise ValueError(f"{self.metric}: expected a finite bound, got {self.bound}")
        if self.bound < 0 and self.metric in target_metrics():
            raise ValueError(
                f"{self.metric} <= {self.bound:g}: no run can meet it ({self.metric} is a "
                "latency, count or fraction, never negative); give a bound >= 0"
            )

    def met(self, summary: dict[str, Any]) -> bool:
        value = summary.get(self.metric)
        return value is not None and not math.isnan(float(value)) and float(value) <= self.bound

    def headroom(self, summary: dict[str, Any]) -> float:
        """``1 - value / bound`` (how far under its bound the metric is; < 0 when over)."""
        value = float(summary.get(self.metric, math.nan))
        return 1.0 - value / self.bound if self.bound else 0.0 - value  # (not -0.0 at 0)

    @classmethod
    def parse(cls, text: str) -> Target:
        """``"time_to_first_token_seconds_p99<=2"`` -> ``Target``. Only ``<=`` is a target: a
        strict ``<`` or a lower bound (``>``, ``>=``) is refused, not read as another bound.

        Raises:
            ValueError: not ``METRIC<=NUMBER`` (naming the operator given), or a bound no run
                can meet (see the class).
        """
        compact = text.replace(" ", "")
        name, sep, bound = compact.partition("<=")
        operator = re.search(r"[<>=!]+", compact)
        if not sep and operator is not None:
            op = operator.group()
            left, right = compact[: operator.start()], compact[operator.end() :]
            why = (
                f"a strict bound is not supported: write {left}<={right}"
                if op == "<"
                else "a target is an upper bound the metric must not exceed"
            )
            raise ValueError(
                f"--target: only <= is accepted (METRIC<=NUMBER), got {op!r} in {text!r}; {why}"
            )
        try:
            value = float(bound)
        except ValueError:
            value = math.nan
        if not sep or not name or not math.isfinite(value):
            raise ValueError(
                f"--target: expected METRIC<=NUMBER (e.g. time_to_first_token_seconds_p99<=2), "
                f"got {text!r}"
            )
        try:
            return cls(name, value)
        except ValueError as err:
            raise ValueError(f"--target: {err}") from None


def quick_overrides(quick: dict[str, Any], varied: Sequence[str]) -> dict[str, Any]:
    """A plan's quick settings (``[quick] set``) but for the fields a later layer set
    (``kvsim plan --set``: ``varied``), which a quick run keeps as given."""
    return {k: v for k, v in quick.items() if k not in varied}


def tightest(targets: Sequence[Target]) -> tuple[Target, ...]:
    """``targets`` with one bound per metric: a metric bounded twice keeps the tighter bound,
    with a warning naming both (``p99<=2`` and ``p99<=1`` ask for ``p99<=1``; the later one
    used to replace the earlier, whichever it was). The first mention's order is kept."""
    kept: dict[str, Target] = {}
    for target in targets:
        other = kept.get(target.metric)
        if other is None:
            kept[target.metric] = target
            continue
        tighter = min(other, target, key=lambda t: t.bound)
        if other.bound != target.bound:
            logger.warning(
                "%s is targeted twice (<= %g and <= %g): the plan holds the tighter bound, <= %g",
                target.metric,
                other.bound,
                target.bound,
                tighter.bound,
            )
        kept[target.metric] = tighter
    return tuple(kept.values())


@dataclass(frozen=True)
class Plan:
    """One capacity question (see the module docstring).

    Attributes:
        name: results folder name (``results/plan/NAME``).
        base: the SimConfig table the knob is set in.
        field: the dotted knob.
        direction: ``"smallest"`` or ``"largest"`` value that meets every target.
        lo, hi: the bracket searched.
        targets: upper bounds on summary metrics.
        resolution: stop when ``hi / lo <= 1 + resolution`` (real knobs); integer knobs stop at
            adjacent integers, ``choices`` at adjacent choices.
        integer: the knob takes integers.
        choices: the only values allowed, ascending (e.g. tensor-parallel sizes); one choice
            with ``lo == hi`` equal to it asks only whether it meets the targets.
        varied: dotted fields of ``base`` set over the plan's own config (``kvsim plan``'s
            ``--set``): a later layer for the ignored-setting warnings, as ``kvsim run``'s
            ``--set`` is over its config file.
        min_window_s: with the knob ``workload.rate_per_s``, each rate draws at least this many
            seconds of arrivals (``workload.num_requests`` raised to ``ceil(rate * window)``
            where the config's count spans less; not in quick runs). A fixed count spans little
            time at a high rate: 1,000 requests at 50 req/s arrive in 20 s, too short for the
            queue of a rate past the knee to grow, so the largest rate meeting a latency bound
            comes out too high (Figure 14's Orca (Oracle) at 36 req/s: 0.095 s/token over
            1,000 requests, 1.56 over 600 s). ``kvsim plan --window SECONDS`` sets it;
            ``plan_from_dict`` (``kvsim plan``, plan files) defaults it to ``DEFAULT_WINDOW_S``
            for the rate knob.
    """

    name: str
    base: dict[str, Any]
    field: str
    direction: Direction
    lo: float
    hi: float
    targets: tuple[Target, ...]
    description: str = ""
    resolution: float = 0.05
    integer: bool = False
    choices: tuple[float, ...] = ()
    quick: dict[str, Any] = dataclasses.field(default_factory=dict)
    varied: tuple[str, ...] = ()
    min_window_s: float | None = None

    def __post_init__(self) -> None:
        check_name(self.name, "plan name")  # results go to OUT/plan/NAME, nowhere else
        if not self.integer and not self.choices and takes_integers(self.field):
            # (num_speculative_tokens: the search tried 3.17..., which no config takes)
            object.__setattr__(self, "integer", True)
        if self.min_window_s is not None and (
            self.field != RATE_FIELD or not 0 < self.min_window_s < math.inf
        ):
            raise QuestionError(
                "min_window_s",
                f"min_window_s (--window): a positive number of seconds, with the knob "
                f"{RATE_FIELD} only (got {self.min_window_s!r} with {self.field})",
            )
        if self.direction not in ("smallest", "largest"):
            raise QuestionError(
                "direction", f"direction: expected 'smallest' or 'largest', got {self.direction!r}"
            )
        for end, value in (("lo", self.lo), ("hi", self.hi)):
            if not math.isfinite(value):
                raise QuestionError(end, f"{end}: expected a finite number, got {value}")
        one_choice = self.choices == (self.lo,) and self.lo == self.hi  # (a check, no search)
        if not (0 < self.lo < self.hi or one_choice) or not math.isfinite(self.hi):
            raise QuestionError(
                "lo" if not self.lo > 0 else "hi",
                f"{self.field}: need 0 < lo < hi, got lo={self.lo}, hi={self.hi}",
            )
        if not self.targets:
            raise QuestionError("targets", "a plan needs at least one target (METRIC<=NUMBER)")
        if not 0 < self.resolution <= 10:  # NaN fails too
            raise QuestionError(
                "resolution", f"resolution: expected a number in (0, 10], got {self.resolution}"
            )
        if self.resolution >= 1 and not self.integer and not self.choices:
            warn_once(
                logger,
                f"resolution {self.resolution:g}: the knob's grid steps by a factor of "
                f"{1 + self.resolution:g} (a resolution is a fraction: "
                f"{self.resolution / 100:g} for {self.resolution:g} %), so the answer may lie "
                "far from where the targets stop holding",
            )
        whole = self.integer or (bool(self.choices) and all(c == round(c) for c in self.choices))
        for end, value in (("lo", self.lo), ("hi", self.hi)):
            if whole and value != round(value):  # (read as [ceil(lo), floor(hi)])
                raise QuestionError(
                    end, f"{end} (--{end}): {self.field} takes whole numbers, got {value}"
                )
        if self.hi / self.lo > 1e12:
            raise QuestionError(
                "hi", f"{self.field}: the bracket [{self.lo:g}, {self.hi:g}] spans > 1e12"
            )

    def check_field(self) -> None:
        """The knob is a config field that the config reads: the base config with the knob at
        ``hi`` validates (or fails for another reason than an unknown field), and does not
        ignore the knob (``workload.rate_per_s`` under replayed trace arrivals, by
        ``kvsim.config.ignored``'s rules; else any knob whose ends give the same config, as a
        disk's bandwidth beside a 0 GiB disk).

        Raises:
            ValueError: the knob names no field of the config (a typo), or one it ignores (every
                value would run the same workload: the answer would be the bracket's end).
        """
        from kvsim.config.ignored import moot_reason

        try:  # (config_from_dict works on a copy: ``self.base`` stays as it is; the run
            # warns of its ignored settings, not this check)
            config = config_from_dict(
                self.base, {self.field: self.value(self.hi)}, varied=self.varied, warn=False
            )
        except ValueError as err:
            message = str(err)
            if is_unknown_field(message):
                named = message.split(":", 1)[0]
                if named != self.field and not self.field.startswith(f"{named}."):
                    raise UnknownConfigFieldError(message) from None  # (the config's, not the knob)
                raise ValueError(
                    f"plan: {self.field!r} is not a config field ({message.splitlines()[0]})"
                ) from None
            return
        if self.field == RATE_FIELD and config.workload.max_concurrency is not None:
            raise ValueError(
                f"plan: {RATE_FIELD} under workload.max_concurrency = "
                f"{config.workload.max_concurrency} (a closed loop: each user sends its next "
                "request when the last one ends) only caps the arrivals, so a largest rate says "
                "nothing of the load served; unset workload.max_concurrency for open-loop "
                "arrivals, or plan workload.max_concurrency itself (--largest "
                "workload.max_concurrency --lo 1 --hi N)"
            )
        if self.field == RATE_FIELD and self.min_window_s is not None:
            spec = self.config(self.hi)  # (the window's count at the top: valid without it)
            try:
                config_from_dict(spec["data"], spec["overrides"], warn=False)
            except ValueError as err:  # (every point past it would read as failing)
                raise ValueError(
                    f"plan: at --hi {self.hi:g} req/s, {self.min_window_s:g} s of arrivals "
                    f"(--window) are {spec['overrides'].get('workload.num_requests', 0):,} "
                    f"requests, more than a run takes ({str(err).splitlines()[0]}); lower --hi "
                    "or --window"
                ) from None
        why = moot_reason(config, self.base, self.field)
        if why is None and self.lo < self.hi:  # the low end, else the middle where it is invalid
            for x in (self.lo, math.sqrt(self.lo * self.hi)):
                other = self.config_at(x)
                if other is not None:
                    if other.key() == config.key():
                        why = f"the config at {self.value(x):g} and at {self.hi:g} is the same"
                    elif config.fleet is not None and _same_replicas(other, config):
                        why = (
                            f"every replica's config at {self.value(x):g} and at {self.hi:g} "
                            "is the same (fleet.replica_overrides sets it for each)"
                        )
                    break
        if why is not None:
            raise ValueError(
                f"plan: {self.field} has no effect on this config ({why}), so every value "
                "runs the same workload; plan another knob or change the config"
            )

    def config_at(self, x: float) -> Any:
        """The base config with the knob at ``x``, its warnings unsaid (it is not run);
        ``None`` where it is invalid."""
        try:
            return config_from_dict(
                self.base, {self.field: self.value(x)}, varied=self.varied, warn=False
            )
        except ValueError:
            return None

    def knob_label(self) -> str:
        """The knob as an axis label with its unit (``kvsim.view.labels.axis_label``); the rate
        of a multi-turn workload counts conversation starts, ``workload.num_turns`` requests
        each."""
        from kvsim.view.labels import axis_label

        if self.field == RATE_FIELD:
            config = self.config_at(self.hi)
            turns = 1 if config is None else config.workload.num_turns
            if turns > 1:
                return f"conversation rate (conversations/s, {turns} requests each)"
        return axis_label(self.field)

    def value(self, x: float) -> float | int:
        """``x`` as the knob takes it."""
        return round(x) if self.integer or self.choices else float(x)

    def config(self, x: float, *, quick: bool = False) -> dict[str, Any]:
        """The base table with the knob at ``x`` (and the quick overrides, but for the fields
        ``kvsim plan --set`` gave: ``varied``)."""
        data = json.loads(json.dumps(self.base))
        small = quick_overrides(self.quick, self.varied) if quick else {}
        overrides = {**small, self.field: self.value(x)}
        if self.min_window_s is not None and not quick:
            drawn = config_from_dict(data, overrides, warn=False).workload  # (on a copy)
            window = self.min_window_s
            if drawn.duration_s is None or drawn.num_requests is not None:  # a count ends it
                # the requests arriving in the window (at the knob's rate: ``drawn`` has it)
                need = math.ceil(drawn.arrivals_within(window))
                count = drawn.num_requests or DEFAULT_NUM_REQUESTS
                overrides["workload.num_requests"] = max(count, need)
            if drawn.duration_s is not None and drawn.duration_s < window:
                overrides["workload.duration_s"] = window  # (it would stop arrivals)
        return {"data": data, "overrides": overrides}


def _same_replicas(one: Any, other: Any) -> bool:
    """Whether two fleets' replicas have the same configs, one by one (each replica's own table
    setting the knob: the fleet runs the same); false where a replica's table is invalid."""
    try:
        return [r.key() for r in one.replica_configs] == [r.key() for r in other.replica_configs]
    except ValueError:
        return False


def load_plan(path: str | Path, overrides: dict[str, Any] | None = None, **question: Any) -> Plan:
    """Read a plan TOML; ``overrides`` (dotted fields) then edit its base config (a later layer
    than the plan's own: ``Plan.varied``) and ``question`` overrides its ``[question]`` keys.

    The base config is the file's ``[base]`` table, or the base of ``experiment = "NAME"`` (an
    ``experiments/`` file) with the overrides of its point ``label = "..."``; ``[set]`` then
    overrides dotted fields of either.

    Raises:
        ValueError: malformed file or question (the message names the file and the key).
        FileNotFoundError: no such file.
    """
    path = Path(path)
    data = read_toml(path)
    check_kind(path, data, "plan")
    text = read_text(path)

    def at(key: str) -> str:  # the file and the line that sets ``key`` (a dotted key)
        line = toml_key_line(text, key)
        return f"{path} line {line}" if line else str(path)

    unknown = sorted(set(data) - PLAN_KEYS)
    if unknown:
        raise ValueError(f"{at(unknown[0])}: unknown keys {unknown}; expected {sorted(PLAN_KEYS)}")
    for key in ("base", "set", "question", "quick"):
        if not isinstance(data.get(key, {}), dict):
            raise ValueError(f"{at(key)}: [{key}] must be a table, got {data[key]!r}")
    unknown_quick = sorted(set(data.get("quick", {})) - {"set"})
    if unknown_quick:  # (a misspelt "sets" was read as no quick settings)
        raise ValueError(
            f"{at('quick.' + unknown_quick[0])}: [quick] unknown keys {unknown_quick}; expected set"
        )
    knob = question.get("field") or data.get("question", {}).get("field")
    quick_set = data.get("quick", {}).get("set", {})
    if isinstance(quick_set, dict) and knob in quick_set:  # (the plan moves it: never read)
        raise ValueError(
            f"{at('quick.set')}: [quick] set gives {knob}, the knob the plan moves; set "
            "other fields there"
        )
    unknown_q = sorted(set(data.get("question", {})) - _QUESTION_KEYS)
    if unknown_q:
        raise ValueError(
            f"{at('question.' + unknown_q[0])}: [question] unknown keys {unknown_q}; "
            f"expected {sorted(_QUESTION_KEYS)}"
        )
    for key in ("experiment", "label", "name", "description"):
        if key in data and not isinstance(data[key], str):
            raise ValueError(f"{at(key)}: {key} must be a string, got {data[key]!r}")
    if "experiment" not in data:
        check_relative_paths(path, data.get("base", {}), "base")
    elif data.get("base"):  # (it was ignored: the experiment's base ran instead)
        raise ValueError(
            f"{at('base')}: [base] and experiment = {data['experiment']!r} both give the base "
            "config; keep one (change the experiment's base with [set])"
        )
    base = (
        experiment_base(data, at("experiment"), at("label"))
        if "experiment" in data
        else dict(data.get("base", {}))
    )
    apply_overrides(base, data.get("set", {}))
    apply_overrides(base, overrides or {})  # the later layer: its tables replace [set]'s fields
    asked = {k: v for k, v in question.items() if v is not None}
    in_file = dict(data.get("question", {}))
    if asked.get("field", in_file.get("field")) != in_file.get("field"):
        in_file = {"targets": in_file.get("targets", {})}  # another knob: not this bracket
    q = {**in_file, **asked}
    name = data.get("name", path.stem)

    def line_of(key: str) -> int | None:  # (a key given on the command line: none)
        if not key:
            return toml_key_line(text, "question")
        return None if key in asked else toml_key_line(text, f"question.{key}", set_only=True)

    return plan_from_dict(
        name, base, q, data, str(path), varied=tuple(overrides or {}), line_of=line_of
    )


def experiment_base(data: dict[str, Any], where: str, label_where: str = "") -> dict[str, Any]:
    """The base table of ``data["experiment"]`` with its ``data["label"]`` point's overrides;
    ``where`` / ``label_where`` start the errors about each (the file and its line)."""
    from kvsim.study.experiment import load_experiment
    from kvsim.study.sweep import experiments_dir

    name = check_name(data["experiment"], f"{where}: experiment")  # a shipped experiment
    path = experiments_dir() / f"{name}.toml"
    if not path.is_file():
        from kvsim.presets import names as preset_names

        names = preset_names(experiments_dir())
        raise ValueError(f"{where}: experiment {name!r} is not a shipped experiment ({names})")
    experiment = load_experiment(path)
    label = data.get("label")
    if label is None:
        base: dict[str, Any] = json.loads(json.dumps(experiment.base))
        return base
    try:
        return experiment.labelled_base(str(label))
    except ValueError as err:
        raise ValueError(f"{label_where or where}: {err}") from None


def plan_from_dict(
    name: str,
    base: dict[str, Any],
    question: dict[str, Any],
    extra: dict[str, Any] | None = None,
    where: str = "plan",
    *,
    varied: tuple[str, ...] = (),
    line_of: Callable[[str], int | None] | None = None,
) -> Plan:
    """Build a ``Plan`` from a base table and a question table (``load_plan``'s keys);
    ``varied``: the dotted fields of ``base`` a later layer set (``Plan.varied``); ``line_of``:
    the line of the plan file that sets a question key (``""``: the ``[question]`` table), for
    the error's place.

    Raises:
        ValueError: a key missing or wrong, the message starting with ``where`` (and the line).
    """
    extra = extra or {}
    try:
        parsed = _targets(question.get("targets", {}))
        field_name = str(question["field"])
        bracket = knob_bracket(field_name, base, varied)
        preset: dict[str, Any] = {**KNOBS.get(field_name, {}), **bracket}
        natural = preset.get("direction")
        asked = question.get("direction", natural)
        if asked is not None and asked not in ("smallest", "largest"):  # (before its knob's)
            raise QuestionError(
                "direction", f"direction: expected 'smallest' or 'largest', got {asked!r}"
            )
        if natural is not None and asked != natural:
            raise QuestionError(
                "direction",
                f"{field_name}: meeting latency targets gets {_EASIER[natural]} as it grows, so "
                f"only the {natural} value that meets them is an answer (--{natural})",
            )
        if field_name not in KNOBS and field_annotation(field_name) is None:
            hint = did_you_mean(tuple(field_name.split(".")))  # (before asking for a bracket)
            raise QuestionError("field", f"{field_name!r} is not a config field{hint}")
        if field_name not in KNOBS and ("lo" not in question or "hi" not in question):
            raise QuestionError(
                "field",
                f"{field_name!r} is not a knob with a default range ("
                + ", ".join(KNOBS)
                + "; kv, rate, tp and max_num_seqs for short); for another config field give "
                "--lo and --hi",
            )
        lo = _number(question, "lo", preset.get("lo", math.nan))
        hi = _number(question, "hi", preset.get("hi", math.nan))
        if "need" in bracket and lo < bracket["need"] and bracket["lo"] < hi:
            warn_once(  # (every budget below the need is an invalid config)
                logger,
                f"plan: lo = {lo:g} is below the KV one max_model_len request needs "
                f"({bracket['need']:.4g}); the search starts at {bracket['lo']:g}",
            )
            lo = bracket["lo"]
        return Plan(
            name=name,
            base=base,
            field=field_name,
            direction=question.get("direction", preset.get("direction", "smallest")),
            lo=lo,
            hi=hi,
            targets=parsed,
            description=str(extra.get("description", "")),
            resolution=_number(question, "resolution", 0.05),
            integer=_flag(question, "integer"),
            choices=_choices(question.get("choices", preset.get("choices", ()))),
            quick=dict(extra.get("quick", {}).get("set", {})),
            varied=varied,
            min_window_s=(
                _number(question, "min_window_s", None)
                if "min_window_s" in question
                else DEFAULT_WINDOW_S
                if field_name == RATE_FIELD
                else None
            ),
        )
    except KeyError as err:
        line = line_of("") if line_of is not None else None
        at = f"{where} line {line}" if line else where
        raise ValueError(f"{at}: [question] needs {err.args[0]!r}") from None
    except (TypeError, ValueError) as err:
        line = line_of(err.key) if line_of is not None and isinstance(err, QuestionError) else None
        at = f"{where} line {line}" if line else where
        raise ValueError(f"{at}: {err}") from None


def _targets(targets: Any) -> tuple[Target, ...]:
    """``[question] targets``: a table ``{metric = bound}``, or ``METRIC<=NUMBER`` texts (a list,
    or one).

    Raises:
        QuestionError: a bound that is not a number, or a target ``Target`` refuses.
    """
    try:
        if isinstance(targets, dict):
            for metric, bound in targets.items():
                if isinstance(bound, bool) or not isinstance(bound, int | float):
                    raise ValueError(f"{metric}: expected a number, got {bound!r}")
            return tuple(Target(m, float(b)) for m, b in targets.items())
        texts = [targets] if isinstance(targets, str) else targets
        if not isinstance(texts, list):
            raise ValueError(f"expected a table {{metric = bound}}, got {targets!r}")
        return tightest([Target.parse(str(t)) for t in texts])
    except ValueError as err:
        message = str(err).removeprefix("--target: ")
        raise QuestionError("targets", f"[question] targets: {message}") from None


def takes_integers(field: str) -> bool:
    """Whether the dotted config field holds integers (its annotation ``int``, or ``int |
    None``; not a bool): a plan on it tries whole numbers only."""
    from kvsim.base.limits import field_kinds

    return field_kinds(field_annotation(field)) == (int,)


def _flag(question: dict[str, Any], key: str) -> bool:
    """``question[key]`` (false when absent) as TOML's ``true`` or ``false``: ``bool("false")``
    would read a quoted one as true."""
    value = question.get(key, False)
    if not isinstance(value, bool):
        raise QuestionError(key, f"[question] {key}: expected true or false, got {value!r}")
    return value


def _choices(value: Any) -> tuple[float, ...]:
    """``[question] choices``: a list of numbers (``"64KiB"`` and a lone number refused with
    the key named, where ``float`` and iterating them failed with Python's own words)."""
    if not isinstance(value, list | tuple) or not all(
        isinstance(c, int | float) and not isinstance(c, bool) for c in value
    ):
        raise QuestionError(
            "choices", f"[question] choices: expected a list of numbers, got {value!r}"
        )
    return tuple(float(c) for c in value)


def _number(question: dict[str, Any], key: str, default: Any) -> float:
    """``question[key]`` (else ``default``) as a float; a string, a bool or a table is refused
    with the key named (``float("30")`` or ``float(True)`` would quietly accept them)."""
    value = question.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise QuestionError(key, f"[question] {key}: expected a number, got {value!r}")
    return float(value)


def knob_bracket(
    field_name: str, base: dict[str, Any], varied: tuple[str, ...] = ()
) -> dict[str, float]:
    """The default bracket the base config's hardware allows for a KV-budget knob
    (``cache.kv_cache_gib`` or ``cache.kv_cache_bytes``): from the KV one ``max_model_len``
    request needs (whole blocks and vLLM v1's null block, or a slab reservation's largest slab:
    ``least_pool_tokens``; in GiB rounded up to a hundredth) to what the GPU holds beside the
    weights and the activation headroom (``gpu_memory_utilization`` 1), and ``need``, that KV
    unrounded (``{}`` for other knobs or an invalid base; ``varied`` as ``Plan.varied``)."""
    if field_name not in KV_FIELDS:
        return {}
    try:
        config = config_from_dict(json.loads(json.dumps(base)), varied=varied)
    except ValueError:
        return {}
    need = least_pool_bytes(config)
    # (gpu_memory_utilization 1: a larger budget leaves activations less than their headroom)
    room = config.gpu.memory_bytes - config.weight_bytes_per_gpu
    room -= config.cache.activation_headroom_bytes
    if field_name == "cache.kv_cache_bytes":
        return {"lo": need, "hi": room, "need": need} if 0 < need < room else {}
    lo, hi = math.ceil(need / GiB * 100) / 100, math.floor(room / GiB * 100) / 100
    return {"lo": lo, "hi": hi, "need": need / GiB} if 0 < lo < hi else {}


_EASIER = {"smallest": "easier", "largest": "harder"}  # by each knob's natural direction

# defaults of the usual knobs: direction, bracket, allowed values (a knob on an integer field
# takes integers: takes_integers)
KNOBS: dict[str, dict[str, Any]] = {
    "cache.kv_cache_gib": {"direction": "smallest", "lo": 0.25, "hi": 64.0},
    "cache.kv_cache_bytes": {"direction": "smallest", "lo": 2**20, "hi": 2**36},
    "workload.rate_per_s": {"direction": "largest", "lo": 0.05, "hi": 100.0},
    "parallel.tensor_parallel_size": {
        "direction": "smallest",
        "lo": 1,
        "hi": 16,
        "choices": (1, 2, 4, 8, 16),
    },
    "scheduler.max_num_seqs": {"direction": "largest", "lo": 1, "hi": 1024},
    "fleet.replicas": {"direction": "smallest", "lo": 1, "hi": 64},
}


@dataclass
class PlanResult:
    """What ``run_plan`` found.

    Attributes:
        plan: the question.
        answer: the knob's value, or ``None`` when even the bracket's best end fails.
        binding: the target with the least headroom at the answer.
        headroom: that target's ``1 - value / bound`` at the answer.
        points: one row per evaluated value: the knob, ``meets``, the targets' metrics, error.
        folder: where the points are stored.
        monotone: no evaluated point contradicts monotonicity.
        beyond: why the nearest evaluated value past the answer fails (a target over its
            bound, requests too long for the pool, or an invalid config), or ``None``.
        skipped: the choices not searched, each with why its config is invalid (a TP size
            that does not divide the model's attention heads), by knob value.
        interval: the lowest and highest values found to meet every target (the answer is one
            of its ends: two targets that pull the knob apart, as TTFT and TPOT do
            ``max_num_seqs``, leave an interval), or ``None`` with no answer.
        other_end: why the nearest evaluated value past the interval's other end (below it for
            ``largest``, above it for ``smallest``) fails, or ``None`` where that end is the
            bracket's.
        why_none: with no answer, why: a condition every end fails (with where a wider
            bracket could help, or that the knob's range ends there) or two targets whose
            boundaries leave no value between them.
        other_draws: the answer on other draws of the workload (``other_draws``), or none.
        ends_valid_range: the nearest evaluated value past the answer is not a valid config
            (or a skipped choice): the answer is where the knob's valid values end, and
            ``binding`` only the tightest target there.
    """

    plan: Plan
    answer: float | None
    binding: str | None
    headroom: float | None
    points: pd.DataFrame
    folder: Path
    monotone: bool = True
    beyond: str | None = None
    skipped: dict[float | int, str] = dataclasses.field(default_factory=dict)
    interval: tuple[float, float] | None = None
    other_end: str | None = None
    why_none: str | None = None
    other_draws: tuple[OtherDraw, ...] = ()
    ends_valid_range: bool = False


@dataclass(frozen=True)
class OtherDraw:
    """The answer's config run on another draw of its workload.

    Attributes:
        seed: the config's ``seed`` for that draw (arrivals and lengths).
        meets: every target holds and every request fits the pool (as a plan point).
        values: each target's metric at that draw (NaN where the run has none).
    """

    seed: int
    meets: bool
    values: dict[str, float]


def other_draws(
    result: PlanResult,
    count: int,
    *,
    jobs: int = 1,
    quick: bool = False,
    scheduler: str | None = None,
) -> PlanResult:
    """``result`` with its answer's config run on ``count`` other draws of its workload: seeds
    ``seed + 1 ... seed + count`` of its config's, modulo 2**64 (the seed's range: past its top
    they wrap to 0, not to an invalid config) (arrivals and lengths drawn anew), each a point
    of the plan's folder. One draw's answer is where its metric crossed the bound: near a knee,
    another draw of the same workload crosses elsewhere, and this says by how much.

    Raises:
        PlanPointError: a draw's run failed (as a plan point's).
    """
    plan, answer = result.plan, result.answer
    if answer is None or count <= 0:
        return result
    spec = plan.config(answer, quick=quick)
    seed = config_from_dict(spec["data"], spec["overrides"], warn=False).seed
    draws = []
    for other in ((seed + k) % 2**64 for k in range(1, count + 1)):
        variant = dataclasses.replace(plan, base={**plan.base, "seed": other})
        ev = _Evaluator(variant, result.folder, jobs, quick, None, scheduler)
        ev.evaluate([answer])
        summary = ev.seen[answer]
        values = {t.metric: float(summary.get(t.metric, math.nan)) for t in plan.targets}
        draws.append(OtherDraw(other, ev.meets(answer), values))
    return dataclasses.replace(result, other_draws=tuple(draws))


class _Evaluator:
    """Runs (or reuses) the plan's points and remembers their summaries by knob value."""

    def __init__(
        self,
        plan: Plan,
        folder: Path,
        jobs: int,
        quick: bool,
        on_point: Callable[[float, dict[str, Any], bool], None] | None,
        scheduler: str | None = None,
    ) -> None:
        self.plan, self.folder, self.jobs, self.quick = plan, folder, jobs, quick
        self.scheduler = scheduler
        self.on_point = on_point
        self.seen: dict[float, dict[str, Any]] = {}
        self.skipped: dict[float, str] = {}  # choices whose config is invalid: why
        self.warned: set[str] = set()  # the points' warnings, said once per plan run

    def _seen(self, x: float, summary: dict[str, Any]) -> None:
        self.seen[x] = summary
        if self.on_point is not None:
            self.on_point(self.plan.value(x), summary, self.meets(x))

    def meets(self, x: float) -> bool:
        """Every target holds and no request was turned away (too long for the pool)."""
        summary = self.seen[x]
        return (
            "error" not in summary
            and not summary.get("num_rejected_kv_pool", 0)
            and all(t.met(summary) for t in self.plan.targets)
        )

    def valid(self, xs: Sequence[float]) -> list[float]:
        """The values of ``xs`` whose config validates; the others go to ``skipped`` with the
        validation error's first line (validation only: nothing is simulated)."""
        kept = []
        for x in xs:
            spec = self.plan.config(x, quick=self.quick)
            try:
                config_from_dict(spec["data"], spec["overrides"], warn=False)
            except ValueError as err:
                self.skipped[x] = str(err).splitlines()[0]
                continue
            kept.append(x)
        return kept

    def _check_one_valid_range(self, x: float, error: str) -> None:
        """Refuse an invalid config between two valid ones: the search reads an invalid config
        as failing the targets, which is right where validity ends at one side (a KV budget
        too small to hold a request) but gives a wrong answer where the valid values are not one
        range (vAttention's page sizes: powers of two only).

        Raises:
            ValueError: naming the value, the valid ones around it and the config's error.
        """
        valid = [y for y, summary in self.seen.items() if "error" not in summary]
        below = [y for y in valid if y < x]
        above = [y for y in valid if y > x]
        if not below or not above:
            return
        field, value = self.plan.field, self.plan.value
        raise ValueError(
            f"{field} = {format_value(value(x), field)} is not a valid config, though "
            f"{format_value(value(max(below)), field)} below it and "
            f"{format_value(value(min(above)), field)} above it are, so the search cannot tell "
            "where the targets stop holding (its valid values must be one range); list the "
            f"values to try as [question] choices in a plan file: {error.splitlines()[0]}"
        )

    def evaluate(self, xs: Sequence[float]) -> None:
        """Simulate the values not seen yet (on ``jobs`` workers), reusing stored points."""
        todo: dict[str | None, tuple[Point, list[float]]] = {}  # config key: its point, values
        builds: list[str | None] = []
        for x in xs:
            if x in self.seen or any(x in at for _, at in todo.values()):
                continue
            spec = self.plan.config(x, quick=self.quick)
            try:
                config = config_from_dict(spec["data"], spec["overrides"], varied=self.plan.varied)
            except ValueError as err:
                self._check_one_valid_range(x, str(err))
                self._seen(x, {"error": str(err)})
                continue
            key = config.key()
            if key in todo:  # (two values may give one config: it runs once)
                todo[key][1].append(x)
                continue
            build = finished_by(self.folder, key)
            if build == source_build():
                stored = point_dir(self.folder, key) / "summary.json"
                self._seen(x, read_summary(stored))
                continue
            builds.append(build)
            point = Point(
                len(self.seen) + len(todo), {self.plan.field: self.plan.value(x)}, None, config
            )
            todo[key] = (point, [x])
        warn_stale(self.folder, builds, f"plan {self.folder.name}")
        points = [point for point, _ in todo.values()]
        stream = outcomes(points, jobs=self.jobs, scheduler=self.scheduler, said=self.warned)
        for point, outcome in stream:
            xs_at = todo[point.key][1]
            x = xs_at[0]  # (the value the point was made for)
            if outcome.error is not None and outcome.error.startswith(_MISSING_DATA):
                # the workload, not this knob value, is at fault: say so as `kvsim run` does
                raise PlanPointError(outcome.error.removeprefix(_MISSING_DATA))
            if outcome.error is not None or outcome.results is None:
                raise PlanPointError(
                    f"{self.plan.field} = {self.plan.value(x):g}: the run failed: {outcome.error}"
                )
            save_outcome(self.folder, point, outcome)
            for same in xs_at:
                self._seen(same, outcome.results.summary)


def candidates(plan: Plan) -> Sequence[float]:
    """The knob's values the search may return, ascending: the choices, the integers in the
    bracket (a ``range``, never materialised), or a geometric grid of ratio ``1 + resolution``."""
    if plan.choices:
        return [c for c in sorted(plan.choices) if plan.lo <= c <= plan.hi]
    if plan.integer:
        return range(math.ceil(plan.lo), math.floor(plan.hi) + 1)
    steps = max(1, math.ceil(math.log(plan.hi / plan.lo) / math.log1p(plan.resolution)))
    return [plan.lo * (plan.hi / plan.lo) ** (i / steps) for i in range(steps + 1)]


class UnknownConfigFieldError(ValueError):
    """A plan's base config names a field no config has (``Plan.check_field``): the message is
    the config's error, for the caller to place in the file or the ``--set`` it came from."""


def is_unknown_field(message: str) -> bool:
    """Whether a config's error ``message`` says a field is not a config field (a typo)."""
    return "Extra inputs are not permitted" in message or "not a table" in message


def plan_folder(out_root: str | Path, name: str, *, quick: bool = False) -> Path:
    """Where a plan's points and answer live: ``OUT/plan/NAME`` (``OUT/plan/quick/NAME``)."""
    return Path(out_root) / "plan" / ("quick" if quick else "") / name


def run_plan(
    plan: Plan,
    out_root: str | Path = "results",
    *,
    jobs: int = 1,
    quick: bool = False,
    on_point: Callable[[float | int, dict[str, Any], bool], None] | None = None,
    scheduler: str | None = None,
) -> PlanResult:
    """Answer ``plan``: the interval of ``candidates`` meeting every target, found by k-ary
    search of each target's boundary (``kvsim.study.plan_search``: ``PROBES_PER_ROUND`` points per
    round, whatever ``jobs``: the points visited, and so the answer, are the executor's to
    speed up, not to choose), and its lower (``smallest``) or upper (``largest``) end.

    Args:
        plan: the question.
        out_root: results root; points go to ``OUT/plan/NAME/points`` (``OUT/plan/quick/NAME``
            with ``quick``).
        jobs: processes (this one and ``jobs - 1`` workers) sharing each round's values.
        quick: apply the plan's ``[quick] set`` overrides (small runs for tests and notebooks).
        on_point: called with ``(knob value, summary, meets)`` as each value is evaluated.
        scheduler: run each round's points on a Dask cluster (``"local"`` or an address), as
            ``kvsim sweep --scheduler`` does; ``None``: ``jobs`` local processes.

    Choices whose config is invalid (a TP size that does not divide the model's heads) are
    skipped (``PlanResult.skipped``), not counted as failing: the search runs over the others.

    Raises:
        ValueError: the bracket holds no candidate, every choice is invalid, or the bracket's
            best end (``hi`` for smallest, ``lo`` for largest) is not a valid config (then no
            value could be judged an answer: the message gives the config's error).
    """
    folder = plan_folder(out_root, plan.name, quick=quick)
    check_results_folder(folder, Path(out_root))
    (folder / POINTS).mkdir(parents=True, exist_ok=True)
    ev = _Evaluator(plan, folder, max(1, jobs), quick, on_point, scheduler)
    grid = ev.valid(candidates(plan)) if plan.choices else candidates(plan)
    if not grid:
        why = "; ".join(f"{plan.value(x)}: {e}" for x, e in ev.skipped.items())
        raise ValueError(
            f"{plan.field}: no valid value between lo={plan.lo:g} and hi={plan.hi:g}"
            + (f" ({why})" if why else "")
        )
    smallest = plan.direction == "smallest"
    ev.evaluate([grid[0], grid[-1]])
    _check_best_end(
        plan, ev, grid[-1] if smallest else grid[0], grid[0] if smallest else grid[-1], quick
    )
    _check_targets_measured(plan, [ev.seen[grid[0]], ev.seen[grid[-1]]])
    interval = search_interval(grid, conditions(plan), ev.seen.__getitem__, ev.evaluate)
    return _result(plan, ev, grid, interval, folder)


def _check_targets_measured(plan: Plan, summaries: list[dict[str, Any]]) -> None:
    """Refuse a target on a metric that the bracket's runs do not give (no ``[slo]`` for
    goodput, no drafts for ``spec_decode_*``, no tier for ``kv_offload_*``): its NaN would read
    as failing everywhere, and the plan answer "none" with advice to widen the bracket.

    Raises:
        UnmeasuredTargetError: naming the metric and what gives it.
    """
    ran = [s for s in summaries if "error" not in s]
    for target in plan.targets:
        values = [float(s.get(target.metric, math.nan)) for s in ran]
        if ran and all(math.isnan(v) for v in values):
            raise UnmeasuredTargetError(
                f"--target {target.metric}: the plan's runs give no value for it (at "
                f"{plan.field} = {plan.lo:g} and {plan.hi:g}); a run gives it only with what it "
                "measures configured (goodput and slo_attainment: [slo] targets; spec_decode_*: "
                "speculative.num_speculative_tokens; kv_offload_* and cpu_tier_*: an [offload] "
                "tier): set that, or drop the target"
            )


def _runs(summary: dict[str, Any]) -> bool:
    """The point's config is valid and the pool holds every request."""
    return "error" not in summary and not summary.get("num_rejected_kv_pool", 0)


def conditions(plan: Plan) -> list[Condition]:
    """What every point must satisfy: a valid config whose requests all fit the pool, then each
    target (the order ``search_interval`` searches them in)."""
    return [
        Condition("a valid config whose requests fit the pool", _runs),
        *(Condition(f"{t.metric} <= {t.bound:g}", t.met) for t in plan.targets),
    ]


def _check_best_end(plan: Plan, ev: _Evaluator, best: float, worst: float, quick: bool) -> None:
    """Refuse a bracket whose best end is an invalid config: every value would "fail".

    Raises:
        ValueError: naming the value, the bracket end to move and the config's error; where the
            other end fails alike on another field than the knob, the config at fault, not the
            bracket.
        QuickSetError: the same, where the field at fault is one the ``[quick] set`` sets.
    """
    error = ev.seen[best].get("error")
    if error is None:
        return
    field = str(error).split(": ", 1)[0]
    if field != plan.field and ev.seen[worst].get("error") == error:
        whatever = f"is invalid whatever {plan.field} (at {plan.lo:g} and at {plan.hi:g})"
        if quick and field in plan.quick:
            raise QuickSetError(field, f"the plan's [quick] set {whatever}: {error}")
        source = "the plan's config"
        if field in plan.varied:
            source = f"the plan's config with --set {field}"
        raise ValueError(f"{source} {whatever}: {error}")
    end = "--hi" if plan.direction == "smallest" else "--lo"
    raise ValueError(
        f"{plan.field} = {format_value(plan.value(best), plan.field)} (the bracket's best end, "
        f"{end}) is not a valid config, so no value could be shown to meet the targets: {error}"
    )


def _points(plan: Plan, ev: _Evaluator) -> pd.DataFrame:
    rows = []
    for x in sorted(ev.seen):
        summary = ev.seen[x]
        row: dict[str, Any] = {plan.field: plan.value(x), "meets": ev.meets(x)}
        for t in plan.targets:
            row[t.metric] = summary.get(t.metric, math.nan)
        row["num_rejected_kv_pool"] = summary.get("num_rejected_kv_pool", 0)
        row["error"] = summary.get("error")
        rows.append(row)
    return pd.DataFrame(rows)


def _nearest_past(ev: _Evaluator, x: float, upwards: bool) -> float | None:
    """The nearest evaluated (or skipped) value past ``x`` (above it, or below), if any."""
    past = [y for y in [*ev.seen, *ev.skipped] if (y > x if upwards else y < x)]
    if not past:
        return None
    return min(past) if upwards else max(past)


def _nearest_failure(plan: Plan, ev: _Evaluator, x: float, upwards: bool) -> str | None:
    """Why the nearest evaluated (or skipped) value past ``x`` (above it, or below) fails."""
    nearest = _nearest_past(ev, x, upwards)
    if nearest is None:
        return None
    why = (
        f"skipped, invalid config: {ev.skipped[nearest]}"
        if nearest in ev.skipped
        else failure(plan, ev.seen[nearest])
    )
    return f"{format_value(plan.value(nearest), plan.field)}: {why}"


def _result(
    plan: Plan, ev: _Evaluator, grid: Sequence[float], interval: Interval, folder: Path
) -> PlanResult:
    points = _points(plan, ev)
    seen = sorted(ev.seen)
    monotone = all(
        changes_at_most_once([c.holds(ev.seen[x]) for x in seen]) for c in conditions(plan)
    )
    skipped = {plan.value(x): why for x, why in sorted(ev.skipped.items())}
    if interval.empty:
        why = _why_none(plan, ev, grid, interval)
        return PlanResult(plan, None, None, None, points, folder, monotone, None, skipped, None,
                          None, why)  # fmt: skip
    smallest = plan.direction == "smallest"
    low, high = grid[interval.low], grid[interval.high]
    at = low if smallest else high
    summary = ev.seen[at]
    target = min(plan.targets, key=lambda t: t.headroom(summary))
    nearest = _nearest_past(ev, at, upwards=not smallest)
    invalid_next = nearest is not None and (
        nearest in ev.skipped or "error" in ev.seen.get(nearest, {})
    )
    return PlanResult(
        plan,
        float(plan.value(at)),
        target.metric,
        target.headroom(summary),
        points,
        folder,
        monotone,
        beyond=_nearest_failure(plan, ev, at, upwards=not smallest),
        skipped=skipped,
        interval=(float(plan.value(low)), float(plan.value(high))),
        other_end=_nearest_failure(plan, ev, high if smallest else low, upwards=smallest),
        ends_valid_range=invalid_next,
    )


def _why_none(plan: Plan, ev: _Evaluator, grid: Sequence[float], interval: Interval) -> str:
    """Why no value meets the targets: a condition both ends fail, where a wider bracket could
    help (or that the knob's range ends there), or two boundaries with no value between."""
    lo, hi = grid[interval.low], grid[interval.high]  # (the bracket's ends where configs run)
    fails = interval.fails_at_both_ends
    if fails is not None:
        target = _target_of(plan, fails)
        ends = ", ".join(
            f"{format_value(plan.value(x), plan.field)}: "
            + (failure(plan, ev.seen[x]) if target is None else _over_bound(target, ev.seen[x]))
            for x in dict.fromkeys((lo, hi))
        )
        end = _easier_end(plan, ev, target, lo, hi)
        where = "both ends" if lo != hi else "the one value asked"
        return f"{fails.name} fails at {where} ({ends}); {widening_advice(plan, end)}"
    assert interval.low_by is not None, "an empty interval names the conditions at its ends"
    assert interval.high_by is not None, "an empty interval names the conditions at its ends"
    low, high = (
        format_value(plan.value(grid[i]), plan.field) for i in (interval.low, interval.high)
    )
    return (
        f"{interval.low_by.name} needs {plan.field} >= {low} but {interval.high_by.name} needs "
        f"it <= {high}: no value meets both (relax a target or change the config)"
    )


def _target_of(plan: Plan, condition: Condition) -> Target | None:
    """The target a condition of ``conditions(plan)`` checks (``None``: the config runs)."""
    return next((t for t in plan.targets if condition.holds == t.met), None)


def _easier_end(
    plan: Plan, ev: _Evaluator, target: Target | None, lo: float, hi: float
) -> Literal["lo", "hi"]:
    """The bracket's end nearer to meeting ``target``: where its metric is lower; for a config
    that cannot run (``None``), the end the knob's natural direction makes easier (more KV,
    more GPUs for ``smallest`` knobs; less load for ``largest`` ones)."""
    if target is not None:
        at_lo = float(ev.seen[lo].get(target.metric, math.nan))
        at_hi = float(ev.seen[hi].get(target.metric, math.nan))
        if math.isfinite(at_lo) and math.isfinite(at_hi) and at_lo != at_hi:
            return "lo" if at_lo < at_hi else "hi"
    return "hi" if plan.direction == "smallest" else "lo"


def knob_limit(plan: Plan, end: Literal["lo", "hi"]) -> tuple[float, str] | None:
    """The furthest value the knob can take at ``end`` of its range, and what it is (``None``:
    no limit known): the smallest and largest choice (TP sizes), one sequence for
    ``max_num_seqs``, and for a KV budget the KV one ``max_model_len`` request needs and what
    the GPU holds beside the weights and activation headroom (``knob_bracket``)."""
    if plan.choices:
        return (
            (min(plan.choices), "its smallest choice")
            if end == "lo"
            else (
                max(plan.choices),
                "its largest choice",
            )
        )
    limit = knob_bracket(plan.field, plan.base, plan.varied).get(end)
    if limit is not None:
        what = (
            "the KV one max_model_len request needs"
            if end == "lo"
            else "what the GPU holds beside the weights and activation headroom"
        )
        return float(limit), what
    if end == "lo" and plan.field == "scheduler.max_num_seqs":
        return 1.0, "one sequence at a time"
    return None


def bracket_at_limit(plan: Plan, end: Literal["lo", "hi"]) -> str | None:
    """What the knob's range ends at, where the bracket's ``end`` already reaches it
    (``"1 = one sequence at a time"``), else ``None``: a wider bracket there could help."""
    limit = knob_limit(plan, end)
    value = plan.lo if end == "lo" else plan.hi
    if limit is None or (value > limit[0] if end == "lo" else value < limit[0]):
        return None
    return f"{format_value(plan.value(value), plan.field)} = {limit[1]}"


def widening_advice(plan: Plan, end: Literal["lo", "hi"]) -> str:
    """``"widen --hi"``, or where the bracket already reaches the knob's range there, that no
    value meets the target (never advice to leave the knob's range)."""
    at_limit = bracket_at_limit(plan, end)
    if at_limit is None:
        return f"widen --{end}"
    return (
        f"no wider bracket helps ({at_limit}), so no value meets it: relax the target or "
        "change the config"
    )


def answer_config(plan: Plan, answer: float) -> Any:
    """The config at a KV budget answer whose share of the GPU is one number: ``None`` for
    another knob, an invalid config, or a fleet whose replicas differ in GPU, parallelism, model,
    drafter or cache settings (each derives another share of its own GPU, or a budget of its
    own the knob does not reach)."""
    if plan.field not in KV_FIELDS:
        return None
    config = plan.config_at(answer)
    if config is None:
        return None
    kinds = {
        (r.gpu, r.parallel, r.model, r.draft_params, r.cache.model_dump_json())
        for r in config.replica_configs
    }
    return config if len(kinds) == 1 else None


def answer_utilization(plan: Plan, answer: float | None) -> float | None:
    """A KV budget answer as the least ``gpu_memory_utilization`` that derives it
    (``kvsim.config.memory.utilization_for_budget``; by kvsim's arithmetic: the GPU preset's
    memory, ``cache.activation_headroom_bytes``); ``None`` where ``answer_config`` is."""
    config = None if answer is None else answer_config(plan, answer)
    return None if config is None else utilization_for_budget(config)


def format_value(value: float | int, field: str = "", *, unit: bool = True) -> str:
    """A knob value for people: integers with thousands separators, reals to 4 digits; a
    ``field`` given in bytes/s in the GB/s its label names (``display_unit``, with that unit
    unless ``unit`` is false)."""
    from kvsim.view.labels import display_unit, field_value

    shown = display_unit(field) if field else None
    if shown is not None:
        return f"{field_value(field, value)} {shown[1]}" if unit else field_value(field, value)
    return f"{value:,}" if isinstance(value, int) else f"{value:.4g}"


def failure(plan: Plan, summary: dict[str, Any]) -> str:
    """Why a point fails: an invalid config, requests too long for the pool, or targets."""
    if "error" in summary:
        return "invalid config: " + str(summary["error"]).split(";")[0]
    if summary.get("num_rejected_kv_pool", 0):
        return f"{plural(int(summary['num_rejected_kv_pool']), 'request')} too long for the pool"
    over = [_over_bound(t, summary) for t in plan.targets if not t.met(summary)]
    return ", ".join(over) or "meets every target"


def _over_bound(target: Target, summary: dict[str, Any]) -> str:
    """``"metric = value > bound"`` (an invalid config: its error)."""
    if "error" in summary:
        return "invalid config: " + str(summary["error"]).split(";")[0]
    value = float(summary.get(target.metric, math.nan))
    return f"{target.metric} = {_over(value, target.bound)} > {target.bound:g}"


def _over(value: float, bound: float) -> str:
    """``value`` to 4 significant digits, or as many more as it takes to read above ``bound``
    (0.100026 over a bound of 0.1 is "0.10003", not "0.1")."""
    for digits in range(4, 18):
        text = f"{value:.{digits}g}"
        if not float(text) <= bound:
            return text
    return repr(value)
