"""Reader of the RTX 4090 run (casys-kaist/LLMServingSim @ 5daddb2; ``docs/validate.md`` has the
format).

``rtx4090-llama-3.1-8b/`` holds ``workload.jsonl`` (the requests sent, with their exact prompt
token ids), ``requests.jsonl`` (vLLM's own timestamps of each: ``queued_ts``, ``scheduled_ts``,
``first_token_ts``, ``last_token_ts``, seconds on the server's clock), ``meta.json`` (the whole
resolved vLLM config) and ``timeseries.csv`` (vLLM's ``kv_cache_pct``, running and waiting
requests every second). Latencies are the engine's (from ``queued_ts``), so the replay's arrivals
are the ``queued_ts``; the prompts' token ids give each full 16-token block a key chained over
its prefix, so prefix-cache hits replay exactly (at the run's block size).
"""

from __future__ import annotations

import csv
import hashlib
import json
import logging
import math
from collections.abc import Hashable
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kvsim.base.say_once import warn_once
from kvsim.base.textfile import parse_json, read_text
from kvsim.config import ModelSpec
from kvsim.validate.fields import flag, integer, items, number, read_json_file, table, text
from kvsim.validate.runs import MeasuredRun, Stage
from kvsim.workload.request import RequestSpec

logger = logging.getLogger(__name__)

RTX4090_SUBDIR = "rtx4090-llama-3.1-8b"
_MODELS = {"meta-llama/Llama-3.1-8B": "llama-3.1-8b"}  # presets (the folder has no config.json)
_GPUS = {"NVIDIA GeForce RTX 4090": "rtx-4090"}
_SERIES_COLUMNS = ("t", "running", "waiting", "kv_cache_pct")
NOTES = (
    "the model is kvsim's llama-3.1-8b preset (the run's folder has no config.json)",
    "latencies are vLLM's own (from queued_ts): no frontend latency is added",
)
# resolved_config settings the replay does not read, at the value it assumes (vLLM's defaults,
# vllm/config/scheduler.py, cache.py, parallel.py): a run that set another gets a note
ASSUMED: dict[tuple[str, str], object] = {
    ("scheduler_config", "enable_chunked_prefill"): True,
    ("scheduler_config", "policy"): "fcfs",
    ("scheduler_config", "long_prefill_token_threshold"): 0,
    ("scheduler_config", "max_num_partial_prefills"): 1,
    ("cache_config", "cache_dtype"): "auto",
    ("model_config", "dtype"): "torch.bfloat16",  # (the preset's weights and KV)
    ("model_config", "quantization"): None,
    ("cache_config", "sliding_window"): None,
    ("parallel_config", "pipeline_parallel_size"): 1,
    ("parallel_config", "data_parallel_size"): 1,
    ("parallel_config", "decode_context_parallel_size"): 1,
}
ABSENT = ("speculative_config", "kv_transfer_config", "lora_config")  # None: not in the replay


def read_rtx4090_run(root: Path) -> MeasuredRun:
    """Read the RTX 4090 run of ``root`` (rules: the module docstring).

    Raises:
        FileNotFoundError: a file of the run is missing.
        ValueError: a malformed file, line or field, naming the file, the line, the field and the
            value.
    """
    folder = root / RTX4090_SUBDIR
    meta_path = folder / "meta.json"
    meta = table(read_json_file(meta_path), str(meta_path))
    settings = _settings(meta_path, meta)
    sent = _jsonl(folder / "workload.jsonl")
    timed = _jsonl(folder / "requests.jsonl")
    if len(sent) != len(timed):
        raise ValueError(
            f"{folder}: workload.jsonl has {len(sent)} requests, requests.jsonl {len(timed)}"
        )
    specs, measured = _requests(folder, sent, timed, settings["block_size"])
    duration = max(s.arrival_time_s for s in specs) or 1.0
    first_epoch = number(
        timed[0][1], "arrival_time", _at(folder / "requests.jsonl", timed[0][0]), maximum=1e12
    )
    started = _epoch(text(meta, "started_at", str(meta_path)), meta_path)
    if isinstance(meta.get("finished_at"), str):
        wall_s = _epoch(meta["finished_at"], meta_path) - started
        if duration > 1.5 * max(wall_s, 1.0):  # (arrivals the run outlasted: other units)
            logger.warning(
                "%s: the requests' queued_ts span %.4g s, but the run lasted %.4g s "
                "(%s started_at to finished_at): are the timestamps in another unit than "
                "seconds?",
                folder / "requests.jsonl",
                duration,
                wall_s,
                meta_path.name,
            )
    return MeasuredRun(
        name=RTX4090_SUBDIR,
        kind="rtx4090",
        split="held-out",
        model=_model(meta, meta_path),
        gpu=_gpu(meta, meta_path),
        tensor_parallel_size=settings["tensor_parallel_size"],
        num_gpu_blocks=settings["num_gpu_blocks"],
        block_size_tokens=settings["block_size"],
        max_num_seqs=settings["max_num_seqs"],
        max_num_batched_tokens=settings["max_num_batched_tokens"],
        max_model_len=settings["max_model_len"],
        enable_prefix_caching=settings["enable_prefix_caching"],
        async_scheduling=settings["async_scheduling"],
        vllm_version=text(meta, "vllm_version", str(meta_path)),
        clock="engine",
        requests=specs,
        measured=measured,
        stages=[Stage(0, len(specs) / duration, duration, len(specs))],
        kv_usage=_series(folder / "timeseries.csv", offset_s=first_epoch - started),
        notes=NOTES + unmodelled_settings(meta, meta_path),
    )


