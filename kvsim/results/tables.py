"""Results of one run: per-request records and the memory time series as DataFrames, plus a summary.

``Results.save(folder)`` writes ``requests.parquet``, ``memory.parquet``, ``summary.json``,
``config.json``, Vidur's ``request_metrics.csv`` and a Prometheus ``metrics.prom``
(``kvsim.results.exporters``); when frames were captured, ``mapframes.parquet`` and
``frames.parquet``; a fleet's per-replica table, ``replicas.parquet`` (each table as CSV
without pyarrow: ``kvsim.base.tablefile``). ``Results.load(folder)`` reads them back.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
from pydantic import ValidationError

from kvsim.base.say_once import held_back
from kvsim.base.tablefile import read_table, stored_table, table_target, write_table
from kvsim.base.textfile import json_text, read_json
from kvsim.config import SimConfig, format_validation_error
from kvsim.results.columns import LATENCY_INTERVALS, MEMORY_COLUMNS, REQUEST_COLUMNS
from kvsim.results.metrics import Columns, memory_shares, summarize, warn_empty_window
from kvsim.results.money import money_summary, price_or_none
from kvsim.results.offload import DISK_COLUMNS, TIER_COLUMNS
from kvsim.results.saturation import past_saturation
from kvsim.workload.request import Request

if TYPE_CHECKING:
    import pandas as pd

# the tables ``Results.save`` may write, each as NAME.parquet or, without pyarrow, NAME.csv
RUN_TABLES = ("requests", "memory", "mapframes", "frames", "replicas")
# the files a run folder's save lists before it writes them (a JSON list of names): a rerun into
# the folder removes exactly those, and a save cut short before summary.json is still a run's
RUN_MANIFEST = ".kvsim-run"
# what a run written before the manifest may hold (its tables as Parquet: every install has it)
_UNLISTED_RUN_FILES = (
    *(f"{table}.parquet" for table in RUN_TABLES),
    "summary.json",
    "config.json",
    "request_metrics.csv",  # (kvsim.results.exporters)
    "metrics.prom",  # (kvsim.results.prometheus)
)


class Results:
    """One run's tables.

    Attributes:
        config: the run's config.
        requests: one row per request (``REQUEST_COLUMNS`` plus vLLM's latencies:
            ``LATENCY_INTERVALS``, ``request_time_per_output_token_seconds`` and the paper's
            ``normalized_latency_seconds``), seconds.
        memory: one row per engine event (``recorder.MEMORY_COLUMNS``), slots and seconds.
        summary: scalar metrics (see ``metrics.summarize``).
        mapframes, frames: memory-map frames captured during the run (``kvsim.engine.frames``), or
            ``None`` when none was asked for.

    ``simulate`` hands over its records as arrays: ``requests`` and ``memory`` become
    DataFrames (importing pandas) the first time they are read, so a run that only wants its
    summary never builds them; the DataFrames take the arrays over without copying them.
    """

    def __init__(
        self,
        config: SimConfig,
        requests: pd.DataFrame,
        memory: pd.DataFrame,
        summary: dict[str, Any],
        mapframes: pd.DataFrame | None = None,
        frames: pd.DataFrame | None = None,
    ) -> None:
        self.config = config
        self._requests: pd.DataFrame | None = requests
        self._memory: pd.DataFrame | None = memory
        self.summary = summary
        self.mapframes = mapframes
        self.frames = frames
        self.replicas: pd.DataFrame | None = None  # a fleet's per-replica metrics (kvsim.fleet)
        # a fleet's replicas' own runs, in memory only (not saved): each exported
        # as one engine of metrics.prom
        self.replica_runs: list[Results] | None = None
        # one engine's steps by tokens a step (``SchedulerCore.iteration_tokens``), in memory
        # only: vllm:iteration_tokens_total
        self.iteration_tokens: dict[int, int] | None = None
        # a CPU tier's transfers by size, in memory only (``OffloadConnector.size_counts``:
        # "store", "load": bytes -> copies; "allocation": blocks a store lacked -> stores):
        # vllm:kv_offload_store_size, _load_size, _cpu_allocation_size
        self.offload_sizes: dict[str, dict[int, int]] | None = None
        # a disaggregated decode replica's requests: req_id -> the prompt tokens the prefill
        # replica found cached, in memory only (vLLM's remote_prefill_cached_tokens)
        self.remote_cached_tokens: dict[int, int] | None = None
        self._request_columns: Columns | None = None
        self._memory_columns: Columns | None = None

    @classmethod
    def from_records(
        cls,
        config: SimConfig,
        request_columns: Columns,
        memory_columns: Columns,
        summary: dict[str, Any],
    ) -> Results:
        """Results whose tables are built on first use: ``request_columns``
        (``request_table_columns``) and ``memory_columns`` (``MemoryRecorder.arrays``)."""
        results = cls(config, None, None, summary)
        results._request_columns = request_columns
        results._memory_columns = memory_columns
        return results

    @property
    def requests(self) -> pd.DataFrame:
        if self._requests is None:
            assert self._request_columns is not None
            self._requests = request_frame_from_columns(self._request_columns)
            self._request_columns = None
        return self._requests

    @requests.setter
    def requests(self, value: pd.DataFrame) -> None:
        self._requests, self._request_columns = value, None

    def request_columns(self, *names: str) -> dict[str, npt.NDArray[Any]]:
        """The named request columns as arrays, without building the table where it is not
        built yet (no pandas import for a run that only wants its summary); ``parent_id`` is a
        masked array there, float64 with NaN for none from a built table."""
        if self._requests is None:
            assert self._request_columns is not None
            return {name: self._request_columns[name] for name in names}  # (parent_id: masked)
        import pandas as pd  # (built: imported already)

        out = {}
        for name in names:
            column = self._requests[name]
            nullable = isinstance(column.dtype, pd.api.extensions.ExtensionDtype)
            # (a nullable column, parent_id: float64 with NaN for none)
            out[name] = (
                column.to_numpy(np.float64, na_value=np.nan) if nullable else column.to_numpy()
            )
        return out

    @property
    def memory(self) -> pd.DataFrame:
        if self._memory is None:
            assert self._memory_columns is not None
            self._memory = memory_frame(self._memory_columns)
            self._memory_columns = None
        return self._memory

    @memory.setter
    def memory(self, value: pd.DataFrame) -> None:
        self._memory, self._memory_columns = value, None

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (a sweep worker's result) with its tables built: compact columns, not a
        Python object per value."""
        _ = self.requests, self.memory
        return self.__dict__

    def __repr__(self) -> str:
        return f"Results(config={self.config!r}, summary={self.summary!r})"

    def save(self, folder: str | Path, *, exports: bool = True) -> Path:
        """Write the tables as Parquet (CSV without pyarrow: ``kvsim.base.tablefile``) and the
        summary/config as JSON into ``folder``, and with
        ``exports`` Vidur's ``request_metrics.csv`` and a Prometheus ``metrics.prom``."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        tables = ["requests", "memory"]
        if self.mapframes is not None and self.frames is not None:
            tables += ["mapframes", "frames"]
        if self.replicas is not None:
            tables.append("replicas")
        names = [table_target(folder / f"{t}.parquet").name for t in tables]
        names += ["summary.json", "config.json"]
        names += ["request_metrics.csv", "metrics.prom"] if exports else []
        (folder / RUN_MANIFEST).write_text(json.dumps(names) + "\n")  # (first: see RUN_MANIFEST)
        write_table(self.requests, folder / "requests.parquet")
        write_table(self.memory, folder / "memory.parquet")
        if self.mapframes is not None and self.frames is not None:
            write_table(self.mapframes, folder / "mapframes.parquet")
            write_table(self.frames, folder / "frames.parquet")
        if self.replicas is not None:
            write_table(self.replicas, folder / "replicas.parquet")
        (folder / "summary.json").write_text(json_text(self.summary, indent=2, sort_keys=True))
        (folder / "config.json").write_text(self.config.canonical_json())
        if exports:
            from kvsim.results.exporters import write_exports  # prometheus_client only when saving

            write_exports(self, folder)  # request_metrics.csv (Vidur), metrics.prom (Prometheus)
        return folder

    @classmethod
    def load(cls, folder: str | Path) -> Results:
        """Read a folder written by ``save``.

        Raises:
            FileNotFoundError: a file of the folder is missing.
            ValueError: a corrupt file, a ``config.json`` that is not a valid config, a table
                without its core columns, or a request table whose rows are not the summary's
                ``num_requests`` (naming the file).
        """
        folder = Path(folder)
        try:
            with held_back():  # (the run said its config's warnings when it ran)
                config = SimConfig.model_validate(read_json(folder / "config.json"))
        except ValidationError as err:
            raise ValueError(f"{folder / 'config.json'}: {format_validation_error(err)}") from None
        has_maps = stored_table(folder / "mapframes.parquet") is not None
        if not has_maps and (folder / RUN_MANIFEST).is_file():
            saved = [n for n in run_file_names(folder) if n.split(".")[0] == "mapframes"]
            if saved:  # (its map frames deleted since: not a run that captured none)
                raise FileNotFoundError(
                    f"{folder / saved[0]}: no such file, though the run saved it "
                    f"({RUN_MANIFEST} lists it); run it again"
                )
        summary = read_summary(folder / "summary.json")
        results = cls(
            config,
            _run_table(folder, "requests"),
            _run_table(folder, "memory"),
            summary,
            _run_table(folder, "mapframes") if has_maps else None,
            _run_table(folder, "frames", list_columns=("waiting_req_ids",)) if has_maps else None,
        )
        counted = summary.get("num_requests")
        if isinstance(counted, int) and counted != len(results.requests):
            raise ValueError(  # (each saved from the same run: one was changed since)
                f"{folder / 'requests.parquet'}: {len(results.requests):,} rows where "
                f"{folder / 'summary.json'} counts {counted:,} requests; a table edited or cut "
                "short since the run wrote it (run it again)"
            )
        _check_tables_match(folder, results)
        if stored_table(folder / "replicas.parquet") is not None:
            results.replicas = read_table(folder / "replicas.parquet")
        return results


def _check_tables_match(folder: Path, results: Results) -> None:
    """Refuse tables that are not the summary's run: a memory series or map frames past its
    ``duration_s`` (a summary of the whole run: ``summary_window = "run"``), or map frames of
    requests the request table lacks (another run's copied in: kvsim report drew one run's
    memory under another's summary).

    Raises:
        ValueError: naming the file and what does not match."""
    duration = results.summary.get("duration_s")
    again = "a table from another run, or edited since (run it again)"
    whole_run = results.config.summary_window == "run"  # (else the summary's is a window's)
    if whole_run and isinstance(duration, (int, float)) and math.isfinite(duration):
        limit = duration * (1 + 1e-9) + 1e-6
        for name, table in (("memory", results.memory), ("frames", results.frames)):
            if table is not None and len(table) and float(table["time_s"].max()) > limit:
                raise ValueError(
                    f"{folder / f'{name}.parquet'}: rows up to {float(table['time_s'].max()):,.3f} "
                    f"s where {folder / 'summary.json'} ends at {duration:,.3f} s; {again}"
                )
    if results.mapframes is not None and len(results.mapframes):
        known = set(results.requests["req_id"].tolist())
        stray = sorted({r for r in results.mapframes["req_id"].tolist() if r >= 0} - known)
        if stray:
            raise ValueError(
                f"{folder / 'mapframes.parquet'}: request {stray[0]} (of {len(stray):,} not in "
                f"requests.parquet); {again}"
            )


# the columns every run's table has had (an older run's too), which reading it back needs
_CORE_COLUMNS = {
    "requests": (
        "req_id",
        "arrival_time_s",
        "first_token_time_s",
        "finish_time_s",
        "prompt_tokens",
        "output_tokens",
    ),
    "memory": ("time_s", "duration_s", "token_states"),
    "mapframes": ("frame", "req_id", "start_slot", "num_slots"),
    "frames": ("frame", "time_s"),
}


def _run_table(folder: Path, name: str, **options: Any) -> pd.DataFrame:
    """``read_table`` of the run's table ``name``, holding its ``_CORE_COLUMNS``.

    Raises:
        ValueError: a column missing (another table copied in its place, or a hand-made one),
            naming the file and the columns.
    """
    path = folder / f"{name}.parquet"
    table = read_table(path, **options)
    missing = [c for c in _CORE_COLUMNS[name] if c not in table.columns]
    if missing:
        raise ValueError(
            f"{path}: no column {', '.join(map(repr, missing))}; not a kvsim run's {name} table "
            f"(its columns: {', '.join(map(str, table.columns[:8]))}"
            f"{', ...' if len(table.columns) > 8 else ''})"
        )
    return table


def is_run_folder(folder: Path) -> bool:
    """Whether ``folder`` holds a kvsim run: its save's list (``RUN_MANIFEST``, a save cut short
    included), or a ``summary.json`` that reads as a run's (``is_run_summary``; a user's own
    ``summary.json`` is not one)."""
    if (folder / RUN_MANIFEST).is_file():
        return True
    path = folder / "summary.json"
    if not path.is_file():  # (a pipe of that name would block the read)
        return False
    try:
        summary = read_json(path)
    except (OSError, ValueError):  # (unreadable, or not JSON)
        return False
    return isinstance(summary, dict) and is_run_summary(summary)


def is_run_summary(summary: dict[str, Any]) -> bool:
    """Whether a ``summary.json``'s object is a kvsim run's: it has the ``config_key`` every
    run's summary has, a fleet's included."""
    return "config_key" in summary


def run_file_names(folder: Path) -> list[str]:
    """The files of the run in ``folder`` that a new run replaces: those its save listed
    (``RUN_MANIFEST``, and the list itself), or for a run saved before the list, the names such
    a run writes; only names, never a path out of the folder."""
    manifest = folder / RUN_MANIFEST
    if not manifest.is_file():
        return list(_UNLISTED_RUN_FILES)
    try:
        listed = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # (a damaged list: the names such a run writes)
        listed = list(_UNLISTED_RUN_FILES)
    plain = [n for n in listed if isinstance(n, str) and n == Path(n).name]
    return [*(n for n in plain if n not in ("", ".", "..")), RUN_MANIFEST]


def blocking_entries(folder: Path) -> list[str]:
    """Names a run writes that ``folder`` holds as something other than a file or a link (a
    folder, a pipe): the save would fail on them, or block, after the simulation."""
    names = {*_UNLISTED_RUN_FILES, RUN_MANIFEST}
    names |= {f"{table}.csv" for table in RUN_TABLES}
    return sorted(
        n
        for n in names
        if (folder / n).exists() and not ((folder / n).is_symlink() or (folder / n).is_file())
    )


def request_frame(requests: Sequence[Request]) -> pd.DataFrame:
    """Per-request DataFrame with vLLM's latency columns (seconds): ``request_table_columns``
    of the requests' ``REQUEST_COLUMNS``, typed as the engine's ``RequestLog`` types them
    (``arrival_time_s`` int64 where every time is an int; no time yet: NaN; no parent: masked).

    ``request_time_per_output_token_seconds`` is decode time / (output tokens - 1) (vLLM's
    TPOT; 0 for a one-token output, whose decode time is 0, as vLLM 0.34.0 records it:
    ``IterationStats.update_from_finished_request``); ``normalized_latency_seconds`` is E2E /
    output tokens (the PagedAttention paper's Figure 12 metric).
    """
    columns: dict[str, npt.NDArray[Any]] = {}
    for name in REQUEST_COLUMNS:
        values = [getattr(r, name) for r in requests]
        if name == "parent_id":
            columns[name] = np.ma.MaskedArray(
                np.array([v or 0 for v in values], dtype=np.int64),
                np.array([v is None for v in values], dtype=np.bool_),
            )
        elif name.endswith("_time_s") and name != "arrival_time_s":
            columns[name] = np.array([np.nan if v is None else v for v in values], np.float64)
        elif name == "arrival_time_s":  # (int64 when every time is an int, as pandas types it)
            ints = all(isinstance(v, int) for v in values)
            columns[name] = np.array(values, dtype=np.int64 if ints else np.float64)
        else:
            columns[name] = np.array(values, dtype=np.int64)
    return request_frame_from_columns(request_table_columns(columns))


def request_table_columns(columns: Columns) -> Columns:
    """The requests table as numpy arrays, without pandas: ``columns`` (``REQUEST_COLUMNS``,
    ``RequestLog.columns``) with the latency columns ``request_frame`` adds, computed as pandas
    computes them (the same float64 arithmetic)."""
    cols = dict(columns)
    for name, (end, start) in LATENCY_INTERVALS.items():
        cols[name] = cols[end] - cols[start]
    output = cols["output_tokens"]
    decode_tokens = np.maximum(output - 1, 1).astype(np.float64)  # (one token: 0 / 1 = 0)
    cols["request_time_per_output_token_seconds"] = (
        cols["request_decode_time_seconds"] / decode_tokens
    )
    cols["normalized_latency_seconds"] = cols["e2e_request_latency_seconds"] / output
    return cols


def request_frame_from_columns(columns: Columns) -> pd.DataFrame:
    """``request_frame`` of ``request_table_columns``: the arrays become the table's columns
    without a copy; the masked ``parent_id`` becomes pandas' nullable ``Int64``."""
    import pandas as pd  # only when a run's tables are built

    parent = columns["parent_id"]
    data: dict[str, Any] = dict(columns)
    data["parent_id"] = pd.arrays.IntegerArray(np.ma.getdata(parent), np.ma.getmaskarray(parent))
    return pd.DataFrame(data, copy=False)


# the summary keys kvsim writes as text (the engine's, the step cost's, a hybrid pool's and a
# fleet's settings); every other value is a number, true, false or null
TEXT_KEYS = frozenset(
    {
        "config_key",
        "cost_source",
        "engine",
        "kv_cache_dtype",
        "kv_cache_group_kinds",
        "layout_source",
        "preemption_mode",
        "router",
        "summary_window",
    }
)


def read_summary(path: str | Path) -> dict[str, Any]:
    """A ``summary.json``, its ``null`` metrics (NaN or infinite when computed) read as NaN.

    Raises:
        FileNotFoundError: no such file.
        ValueError: a folder, not UTF-8, invalid JSON, not a JSON object, or a value that is a
            list or an object, text where kvsim writes none (``TEXT_KEYS``), or ``Infinity`` or
            ``NaN`` (kvsim writes ``null``), naming the file and the key.
    """
    summary = read_json(path)
    if not isinstance(summary, dict):
        raise ValueError(f"{path}: expected a JSON object (a kvsim run's summary)")
    for key, value in summary.items():
        not_finite = isinstance(value, float) and not math.isfinite(value)
        if (
            isinstance(value, list | dict)
            or (isinstance(value, str) and key not in TEXT_KEYS)
            or not_finite
        ):
            shown = str(value) if not_finite else json.dumps(value)[:60]
            raise ValueError(
                f"{path}: {key} is {shown}, expected a number, true, false or "
                f"null{' or text' if key in TEXT_KEYS else ''} (a damaged summary.json?)"
            )
        expected = _summary_range(key)
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if expected is not None and number and not expected[0] <= value <= expected[1]:
            raise ValueError(
                f"{path}: {key} is {value}, expected {expected[2]} (a damaged summary.json?)"
            )
    return {k: math.nan if v is None else v for k, v in summary.items()}


def _summary_range(key: str) -> tuple[float, float, str] | None:
    """The range kvsim writes ``key`` in, ``(low, high, in words)``, or ``None``: a share of the
    KV in percent (``*_pct``), vLLM's 0-1 usage (``kv_cache_usage_perc``), a count (``num_*``);
    a rounding's width of slack."""
    if key.endswith("_pct") or "_pct_" in key:
        return -1e-6, 100 + 1e-6, "a percentage from 0 to 100"
    if key.startswith("kv_cache_usage_perc"):
        return -1e-9, 1 + 1e-9, "a share from 0 to 1"
    if key.startswith("num_"):
        return 0, math.inf, "a count >= 0"
    return None


def build_results(
    config: SimConfig,
    requests: Columns,
    memory: Columns,
    num_preemptions: int,
    *,
    usable_capacity_tokens: int | None = None,
    num_steps: int | None = None,
) -> Results:
    """Assemble ``Results`` from the engine's records; the tables are built on first use.

    Args:
        requests: every request's row (``RequestLog.columns``), at least one.
        memory: the recorded memory rows (``MemoryRecorder.arrays``).
        usable_capacity_tokens: slots requests can hold (``Allocator.usable_capacity_tokens``),
            the denominator of ``kv_cache_usage_perc``; the capacity when ``None``.
        num_steps: the engine steps the run ran (``Engine.num_steps_run``, whether memory rows
            were recorded or not), for ``past_saturation``; the memory rows' count when ``None``.

    The summary is computed from the arrays; from the memory DataFrame when no row was recorded
    (its empty columns are typed as pandas types them).
    """
    req_table = request_table_columns(requests)
    mem_table: pd.DataFrame | Columns = memory
    if not len(memory["time_s"]):
        mem_table = memory_frame(memory)
    capacity = config.capacity_tokens
    start_s = end_s = None
    first = 0.0
    if config.summary_window == "arrivals":
        arrival = req_table["arrival_time_s"]
        first, last = arrival.min(), arrival.max()
        start_s, end_s = float(first + 0.1 * (last - first)), float(last)
    usable = usable_capacity_tokens or capacity
    summary: dict[str, Any] = {"engine": config.engine_args.engine}
    summary.update(
        summarize(
            mem_table,
            req_table,
            capacity_slots=capacity,
            usable_capacity_slots=usable,
            start_s=start_s,
            end_s=end_s,
        )
    )
    if start_s is not None and end_s is not None and "token_states_pct" not in summary:
        run_shares = memory_shares(mem_table, capacity, usable)
        warn_empty_window(summary, run_shares, (start_s, end_s), float(first))
    summary["summary_window"] = config.summary_window
    summary["num_preemptions"] = num_preemptions
    finished = summary.get("num_requests") or 0
    summary["preemptions_per_request"] = num_preemptions / finished if finished else 0.0
    summary.update(engine_summary(config))
    summary["capacity_tokens"] = capacity
    summary["usable_capacity_tokens"] = usable_capacity_tokens or capacity
    summary["kv_cache_bytes"] = config.kv_cache_bytes
    summary["config_key"] = config.key()
    summary["past_saturation"] = past_saturation(
        req_table,
        float(summary["duration_s"]),
        summary["num_steps"] if num_steps is None else num_steps,
        config.workload.max_concurrency is not None,
    )
    summary.update(
        money_summary(
            req_table,
            float(summary["duration_s"]),
            price_or_none(config.usd_per_hour, gpu_names=[config.gpu.name]),
            config.slo.targets(),
        )
    )
    return Results.from_records(config, req_table, memory, summary)


def engine_summary(config: SimConfig) -> dict[str, Any]:
    """The resolved serving knobs a run used (what its profile defaulted), for its summary:
    ``enable_prefix_caching`` and ``preemption_mode`` as the run applied them
    (``SimConfig.caches_prefixes``, ``preemption_rule``)."""
    args = config.engine_args
    return {
        "max_num_seqs": args.max_num_seqs,
        "max_num_batched_tokens": args.max_num_batched_tokens,
        "max_model_len": args.max_model_len,
        "enable_chunked_prefill": args.enable_chunked_prefill,
        "scheduler_reserve_full_isl": args.scheduler_reserve_full_isl,
        "enable_prefix_caching": config.caches_prefixes,
        "preemption_mode": preemption_rule(config),
        "tensor_parallel_size": config.parallel.tensor_parallel_size,
        "pipeline_parallel_size": config.parallel.pipeline_parallel_size,
        "kv_cache_dtype": config.cache.kv_cache_dtype,
        "bytes_per_token": config.bytes_per_token,
    }


def preemption_rule(config: SimConfig) -> str:
    """How the run preempts, in words: ``"recompute"`` under vLLM v1 (its only mode), the chosen
    ``scheduler.preemption_mode``, or vLLM v0's rule when none is chosen (``V0Scheduler._preempt``):
    a single sequence is recomputed and a multi-sequence group swapped to the CPU pool, which only
    a paged pool has (slab pools recompute groups too)."""
    from kvsim.core.kv import ALLOCATORS

    args = config.engine_args
    if args.preemption_mode is not None:
        return args.preemption_mode
    if args.engine == "vllm-v0" and ALLOCATORS[config.cache.allocator].paged:
        return "recompute, swap for multi-sequence groups"
    return "recompute"


def memory_frame(columns: Mapping[str, npt.NDArray[Any]]) -> pd.DataFrame:
    """``MemoryRecorder.arrays`` as a DataFrame that takes the arrays over without copying them
    (no rows: object columns, as pandas builds an empty table); a fleet's ``replica`` column
    and a CPU tier's ``TIER_COLUMNS`` and a disk tier's ``DISK_COLUMNS``
    (``kvsim.results.offload``) after them."""
    import pandas as pd  # only when a run's tables are built

    names = [*MEMORY_COLUMNS, *(["replica"] if "replica" in columns else [])]
    names += [c for c in TIER_COLUMNS if c in columns]  # a run offloading to a CPU tier
    names += [c for c in DISK_COLUMNS if c in columns]  # ... and on to a disk
    names += [c for c in columns if c.startswith("group")]  # hybrid KV cache groups' columns
    if not len(columns["time_s"]):
        return pd.DataFrame([], columns=names)
    return pd.DataFrame(columns, columns=names, copy=False)
