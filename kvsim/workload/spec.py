"""``WorkloadSpec``: the validated, frozen description of a workload (arrivals, lengths, filters).

A spec is data only; :func:`kvsim.workload.generate_requests` turns it into requests. Presets
live in the repository's ``workloads/`` folder as TOML tables (see :func:`load_workload`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from kvsim.base.limits import (
    MAX_CONTEXT_TOKENS,
    MAX_NUM_REQUESTS,
    MAX_RATE_PER_S,
    MAX_SEQS_PER_REQUEST,
    MAX_TIME_S,
    MAX_TIME_SCALE,
    MIN_RATE_PER_S,
    MIN_TIME_SCALE,
    refuse_coerced_scalars,
)
from kvsim.base.textfile import read_toml
from kvsim.workload.catalog import TRACES
from kvsim.workload.lengths import SHAREGPT_LIKE
from kvsim.workload.trace_table import TraceFormat

# kvsim.workload.beams.BeamModel's branching scale, FITTED on Figure 15's Alpaca width 6 (make
# fig15)
BEAM_BRANCH_TOKENS_FITTED = 5.78
DEFAULT_NUM_REQUESTS = 1000
MIN_CV = 1e-3  # below it gamma gaps are constant to machine precision; 1e-320 overflows
MAX_SIGMA = 10.0  # std of ln(tokens): e**10 is a spread of 22,000x either way

ArrivalKind = Literal["poisson", "gamma", "trace"]
_UNSET_DROPPED = ("trace_format", "tokenizer", "hash_block_size_tokens")  # None: not serialised
LengthKind = Literal[
    "sharegpt_like", "alpaca_like", "lognormal", "uniform", "fixed", "trace", "table"
]


class WorkloadSpec(BaseModel):
    """A workload: how requests arrive, how long they are, and which are kept.

    ``WorkloadSpec()`` is 1,000 requests with Poisson arrivals at 1 req/s and ``sharegpt_like``
    synthetic lengths; a trace with arrival times replays them, every row, by default.
    Pipeline: read or draw lengths; drop rows failing ``min_*_tokens`` and (``overflow="drop"``)
    rows whose prompt + min(output, max_tokens) exceeds ``max_model_len``; select rows (trace
    window, ``num_requests``); cap outputs at ``max_tokens``; truncate (``overflow="truncate"``);
    scale arrival times by ``time_scale``.

    Attributes:
        name: free-form label of the workload (not used by the generator).
        arrival: ``"poisson"`` at ``rate_per_s``, ``"gamma"`` renewal with ``rate_per_s`` and
            ``cv``, or ``"trace"`` to replay the trace's own timestamps (traces with arrivals
            only). ``None`` (unset) is ``"trace"`` for a trace with arrival times unless the
            config asks for synthetic arrivals (sets ``rate_per_s``, ``cv`` or ``sample =
            "resample"``), else ``"poisson"``: resolved on validation for no trace or a
            catalogued one, when the file is read for a trace file (``arrival_for``).
        rate_per_s: mean arrival rate in requests/s for poisson/gamma (required there).
        cv: coefficient of variation of gamma inter-arrival gaps (1.0 is Poisson).
        time_scale: multiplies every inter-arrival time (0.5 = twice as fast).
        lengths: length source; ``None`` means ``"trace"`` when ``trace`` is set, else
            ``"sharegpt_like"``.
        trace: short trace name (``sharegpt_opt``, ``sharegpt_llama2``, ``arxiv``,
            ``azure_conv``, ``azure_code``, ``mooncake_conversation``, ``mooncake_synthetic``) or a
            path to a trace file of a format of ``kvsim.workload.traces`` (kvsim's own CSV or
            Parquet, Azure 2023/2024, Vidur, BurstGPT, Mooncake, Qwen-Bailian, ShareGPT JSON).
        trace_format: the file's format (``kvsim.workload.traces.TRACE_FORMATS``); ``None``
            detects it (``sharegpt_multiturn`` must be named: a ShareGPT file reads as first turns).
        tokenizer: a local Hugging Face ``tokenizer.json`` (or its folder) that counts the tokens
            of a ShareGPT trace's text; only for ShareGPT.
        hash_block_size_tokens: tokens per ``hash_ids`` block of the trace; ``None`` takes the
            format's (Mooncake 512, Qwen-Bailian 16); kvsim's own format with ``hash_ids`` needs it.
        sample: ``"resample"`` (draw trace rows with replacement) or ``"replay"`` (file order);
            ``None`` means replay for trace arrivals (``arrival="trace"``, or unset with a trace
            that has arrival times), else resample (with a warning when
            more requests than rows are drawn, so rows repeat; an explicit ``"resample"`` is quiet).
        fallback_synthetic: when the trace file is missing, log a warning and draw lengths from
            the trace's joint length table shipped with kvsim (``kvsim/data/lengths/``: the
            paper's ShareGPT and Alpaca), else ``sharegpt_like``, with Poisson arrivals at
            ``rate_per_s``, instead of raising.
        length_table: ``lengths="table"``: a shipped table's trace name (``sharegpt_opt``,
            ``alpaca_opt``) or a table file (``kvsim.workload.length_table``).
        prompt_mean_tokens, output_mean_tokens: means of ``lengths="lognormal"``, in tokens.
        prompt_sigma, output_sigma: std of ln(tokens) for ``lengths="lognormal"``.
        fixed_prompt_tokens, fixed_output_tokens: lengths of ``lengths="fixed"``, in tokens.
        min_total_tokens, max_total_tokens, prefill_decode_ratio: ``lengths="uniform"``: total
            tokens uniform on [min, max], split prompt:output = ratio:1.
        max_tokens: the client's output cap in tokens (``None``: only ``max_model_len`` caps);
            a trace's rows it caps are counted in a note.
        overflow: what happens to trace rows longer than ``max_model_len`` (prompt + output):
            ``"reject"`` keeps them in the workload and the run skips them as vLLM rejects them,
            counted in the summary (``num_rejected_max_model_len``) and named in a warning;
            ``"drop"`` filters them out of the trace before rows are chosen (a dataset filter,
            logged with its count); ``"truncate"`` cuts the prompt to at most
            ``max_model_len - 1`` tokens, then the output to fit; ``"cut_output"`` does what
            vLLM 0.34.0's server does: a prompt shorter than ``max_model_len`` keeps it and its
            output is cut to fit (``get_max_tokens``), a longer one is rejected (the run skips
            and counts it). Parametric lengths under ``"reject"`` or ``"drop"`` are drawn
            from the distribution truncated at ``max_model_len`` (over-long draws are redrawn);
            under ``"truncate"`` or ``"cut_output"`` an over-long draw is cut as a trace row is.
        min_prompt_tokens, min_output_tokens: drop rows shorter than these (raw lengths).
        num_requests: keep the first this many requests; ``None`` keeps all of a replayed trace
            (or window), all arrivals within ``duration_s``, else 1,000. A replay with fewer
            rows runs those, with a warning, as do synthetic arrivals that ``duration_s`` ends
            first.
        start_s: start of the window on the trace's time axis, in seconds (``arrival="trace"``):
            the numbers in the file (Azure's timestamps: seconds after its earliest row); rows
            from ``start_s`` on are replayed, a row at ``t`` arriving at ``(t - start_s) *
            time_scale`` simulated seconds.
        duration_s: window length in trace seconds (trace arrivals) or simulated seconds
            (synthetic arrivals); ``None`` for no limit.
        n: parallel samples per request (v0: a sequence group, ``kvsim.core.kv.groups``; v1: ``n``
            requests sharing the prompt).
        beam_width: beam-search width per request (1: no beam search; not with ``n > 1``).
        beam_branch_tokens: ``kvsim.workload.beams.BeamModel.branch_tokens``: a beam candidate
            branches and displaces another with probability ``min(0.5, beam_branch_tokens /
            n)`` at a step where the sequences hold ``n`` tokens (FITTED on Figure 15's Alpaca
            beam width 6); each beam request's tree is drawn from the run's seed.
        shared_prefix_tokens: a system prompt / few-shot prefix of this many tokens, identical on
            every request (of a tenant), prepended to each drawn prompt; a request it pushes past
            ``max_model_len`` is cut to fit (its output, then its prompt), with a warning that
            counts them, and a prefix of ``max_model_len`` or more is refused.
        num_tenants: requests are spread round-robin over this many tenants, each with its own
            cache salt, so different tenants never share prefix KV.
        num_turns: turns per conversation (synthetic multi-turn): turn ``t``'s prompt is turn
            ``t - 1``'s prompt + its output + a new user message (a drawn prompt length).
            ``rate_per_s`` then counts conversation starts (``duration_s`` bounds the
            starts; ``num_requests`` counts turns, ``ceil(num_requests / num_turns)``
            conversations); turns too long are dropped.
        turn_gap_s: seconds between a conversation's consecutive turns (synthetic multi-turn, and
            trace sessions replayed under synthetic arrivals, whose ``rate_per_s`` then counts
            conversation starts).
        max_concurrency: closed-loop load: this many users, each with at most one request in
            flight (``vllm bench serve --max-concurrency``). A request is sent at the later of
            its arrival time and the moment a user is free; a user takes a whole session (a
            conversation's turns, in order) and is free ``think_time_s`` after its last request
            finished. ``None``: open loop, every request at its arrival time. For ``vllm bench
            serve``'s default ``--request-rate inf`` give a rate far above what the users send.
        think_time_s: seconds a closed-loop user waits between a finish and its next request.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: str = ""
    arrival: ArrivalKind | None = None
    rate_per_s: float | None = Field(default=1.0, gt=0, le=MAX_RATE_PER_S)
    cv: float = Field(default=1.0, gt=0, le=100)
    time_scale: float = Field(default=1.0, gt=0, le=MAX_TIME_SCALE)

    lengths: LengthKind | None = None
    trace: str | None = Field(default=None, min_length=1)
    trace_format: TraceFormat | None = None
    tokenizer: str | None = Field(default=None, min_length=1)
    hash_block_size_tokens: int | None = Field(default=None, ge=1, le=MAX_CONTEXT_TOKENS)
    sample: Literal["resample", "replay"] | None = None
    fallback_synthetic: bool = False
    length_table: str | None = Field(default=None, min_length=1)
    prompt_mean_tokens: float = Field(
        default=SHAREGPT_LIKE.prompt_mean_tokens, ge=1, le=MAX_CONTEXT_TOKENS
    )
    output_mean_tokens: float = Field(
        default=SHAREGPT_LIKE.output_mean_tokens, ge=1, le=MAX_CONTEXT_TOKENS
    )
    prompt_sigma: float = Field(default=SHAREGPT_LIKE.prompt_sigma, ge=0, le=MAX_SIGMA)
    output_sigma: float = Field(default=SHAREGPT_LIKE.output_sigma, ge=0, le=MAX_SIGMA)
    fixed_prompt_tokens: int = Field(default=512, ge=1, le=MAX_CONTEXT_TOKENS)
    fixed_output_tokens: int = Field(default=128, ge=1, le=MAX_CONTEXT_TOKENS)
    min_total_tokens: int = Field(default=256, ge=2, le=MAX_CONTEXT_TOKENS)
    max_total_tokens: int = Field(default=2048, ge=2, le=MAX_CONTEXT_TOKENS)
    prefill_decode_ratio: float = Field(default=3.0, ge=1e-3, le=1e3)

    max_tokens: int | None = Field(default=None, ge=1, le=MAX_CONTEXT_TOKENS)
    overflow: Literal["reject", "drop", "truncate", "cut_output"] = "reject"
    min_prompt_tokens: int = Field(default=1, ge=1, le=MAX_CONTEXT_TOKENS)
    min_output_tokens: int = Field(default=1, ge=1, le=MAX_CONTEXT_TOKENS)

    num_requests: int | None = Field(default=None, ge=1)
    start_s: float = Field(default=0.0, ge=0, le=MAX_TIME_S)
    duration_s: float | None = Field(default=None, gt=0, le=MAX_TIME_S)

    n: int = Field(default=1, ge=1, le=MAX_SEQS_PER_REQUEST)
    beam_width: int = Field(default=1, ge=1, le=MAX_SEQS_PER_REQUEST)
    beam_branch_tokens: float = Field(
        default=BEAM_BRANCH_TOKENS_FITTED,
        ge=0,
        le=MAX_CONTEXT_TOKENS,
        description="FITTED on Figure 15 (Alpaca) beam width 6",
    )
    shared_prefix_tokens: int = Field(default=0, ge=0, le=MAX_CONTEXT_TOKENS)
    num_tenants: int = Field(default=1, ge=1, le=MAX_NUM_REQUESTS)
    num_turns: int = Field(default=1, ge=1, le=10_000)
    turn_gap_s: float = Field(default=30.0, ge=0, le=MAX_TIME_S)
    max_concurrency: int | None = Field(default=None, ge=1, le=MAX_NUM_REQUESTS)
    think_time_s: float | None = Field(default=None, ge=0, le=MAX_TIME_S)

    @property
    def length_source(self) -> LengthKind:
        """The effective ``lengths`` (resolving ``None``)."""
        if self.lengths is not None:
            return self.lengths
        return "trace" if self.trace is not None else "sharegpt_like"

    @property
    def sample_mode(self) -> Literal["resample", "replay"]:
        """The effective ``sample`` (resolving ``None``)."""
        if self.sample is not None:
            return self.sample
        return "replay" if self.arrival == "trace" else "resample"

    @model_serializer(mode="wrap")
    def _drop_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Leave newer trace fields out when unset, so older configs keep their canonical hash."""
        data: dict[str, Any] = handler(self)
        for key in (*_UNSET_DROPPED, "length_table", "max_concurrency", "think_time_s"):
            if data.get(key) is None:
                data.pop(key, None)
        if self.arrival is None:  # a trace file's own arrivals if it has them: reloaded alike
            for key in ("arrival", "rate_per_s", "cv"):  # (set, these two would ask for poisson)
                data.pop(key, None)
        return data

    @field_validator("name")
    @classmethod
    def _printable_name(cls, value: str) -> str:
        """The name is printed as given (the run's header, tables): no line break or terminal
        control sequence in it."""
        if not value.isprintable():
            raise ValueError(
                f"expected a name without line breaks or control characters, got {value!r}"
            )
        return value

    @model_validator(mode="before")
    @classmethod
    def _no_coerced_scalars(cls, data: Any) -> Any:
        return refuse_coerced_scalars(cls.model_fields, data)

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        for old in ("beam_survival", "beam_branch_prob"):
            if isinstance(data, dict) and old in data:
                raise ValueError(
                    f"{old} = {data[old]!r}: replaced by beam_branch_tokens (a beam candidate "
                    "branches with probability min(0.5, beam_branch_tokens / n) when the "
                    f"sequences hold n tokens; fitted: {BEAM_BRANCH_TOKENS_FITTED})"
                )
        return data

    def arrival_for(self, has_arrivals: bool | None) -> ArrivalKind | None:
        """The effective ``arrival`` for a trace that has arrival times or not (``None``:
        unknown until its file is read; then so is the answer, unless the config decides)."""
        if self.arrival is not None:
            return self.arrival
        synthetic = {"rate_per_s", "cv"} & self.model_fields_set or self.sample == "resample"
        if self.length_source != "trace" or synthetic or has_arrivals is False:
            return "poisson"
        return None if has_arrivals is None else "trace"

    @model_validator(mode="after")
    def _check_consistency(self) -> WorkloadSpec:
        if self.arrival is None:  # (frozen: set in place, as its validated default)
            info = None if self.trace is None else TRACES.get(self.trace)
            self.__dict__["arrival"] = self.arrival_for(None if info is None else info.has_arrivals)
        self._check_scale()
        self._check_lengths()
        self._check_arrivals()
        if self.n > 1 and self.beam_width > 1:
            raise ValueError(
                f"n ({self.n}) and beam_width ({self.beam_width}): a request is parallel sampling "
                "or beam search, not both; set one of them to 1"
            )
        if self.think_time_s is not None and self.max_concurrency is None:
            raise ValueError(
                f"think_time_s ({self.think_time_s:g} s) is a closed-loop user's pause: set "
                "max_concurrency (the number of users) too"
            )
        if self.max_total_tokens < self.min_total_tokens:
            raise ValueError(
                f"max_total_tokens must be >= min_total_tokens ({self.min_total_tokens}), "
                f"got {self.max_total_tokens}"
            )
        return self

    def _check_scale(self) -> None:
        """Bounds that keep a run finite: the request count, the arrival rate, and the arrivals a
        synthetic window holds (``duration_s`` without ``num_requests``)."""
        if self.num_requests is not None and self.num_requests > MAX_NUM_REQUESTS:
            raise ValueError(
                f"num_requests: at most {MAX_NUM_REQUESTS:,} requests per run (kvsim holds every "
                f"request in memory: 0.8 GiB at {MAX_NUM_REQUESTS:,}), got "
                f"{self.num_requests:,}; simulate a shorter window"
            )
        width = max(self.n, self.beam_width)
        if self.num_requests is not None and self.num_requests * width > MAX_NUM_REQUESTS:
            field = "n" if self.n > 1 else "beam_width"
            raise ValueError(
                f"{field}: {self.num_requests:,} requests of {width:,} sequences are "
                f"{self.num_requests * width:,}, more than the {MAX_NUM_REQUESTS:,} one run holds "
                "(every sequence is simulated and kept in memory); lower num_requests or "
                f"{field}"
            )
        rate = self.rate_per_s
        if rate is not None and rate < MIN_RATE_PER_S:
            raise ValueError(
                f"rate_per_s: must be >= {MIN_RATE_PER_S:g} requests/s (one request per "
                f"{1 / MIN_RATE_PER_S / 86400:.1f} days), got {rate!r}"
            )
        if self.cv < MIN_CV:
            raise ValueError(
                f"cv: must be >= {MIN_CV:g} (gamma gaps of shape 1 / cv**2), got {self.cv!r}"
            )
        if self.time_scale < MIN_TIME_SCALE:
            raise ValueError(f"time_scale: must be >= {MIN_TIME_SCALE:g}, got {self.time_scale!r}")
        synthetic = self.arrival in ("poisson", "gamma")
        if synthetic and rate is not None and self.duration_s is not None:
            expected = self.arrivals_within(self.duration_s)
            if self.num_requests is None and expected > MAX_NUM_REQUESTS:
                raise ValueError(
                    f"duration_s: {self.duration_s:g} s at rate_per_s = {rate:g} "
                    f"(time_scale {self.time_scale:g}) is ~{expected:,.0f} requests, more than "
                    f"the {MAX_NUM_REQUESTS:,} a run holds; set num_requests or a shorter "
                    "duration_s"
                )
            if self.duration_s / self.time_scale > MAX_TIME_S:
                raise ValueError(
                    f"duration_s: {self.duration_s:g} s / time_scale {self.time_scale:g} spans "
                    f"more than {MAX_TIME_S:g} simulated seconds (31.7 years)"
                )

    def arrivals_within(self, seconds: float) -> float:
        """Requests a synthetic arrival process (``rate_per_s``) sends within ``seconds``: the
        time scale stretches its gaps and each conversation sends ``num_turns`` (0 without a
        rate)."""
        return (self.rate_per_s or 0.0) * seconds / self.time_scale * self.num_turns

    def _check_lengths(self) -> None:
        source = self.length_source
        if source == "trace" and self.trace is None:
            raise ValueError("lengths='trace' needs trace = a trace name or file path, got none")
        if source != "trace" and self.trace is not None:
            raise ValueError(f"trace={self.trace!r} is set but lengths={source!r}; drop one")
        if (source == "table") != (self.length_table is not None):
            raise ValueError("lengths='table' and length_table = NAME go together")
        if source != "trace" and self.sample is not None:
            raise ValueError(f"sample={self.sample!r} applies to trace lengths only")
        for name in _UNSET_DROPPED:
            if source != "trace" and getattr(self, name) is not None:
                raise ValueError(f"{name}={getattr(self, name)!r} applies to a trace only")

    def _check_arrivals(self) -> None:
        if self.arrival == "trace":
            self._check_trace_arrivals()
        elif self.rate_per_s is None:
            raise ValueError(
                f"rate_per_s (requests/s) is required for arrival={self.arrival!r}, got None"
            )
        if self.arrival in ("poisson", "gamma") and self.start_s > 0:
            raise ValueError(f"start_s applies to arrival='trace' only, got {self.start_s}")

    def _check_trace_arrivals(self) -> None:
        if self.trace is None:
            raise ValueError("arrival='trace' needs trace = a trace with arrival times, got none")
        info = TRACES.get(self.trace)
        if info is not None and not info.has_arrivals:
            with_times = sorted(k for k, v in TRACES.items() if v.has_arrivals)
            raise ValueError(
                f"arrival='trace': trace {self.trace!r} ({info.file_name}) has no arrival times "
                f"(lengths only); use arrival='poisson' or 'gamma', or one of {with_times}"
            )
        if self.sample == "resample":
            raise ValueError(
                "arrival='trace' replays the trace's rows in order; use sample='replay'"
            )
        if self.num_turns > 1:  # (it would chain the rows, moving their times and prompts)
            raise ValueError(
                f"num_turns ({self.num_turns}) chains drawn rows into synthetic conversations; "
                "arrival='trace' replays the trace's own rows at their own times (and its own "
                "sessions where it has them): set num_turns = 1, or arrival='poisson' for "
                "conversations of the trace's lengths"
            )
        if self.fallback_synthetic and self.rate_per_s is None:
            raise ValueError(
                "fallback_synthetic with arrival='trace' needs rate_per_s for the Poisson fallback"
            )


def workloads_dir() -> Path:
    """The shipped ``workloads/`` preset folder (package data, ``kvsim.presets``)."""
    from kvsim.presets import workloads_dir as shipped

    return shipped()


def missing_preset(name: str, path: Path) -> FileNotFoundError:
    """The error for a workload preset ``name`` (or a file, ``path``) that does not exist: the
    presets to choose from and the closest names (``kvsim.config.hardware.preset_hint``)."""
    from kvsim.base.names import preset_hint
    from kvsim.presets import names as preset_names

    if Path(name).suffix:  # (a file of the user's: its path says where it was looked for)
        return FileNotFoundError(f"no such workload file {str(path)!r}")
    names = preset_names(workloads_dir())
    return FileNotFoundError(
        f"no workload preset {name!r}; choose from {names}" + preset_hint("workloads", name, names)
    )


def load_workload(preset: str | Path, **overrides: Any) -> WorkloadSpec:
    """Load a TOML preset as a :class:`WorkloadSpec`.

    Args:
        preset: a path to a ``.toml`` file, or a preset name in ``workloads/`` (``"azure_conv"``).
            The file is either the spec's table itself or holds it under ``[workload]``.
        **overrides: fields replacing the file's values (e.g. ``rate_per_s=2.0``).

    Returns:
        The validated spec.

    Raises:
        FileNotFoundError: no such preset.
        ValueError: the file is not UTF-8 TOML, or a config (``[workload]`` beside other keys;
            the message names it).
        pydantic.ValidationError: the table is not a valid spec.
    """
    path = Path(preset)
    if not path.suffix and not path.exists():
        path = workloads_dir() / f"{preset}.toml"
    if not path.is_file():
        raise missing_preset(str(preset), path)
    table = read_toml(path)
    others = sorted(set(table) - {"workload"})
    if "workload" in table and others:  # (its [workload] taken, the rest would be dropped)
        raise ValueError(
            f"{path}: holds [workload] beside {others}: a config, not a workload preset; run it "
            f"with kvsim run {path}"
        )
    table = table.get("workload", table)
    if not isinstance(table, dict):
        raise ValueError(f"{path}: [workload] must be a table, got {table!r}")
    return WorkloadSpec.model_validate({**table, **overrides})
