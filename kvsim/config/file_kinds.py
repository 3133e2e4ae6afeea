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

# keys only a plan has, and keys only an experiment has (``kvsim.study.plan.load_plan``,
# ``kvsim.study.experiment.parse_experiment``); both may have ``base``, ``name``, ``quick``
_PLAN_KEYS = frozenset({"question", "experiment", "label", "set"})
_EXPERIMENT_KEYS = frozenset({"grid", "zip", "snapshot_at_s", "analysis", "base"})

_WHAT: dict[str, str] = {
    "config": "a config (sections such as [model], [cache], [workload])",
    "experiment": "an experiment (a sweep: [base] with [grid] or [[zip]])",
    "plan": "a plan ([question], or experiment = and label = naming a point)",
    "workload": "a workload preset (arrival, lengths, rate_per_s, ... at its top)",
}


def _command(kind: str, path: Path) -> str:
    if kind == "workload":
        return f"kvsim run --set workload={path}"
    return {"config": "kvsim run", "experiment": "kvsim sweep", "plan": "kvsim plan"}[kind] + (
        f" {path}"
    )


def file_kind(data: dict[str, Any]) -> Kind | None:
    """The kind of TOML file ``data`` (a read table) is: ``"config"`` when every key is a config
    field (an empty table too), else ``"plan"`` or ``"experiment"`` by a key only that kind has,
    else ``"workload"`` when every key is a workload field; ``None`` when it is none of them (a
    config with a misspelt section: its own validation names the key)."""
    from kvsim.config.sim import SimConfig
    from kvsim.workload.spec import WorkloadSpec

    keys = set(data)
    if keys <= set(SimConfig.model_fields):
        return "config"
    if keys & _PLAN_KEYS:
        return "plan"
    if keys & _EXPERIMENT_KEYS:
        return "experiment"
    if keys <= set(WorkloadSpec.model_fields) | {"description"}:
        return "workload"
    return None


def check_kind(path: str | Path, data: dict[str, Any], *expected: Kind) -> None:
    """Refuse a file of another kind than those ``expected``, naming the command that runs it.

    Args:
        path: the file, as the user named it.
        data: its table.
        expected: the kinds the caller reads.

    Raises:
        ValueError: ``data`` is recognisably another kind (``file_kind``).
    """
    kind = file_kind(data)
    if kind is None or kind in expected:
        return
    wanted = " or ".join(_WHAT[k].split(" (")[0] for k in expected)
    raise ValueError(
        f"{path} is {_WHAT[kind]}, not {wanted}; run it with {_command(kind, Path(path))}"
    )


def what_file(path: Path) -> str | None:
    """What a kvsim TOML file is and the command that runs it (``"an experiment (...); run it
    with kvsim sweep PATH"``), for a message about a file given where a folder was expected;
    ``None`` for any other file (or one that cannot be read)."""
    if path.suffix != ".toml":
        return None
    from kvsim.base.textfile import read_toml

    try:
        kind = file_kind(read_toml(path))
    except (OSError, ValueError):
        return None
    return None if kind is None else f"{_WHAT[kind]}; run it with {_command(kind, path)}"
