"""A measured run of a real vLLM server, in one form whatever file format it came in.

``MeasuredRun`` holds what a replay needs (the model, GPU, parallelism, KV block count and
scheduler settings read from the run's own files, the requests at their recorded arrivals) and
what it is held against (per-request latencies, the load stages, vLLM's own KV usage over time
where logged). The readers (``kvsim.validate.h100``, ``kvsim.validate.rtx4090``) build it; the
folder of measured runs is ``$KVSIM_REAL_VLLM``, by default ``../shared/data/real-vllm`` beside
the clone (as the traces use ``$KVSIM_DATA``).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field, fields
from functools import cached_property
from pathlib import Path
from typing import Literal

import pandas as pd

from kvsim.config import ModelSpec
from kvsim.workload.catalog import DataNotFoundError
from kvsim.workload.request import RequestSpec

ENV_VAR = "KVSIM_REAL_VLLM"
_DEFAULT_SUBDIR = Path("shared") / "data" / "real-vllm"
Split = Literal["train", "validate", "test", "held-out"]

# Columns of ``MeasuredRun.measured`` (seconds; NaN where the run does not measure it).
MEASURED_COLUMNS = ("req_id", "stage", "ttft_s", "e2e_s", "tpot_s", "queue_s")


@dataclass(frozen=True, slots=True)
class Stage:
    """One constant-rate load stage: ``num_requests`` requests sent at ``rate_per_s``."""

    index: int
    rate_per_s: float
    duration_s: float
    num_requests: int


@dataclass(frozen=True)
class MeasuredRun:
    """A real vLLM run, ready to replay and to compare with.

    Attributes:
        name: the experiment's name (its folder or file stem).
        kind: its file format (``"h100"`` or ``"rtx4090"``, ``docs/validate.md``).
        split: ``"train"`` (fitting), ``"validate"`` (choosing between fits), ``"test"``
            (measured from outside), ``"held-out"`` (not in any split: the RTX 4090 run).
        model: the served model (from the run's Hugging Face ``config.json`` or a preset).
        gpu: the GPU preset name.
        tensor_parallel_size: GPUs per replica.
        num_gpu_blocks: the KV pool vLLM measured (blocks per GPU, null block included).
        block_size_tokens: tokens per KV block.
        max_num_seqs, max_num_batched_tokens, max_model_len: the server's scheduler settings.
        enable_prefix_caching: automatic prefix caching on the server.
        async_scheduling: the engine planned one step ahead (vLLM's default since 0.14).
        vllm_version: the server's vLLM.
        clock: ``"client"`` when latencies were timed by the load generator (they include the
            HTTP and API-server path), ``"engine"`` when timed inside vLLM.
        requests: the requests replayed (those that ran; ``req_id`` = the run's request index).
        measured: one row per replayed request (``MEASURED_COLUMNS``).
        stages: the load stages, in order; ``measured.stage`` indexes them.
        num_left_out: requests of the run not replayed (``has_error``: timed out with no token).
        kv_usage: vLLM's own KV usage over time (``time_s``, ``kv_cache_pct``, ``running``,
            ``waiting``), ``None`` when not logged.
        notes: what the replay does not model or assumes (said beside every result).
    """

    name: str
    kind: str
    split: Split
    model: ModelSpec
    gpu: str
    tensor_parallel_size: int
    num_gpu_blocks: int
    block_size_tokens: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    enable_prefix_caching: bool
    async_scheduling: bool
    vllm_version: str
    clock: Literal["client", "engine"]
    requests: list[RequestSpec]
    measured: pd.DataFrame
    stages: list[Stage]
    num_left_out: int = 0
    kv_usage: pd.DataFrame | None = None
    notes: tuple[str, ...] = field(default=())

    @cached_property
    def fingerprint(self) -> str:
        """A digest of everything a replay of the run reads or its statistics compare: its
        requests, its measurements, its stages and its server's settings and model (a cached
        replay of an edited run, or of another data folder's run of the same name, is not
        reused: ``kvsim.validate.fit``)."""
        digest = hashlib.sha256()
        digest.update(pd.util.hash_pandas_object(self.measured, index=False).to_numpy().tobytes())
        for spec in self.requests:
            digest.update(repr(spec).encode())
        skip = ("requests", "measured", "kv_usage", "notes")
        settings = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}
        digest.update(repr(settings).encode())
        return digest.hexdigest()[:16]


def real_vllm_dir() -> Path:
    """The folder of measured runs: ``$KVSIM_REAL_VLLM``, else ``shared/data/real-vllm`` beside
    the clone (then beside the current folder).

    Raises:
        DataNotFoundError: no such folder; the message says where it looked.
    """
    value = os.environ.get(ENV_VAR)
    if value:
        path = Path(value).expanduser()
        if path.is_dir():
            return path
        where = f"{ENV_VAR}={value} (not a folder)"
    else:
        repo_parent = Path(__file__).resolve().parents[3]
        candidates = [repo_parent / _DEFAULT_SUBDIR]
        if Path.cwd().parent / _DEFAULT_SUBDIR not in candidates:
            candidates.append(Path.cwd().parent / _DEFAULT_SUBDIR)
        for path in candidates:
            if path.is_dir():
                return path
        where = " and ".join(str(p) for p in candidates) + f" ({ENV_VAR} is not set)"
    raise DataNotFoundError(
        f"Could not find the measured vLLM runs: looked in {where}. Set {ENV_VAR} to the folder "
        "holding h100/ and rtx4090-llama-3.1-8b/ (the public sources: inference-sim/training "
        "@ c4f0340 and casys-kaist/LLMServingSim @ 5daddb2, docs/validate.md)."
    )


def stage_of(index: int, stages: list[Stage]) -> int:
    """The stage of the run's ``index``-th request (stages are consecutive runs of requests)."""
    first = 0
    for stage in stages:
        first += stage.num_requests
        if index < first:
            return stage.index
    return stages[-1].index
