"""The files of ``kvsim calibrate --parts`` (``kvsim.calibrate.parts``), read and checked.

Every error names the file, and where it is one row, the line and the column: a missing file or
column, a column named twice, a file that is not text or not CSV, a metadata ``source`` other than
``measured``, a missing metadata line of those ``--fit-parts`` records (``META_KEYS``), files of
different GPUs (their ``device_name`` differs), a time or rate that is not a positive number, a
count that is not a whole number, a row a file must have (``hbm.csv``'s ``sum`` and ``copy``,
``gemm.csv``'s ``square``, ``sdpa.csv``'s decode and prefill rows, ``host.csv``'s single and
batched copies each way), and in ``steps.csv`` a phase other than ``decode``/``prefill``, a
decode of more than one query token, a prefill chunk longer than its context, or a model label
that is not ``<kvsim preset> tp<N>`` with a tensor-parallel size the model splits into and its
number of layers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from pydantic import ValidationError

from kvsim.config import ModelSpec, ParallelConfig, format_validation_error
from kvsim.config.hardware import check_parallel_fits_model

# the columns each file must have (kvsim.calibrate.parts writes them)
PART_COLUMNS = {
    "hbm": ("op", "bytes_per_s"),
    "gemm": ("model", "op", "tokens", "flops_per_s", "bytes_per_s"),
    "sdpa": ("phase", "bytes_per_s", "flops_per_s"),
    "steps": ("model", "phase", "batch", "query_tokens", "context_tokens", "seconds"),
}
# files a run may lack (written by later versions of `--parts`)
OPTIONAL_COLUMNS = {
    "host": ("direction", "bytes_per_copy", "copies", "seconds", "bytes_per_s", "seconds_per_copy")
}
# the metadata lines (`# key: value`) each file must have, beside `source`
META_KEYS = ("device_name", "driver_version", "torch_version", "cuda_runtime", "date_utc")
TEXT_COLUMNS = ("model", "op", "phase", "direction")
WHOLE_COLUMNS = ("batch", "query_tokens", "context_tokens", "tokens", "bytes_per_copy", "copies")


@dataclass(frozen=True)
class Parts:
    """The files of one ``--parts`` run: ``steps.csv``'s metadata, and one frame per file."""

    meta: dict[str, str]
    frames: dict[str, pd.DataFrame]
    paths: dict[str, Path]


def read_parts(folder: Path) -> Parts:
    """Read and check ``hbm.csv``, ``gemm.csv``, ``sdpa.csv``, ``steps.csv`` (and ``host.csv``
    where there is one) from ``folder``.

    Raises:
        ValueError: anything the module docstring lists, naming the file (line, column, value).
    """
    frames, paths, metas = {}, {}, {}
    for name, columns in {**PART_COLUMNS, **OPTIONAL_COLUMNS}.items():
        path = folder / f"{name}.csv"
        if not path.is_file():
            if name in OPTIONAL_COLUMNS:
                continue
            raise ValueError(f"{path}: missing (expected the files of `kvsim calibrate --parts`)")
        metas[name] = _metadata(path)
        if metas[name].get("source") != "measured":
            raise ValueError(
                f"{path}: source is {metas[name].get('source')!r}, not a GPU measurement "
                "('measured')"
            )
        frames[name], paths[name] = _checked_frame(path, columns), path
    _check_metadata(metas, paths)
    _check_rows(frames, paths)
    return Parts(metas["steps"], frames, paths)


def _check_metadata(metas: dict[str, dict[str, str]], paths: dict[str, Path]) -> None:
    """Refuse a file without one of ``META_KEYS``, and files measured on different GPUs.

    Raises:
        ValueError: naming the file and the keys it lacks, or each file and its device.
    """
    for name, meta in metas.items():
        lacking = [key for key in META_KEYS if not meta.get(key)]
        if lacking:
            raise ValueError(
                f"{paths[name]}: no metadata line for {lacking} (expected the '# key: value' "
                "lines of `kvsim calibrate --parts`)"
            )
    devices = {name: meta["device_name"] for name, meta in metas.items()}
    if len(set(devices.values())) > 1:
        each = ", ".join(f"{paths[n]} says {d!r}" for n, d in devices.items())
        raise ValueError(
            f"parts measured on different devices: {each}; expected the files of one "
            "`kvsim calibrate --parts` run (one GPU)"
        )


def rank_of(label: str) -> tuple[str, int]:
    """``"llama-2-70b tp4"`` -> (model preset, tensor-parallel size).

    Raises:
        ValueError: not ``<preset> tp<N>``.
    """
    match = re.fullmatch(r"(\S+) tp(\d+)", label)
    if match is None:
        raise ValueError(f"model {label!r}: expected '<kvsim model preset> tp<N>'")
    return match[1], int(match[2])


