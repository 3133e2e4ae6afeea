"""The measured runs kvsim can replay, by name, and their reading.

Names: the H100 experiments of ``h100/split.txt`` whose files are present (e.g.
``20260218-150956-codellama-34b-tp2-codegen``; any unique part of a name works, e.g.
``codellama-34b-tp2-codegen``) and ``rtx4090-llama-3.1-8b``. Groups: ``train``, ``validate``,
``held-out`` (the RTX 4090 run) and ``all``.
"""

from __future__ import annotations

from pathlib import Path

from kvsim.validate.h100 import h100_experiments, read_h100_run
from kvsim.validate.rtx4090 import RTX4090_SUBDIR, read_rtx4090_run
from kvsim.validate.runs import MeasuredRun, Split, real_vllm_dir

GROUPS = ("train", "validate", "held-out", "all")


def list_runs(root: Path | None = None) -> dict[str, Split]:
    """Every run present under ``root`` (default ``real_vllm_dir()``) with its split."""
    root = real_vllm_dir() if root is None else root
    runs: dict[str, Split] = {}
    if (root / "h100" / "split.txt").exists():
        runs.update(h100_experiments(root))
    if (root / RTX4090_SUBDIR / "meta.json").exists():
        runs[RTX4090_SUBDIR] = "held-out"
    return runs


def resolve_names(wanted: list[str], root: Path | None = None) -> list[str]:
    """The run names ``wanted`` means (names, unique parts of names, or groups), in order.

    Raises:
        ValueError: a name that matches no run, or several (naming them).
    """
    root = real_vllm_dir() if root is None else root
    runs = list_runs(root)
    out: list[str] = []
    for text in wanted:
        if text in GROUPS:
            found = [n for n, s in runs.items() if text in ("all", s)]
        elif text in runs:
            found = [text]
        else:
            found = [n for n in runs if text in n]
            if len(found) > 1:
                raise ValueError(f"run {text!r} matches {len(found)} runs: {found}; be precise")
        if not found and not runs:  # (an empty folder: no group can hold a run either)
            raise ValueError(
                f"no measured run in {str(root)!r} (KVSIM_REAL_VLLM): neither h100/split.txt "
                f"nor {RTX4090_SUBDIR}/meta.json is there (docs/validate.md: what the runs hold "
                "and where they come from)"
            )
        if not found:
            raise ValueError(
                f"no measured run {text!r}; choose from {sorted(runs)} or a group {list(GROUPS)}"
            )
        out.extend(n for n in found if n not in out)
    return out


def load_run(name: str, root: Path | None = None) -> MeasuredRun:
    """Read run ``name`` (an exact name of ``list_runs``)."""
    root = real_vllm_dir() if root is None else root
    if name == RTX4090_SUBDIR:
        return read_rtx4090_run(root)
    return read_h100_run(root, name)