def unmodelled_settings(meta: dict[str, Any], path: Path) -> tuple[str, ...]:
    """A note for each ``resolved_config`` setting the replay does not model that the run set
    away from what the replay assumes (``ASSUMED``; a section of ``ABSENT`` that is set): its
    results then differ for a reason kvsim does not show. Each is logged as a warning too."""
    resolved = table(meta.get("resolved_config"), f"{path}: resolved_config")
    notes = []
    for (section, name), assumed in ASSUMED.items():
        values = resolved.get(section)
        if isinstance(values, dict) and name in values and values[name] != assumed:
            notes.append(
                f"the run sets {section}.{name} = {values[name]!r}, which the replay does not "
                f"model (it assumes {assumed!r})"
            )
    for section in ABSENT:
        if resolved.get(section) not in (None, {}):
            notes.append(f"the run sets {section}, which the replay does not model")
    for note in notes:
        warn_once(logger, "%s: %s", path, note)
    return tuple(notes)


def _settings(path: Path, meta: dict[str, Any]) -> dict[str, Any]:
    kwargs_where = f"{path}: engine_kwargs"
    kwargs = table(meta.get("engine_kwargs"), kwargs_where)
    cache_where = f"{path}: kv_cache"
    cache = table(meta.get("kv_cache"), cache_where)
    resolved = table(meta.get("resolved_config"), f"{path}: resolved_config")
    sched_where = f"{path}: resolved_config.scheduler_config"
    scheduler = table(resolved.get("scheduler_config"), sched_where)
    return {
        "tensor_parallel_size": integer(kwargs, "tensor_parallel_size", kwargs_where, minimum=1),
        "max_num_seqs": integer(kwargs, "max_num_seqs", kwargs_where, minimum=1),
        "max_num_batched_tokens": integer(
            kwargs, "max_num_batched_tokens", kwargs_where, minimum=1
        ),
        "max_model_len": integer(kwargs, "max_model_len", kwargs_where, minimum=2),
        "num_gpu_blocks": integer(cache, "num_gpu_blocks", cache_where, minimum=2),
        "block_size": integer(cache, "block_size", cache_where, minimum=1),
        "enable_prefix_caching": flag(cache, "enable_prefix_caching", cache_where),
        "async_scheduling": flag(scheduler, "async_scheduling", sched_where, default=False),
    }


def _model(meta: dict[str, Any], path: Path) -> ModelSpec:
    name = text(meta, "model", str(path))
    if name not in _MODELS:
        raise ValueError(f"{path}: model {name!r} has no kvsim preset; known: {sorted(_MODELS)}")
    return ModelSpec.model_validate(_MODELS[name])


def _gpu(meta: dict[str, Any], path: Path) -> str:
    hardware = table(meta.get("hardware"), f"{path}: hardware")
    name = text(hardware, "device_name", f"{path}: hardware")
    if name not in _GPUS:
        raise ValueError(
            f"{path}: hardware.device_name {name!r} has no GPU preset; known: {sorted(_GPUS)}"
        )
    return _GPUS[name]


def _epoch(value: str, path: Path) -> float:
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ValueError(f"{path}: started_at must be an ISO 8601 time, got {value!r}") from None


def _at(path: Path, line: int) -> str:
    return f"{path} line {line}"


