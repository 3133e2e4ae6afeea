"""Which of kvsim's four TOML files a table is, so that a command given another kind says which
command takes it (``kvsim run`` given an experiment, ``kvsim sweep`` given a config) rather than
refusing every key of it.

The kinds: a *config* (``kvsim run``: sections ``model``, ``cache``, ...), an *experiment*
(``kvsim sweep``: ``[base]`` with ``[grid]`` or ``[[zip]]``), a *plan* (``kvsim plan``:
``[question]``, or a point of an experiment named by ``experiment`` and ``label``) and a
*workload* preset (a config's ``workload``: ``arrival``, ``lengths``, ...).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

Kind = Literal["config", "experiment", "plan", "workload"]

# every key a plan and an experiment may have (``kvsim.study.plan.load_plan`` and
# ``kvsim.study.experiment.parse_experiment`` refuse the others), and those one of them needs: a
# plan's base config or experiment, an experiment's base or axes
PLAN_KEYS = frozenset(
    {"name", "description", "base", "experiment", "label", "set", "question", "quick"}
)
_PLAN_NEEDS = frozenset({"base", "experiment", "label", "set", "question"})
EXPERIMENT_KEYS = frozenset(
    {"name", "description", "base", "grid", "zip", "quick", "snapshot_at_s", "analysis"}
)
_EXPERIMENT_NEEDS = frozenset({"base", "grid", "zip"})

_WHAT: dict[str, str] = {
    "config": "a config (sections such as [model], [cache], [workload])",
    "experiment": "an experiment (a sweep: [base] with [grid] or [[zip]])",
    "plan": "a plan ([base], or experiment = and label =, and a [question])",
    "workload": "a workload preset (arrival, lengths, rate_per_s, ... at its top)",
}


def _command(kind: str, path: Path) -> str:
    if kind == "workload":
        return f"kvsim run --set workload={path}"
    return {"config": "kvsim run", "experiment": "kvsim sweep", "plan": "kvsim plan"}[kind] + (
        f" {path}"
    )


def file_kinds(data: dict[str, Any]) -> list[Kind]:
    """The kinds of TOML file ``data`` (a read table) can be, by its keys, in this order: a
    config (every key a config field: an empty table too), a plan, an experiment (every key one
    of theirs, with one it needs: ``name`` and ``[base]`` alone make either), a workload preset
    (every key a workload field). None for a table of no kind (a misspelt section, or a
    config's section beside an experiment's axes: the command's own validation names the key).
    """
    from kvsim.config.sim import SimConfig
    from kvsim.workload.spec import WorkloadSpec

    keys = set(data)
    kinds: list[Kind] = []
    if keys <= set(SimConfig.model_fields):
        kinds.append("config")
    if keys <= PLAN_KEYS and keys & _PLAN_NEEDS:
        kinds.append("plan")
    if keys <= EXPERIMENT_KEYS and keys & _EXPERIMENT_NEEDS:
        kinds.append("experiment")
    if keys <= set(WorkloadSpec.model_fields) | {"description"}:
        kinds.append("workload")
    return kinds


def file_kind(data: dict[str, Any]) -> Kind | None:
    """The first of ``file_kinds``, or ``None`` where ``data`` is of no kind."""
    kinds = file_kinds(data)
    return kinds[0] if kinds else None


def check_kind(path: str | Path, data: dict[str, Any], *expected: Kind) -> None:
    """Refuse a file of another kind than those ``expected``, naming the command that runs it.

    Args:
        path: the file, as the user named it.
        data: its table.
        expected: the kinds the caller reads.

    Raises:
        ValueError: ``data`` is recognisably another kind (``file_kinds``: each it can be).
    """
    kinds = file_kinds(data)
    if not kinds or set(kinds) & set(expected):
        return
    wanted = " or ".join(_WHAT[k].split(" (")[0] for k in expected)
    raise ValueError(
        f"{path} is {' or '.join(_WHAT[k] for k in kinds)}, not {wanted}; run it with "
        + " or ".join(_command(k, Path(path)) for k in kinds)
    )


def what_file(path: Path) -> str | None:
    """What a kvsim TOML file is and the command that runs it (``"an experiment (...); run it
    with kvsim sweep PATH"``), for a message about a file given where a folder was expected;
    ``None`` for any other file (or one that cannot be read)."""
    if path.suffix != ".toml" or not path.is_file():  # (a named pipe's read would block)
        return None
    from kvsim.base.textfile import read_toml

    try:
        kind = file_kind(read_toml(path))
    except (OSError, ValueError):
        return None
    return None if kind is None else f"{_WHAT[kind]}; run it with {_command(kind, path)}"