def _metadata(path: Path) -> dict[str, str]:
    meta = {}
    try:
        with path.open(encoding="utf-8") as f:
            for line in f:
                if not line.startswith("#"):
                    break
                key, _, value = line[1:].partition(":")
                meta[key.strip()] = value.strip()
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a text file (expected CSV)") from None
    return meta


def line_of(path: Path, row: int) -> int:
    """The file line of data row ``row`` (0-based): after the metadata and the header."""
    with path.open(encoding="utf-8") as f:
        return sum(1 for line in f if line.startswith("#")) + 2 + row


def _checked_frame(path: Path, columns: tuple[str, ...]) -> pd.DataFrame:
    try:
        frame = pd.read_csv(path, comment="#")
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not a CSV table ({str(err).strip()})") from None
    if frame.empty:
        raise ValueError(f"{path}: no rows")
    # (pandas renames a second "seconds" to "seconds.1": the header as written)
    raw = pd.read_csv(path, comment="#", header=None, nrows=1, dtype=str, keep_default_na=False)
    header = [str(c) for c in raw.iloc[0]]
    twice = sorted({c for c in header if header.count(c) > 1})
    if twice:
        raise ValueError(
            f"{path}, line {line_of(path, -1)}: column(s) {twice} named more than once in the "
            "header; expected each column once"
        )
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing}; expected {list(columns)}")
    for column in columns:
        if column in TEXT_COLUMNS:
            frame[column] = frame[column].astype(str)
            continue
        values = pd.to_numeric(frame[column], errors="coerce")
        bad = ~(values > 0) | ~np.isfinite(values)
        what = "a positive number"
        if column in WHOLE_COLUMNS and not bad.any():
            bad, what = values != values.round(), "a whole number"
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise ValueError(
                f"{path}, line {line_of(path, i)}, column {column}: {frame[column].iloc[i]} "
                f"is not {what}"
            )
        frame[column] = values.astype(int) if column in WHOLE_COLUMNS else values
    return frame


def _check_rows(frames: dict[str, pd.DataFrame], paths: dict[str, Path]) -> None:
    needs = {
        "hbm": ("op", ("sum", "copy")),
        "gemm": ("op", ("square",)),
        "sdpa": ("phase", ("decode", "prefill")),
        "host": ("direction", ("host_to_gpu", "gpu_to_host")),
    }
    for name, (column, values) in needs.items():
        if name in frames:
            lacking = [v for v in values if v not in set(frames[name][column])]
            if lacking:
                raise ValueError(f"{paths[name]}: no row with {column} {lacking}")
    host = frames.get("host")
    if host is not None:
        for direction, rows in host.groupby("direction"):
            if not ((rows.copies == 1).any() and (rows.copies > 1).any()):
                raise ValueError(
                    f"{paths['host']}: {direction} needs a single copy and a batch of copies"
                )
    _check_steps(frames["steps"], paths["steps"])


def _check_steps(steps: pd.DataFrame, path: Path) -> None:
    for i, row in enumerate(steps.itertuples(index=False)):
        where = f"{path}, line {line_of(path, i)}"
        if row.phase not in ("decode", "prefill"):
            raise ValueError(f"{where}, column phase: {row.phase!r}: expected decode or prefill")
        if row.phase == "decode" and row.query_tokens != 1:
            raise ValueError(
                f"{where}, column query_tokens: a decode step has 1, not {row.query_tokens}"
            )
        if row.query_tokens > row.context_tokens:
            raise ValueError(
                f"{where}, column query_tokens: {row.query_tokens} new tokens in a context of "
                f"{row.context_tokens}"
            )
    for label, rows in steps.groupby("model", sort=False):
        where = f"{path}, line {line_of(path, int(np.flatnonzero(steps.model == label)[0]))}"
        try:
            preset, tp = rank_of(str(label))
            model = ModelSpec.model_validate(preset)
            check_parallel_fits_model(model, ParallelConfig(tensor_parallel_size=tp))
        except ValidationError as err:
            reason = format_validation_error(err).splitlines()[0].removeprefix(": ")
            raise ValueError(f"{where}, column model: {label!r}: {reason}") from None
        except ValueError as err:
            raise ValueError(f"{where}, column model: {label!r}: {err}") from None
        if "num_layers" in rows and (rows.num_layers != model.num_layers).any():
            first = int(
                np.flatnonzero((steps.model == label) & (steps.num_layers != model.num_layers))[0]
            )
            raise ValueError(
                f"{path}, line {line_of(path, first)}, column num_layers: "
                f"{steps.num_layers.iloc[first]}: {model.name} has {model.num_layers} layers"
            )