def _jsonl(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """The file's objects with their 1-based line numbers (blank lines skipped)."""
    out = []
    for number_, line in enumerate(read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        where = _at(path, number_)
        try:
            value = parse_json(line, where)
        except json.JSONDecodeError as err:
            raise ValueError(f"{where}: invalid JSON ({err.msg} at column {err.colno})") from None
        out.append((number_, table(value, where)))
    if not out:
        raise ValueError(f"{path}: no requests")
    return out


_STAMPS = ("queued_ts", "scheduled_ts", "first_token_ts", "last_token_ts")


def _requests(
    folder: Path,
    sent: list[tuple[int, dict[str, Any]]],
    timed: list[tuple[int, dict[str, Any]]],
    block_size: int,
) -> tuple[list[RequestSpec], pd.DataFrame]:
    """Each request at its ``queued_ts`` (relative to the first) with its prompt's block keys,
    and vLLM's measured TTFT, E2E, TPOT and queue time (seconds)."""
    sizes: list[tuple[int, int]] = []
    segments = []
    stamps: list[list[float]] = []
    for i, ((s_line, s_row), (t_line, t_row)) in enumerate(zip(sent, timed, strict=True)):
        s_where = _at(folder / "workload.jsonl", s_line)
        t_where = _at(folder / "requests.jsonl", t_line)
        ids = items(s_row.get("input_tok_ids"), f"{s_where}: input_tok_ids")
        prompt = integer(s_row, "input_toks", s_where, minimum=1)
        if len(ids) != prompt:
            raise ValueError(f"{s_where}: input_toks is {prompt}, input_tok_ids holds {len(ids)}")
        segments.append(block_segments(ids, block_size, i, s_where))
        output = integer(s_row, "output_toks", s_where, minimum=1)
        for field, sent_value in (("input_toks", prompt), ("output_toks", output)):
            got = integer(t_row, field, t_where, minimum=1)
            if got != sent_value:
                raise ValueError(
                    f"{t_where}: {field} is {got}, workload.jsonl line {s_line} has {sent_value}; "
                    "expected the same request"
                )
        times = [number(t_row, k, t_where, maximum=1e12) for k in _STAMPS]
        if times != sorted(times):
            shown = ", ".join(f"{k} {v}" for k, v in zip(_STAMPS, times, strict=True))
            raise ValueError(f"{t_where}: expected {' <= '.join(_STAMPS)}, got {shown}")
        sizes.append((prompt, output))
        stamps.append(times)
    frame = pd.DataFrame(stamps, columns=list(_STAMPS))
    arrivals = (frame["queued_ts"] - frame["queued_ts"].min()).tolist()
    specs = [
        RequestSpec(
            req_id=i,
            arrival_time_s=arrivals[i],
            prompt_tokens=prompt,
            output_tokens=output,
            max_tokens=output,
            token_segments=segments[i],
        )
        for i, (prompt, output) in enumerate(sizes)
    ]
    decodes = pd.Series([max(o - 1, 1) for _, o in sizes])
    measured = pd.DataFrame(
        {
            "req_id": np.arange(len(specs)),
            "stage": 0,
            "ttft_s": frame["first_token_ts"] - frame["queued_ts"],
            "e2e_s": frame["last_token_ts"] - frame["queued_ts"],
            "tpot_s": (frame["last_token_ts"] - frame["first_token_ts"]) / decodes,
            "queue_s": frame["scheduled_ts"] - frame["queued_ts"],
        }
    )
    specs.sort(key=lambda spec: spec.arrival_time_s)
    return specs, measured


def block_segments(
    token_ids: list[Any], block_size: int, req_id: int, where: str
) -> tuple[tuple[Hashable, int], ...]:
    """Token runs of a prompt given by its token ids: each full block of ``block_size`` tokens is
    one run whose id is a digest chained over every token up to its end (equal ids: equal
    prefixes, vLLM's chained block hash), the partial last block a run of this request's own.

    Raises:
        ValueError: a token id that is not an integer in [0, 2**31).
    """
    for k, token in enumerate(token_ids):
        if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < 2**31:
            raise ValueError(
                f"{where}: input_tok_ids[{k}] must be a token id in [0, 2^31), got {token!r}"
            )
    data = np.asarray(token_ids, dtype="<i4").tobytes()
    digest = b""
    runs: list[tuple[Hashable, int]] = []
    full = len(token_ids) // block_size
    width = 4 * block_size
    for b in range(full):
        digest = hashlib.blake2b(
            digest + data[b * width : (b + 1) * width], digest_size=16
        ).digest()
        runs.append((("block", digest), block_size))
    tail = len(token_ids) - full * block_size
    if tail:
        runs.append((("tail", req_id), tail))
    return tuple(runs)


def _series(path: Path, offset_s: float) -> pd.DataFrame:
    """vLLM's logged gauges every second, on the replay's clock (``t`` minus ``offset_s``, the
    first request's arrival after the logger started)."""
    text_ = read_text(path)
    reader = csv.DictReader(text_.splitlines())
    missing = [c for c in _SERIES_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise ValueError(f"{path} line 1: missing column(s) {missing}")
    rows = []
    for line, row in enumerate(reader, 2):
        values = {}
        for column in _SERIES_COLUMNS:
            try:
                value = float(row[column])
            except (TypeError, ValueError):
                value = float("nan")
            bad = (
                not math.isfinite(value) or value < 0 or (column == "kv_cache_pct" and value > 100)
            )
            if bad:
                raise ValueError(
                    f"{path} line {line}: {column} must be a number"
                    + (" from 0 to 100" if column == "kv_cache_pct" else " >= 0")
                    + f", got {row[column]!r}"
                )
            values[column] = value
        rows.append(values)
    frame = pd.DataFrame(rows, columns=list(_SERIES_COLUMNS))
    frame.insert(0, "time_s", frame.pop("t") - offset_s)
    busy = frame["running"] > 0
    if busy.any() and frame.loc[busy, "kv_cache_pct"].max() <= 1.0:  # (vLLM logs 0-100)
        logger.warning(
            "%s: kv_cache_pct is at most %g while requests run: a share (0-1) where vLLM logs "
            "a percentage (0-100)? It is compared as a percentage",
            path,
            frame.loc[busy, "kv_cache_pct"].max(),
        )
    return frame
