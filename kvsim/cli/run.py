"""``kvsim run``: simulate one config and print where the KV memory went."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kvsim.base.units import format_gib, plural
from kvsim.cli.common import (
    SET_EXAMPLE,
    NoProgress,
    check_out_dir,
    check_run_out,
    console,
    folder_name,
    guard,
    not_an_override,
    parse_overrides,
    print_whole,
    refuse_results,
)
from kvsim.config.allocators import LAYOUTS, PAGED_ALLOCATORS, has_memory_map

if TYPE_CHECKING:
    from kvsim.config import SimConfig
    from kvsim.results.tables import Results
    from kvsim.workload.spec import WorkloadSpec

DEFAULT_MAP_FRAMES = 200  # --map-frames
MAX_MAP_FRAMES = 10_000  # 50 times the default: a report's slider still usable


def run(
    config: Annotated[
        Path | None,
        typer.Argument(
            help="A config TOML (docs/formats.md; default: the built-in config).",
            callback=not_an_override,
        ),
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", metavar="KEY=VALUE", help=f"Override, e.g. {SET_EXAMPLE}"),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            parser=folder_name,  # (not Path: an empty value reads as ".", the current folder)
            metavar="DIR",
            help="Results folder (parquet + summary.json): new, empty, or an earlier run's.",
        ),
    ] = None,
    no_progress: NoProgress = False,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help="Fail on requests that cannot run instead of skipping and counting them.",
        ),
    ] = False,
    map_frames: Annotated[
        int,
        typer.Option(
            min=0,
            max=MAX_MAP_FRAMES,  # (each frame holds the whole pool's map: 100,000 took 3.7 GB)
            metavar="N",
            help="Memory-map frames over the arrivals, written with --out (0: none; a run "
            "that outlasts its arrivals keeps at most 2N).",
        ),
    ] = DEFAULT_MAP_FRAMES,
) -> None:
    """Simulate one config and print where the KV memory went."""

    def go() -> None:
        from tqdm import tqdm

        from kvsim.config import config_from_dict, load_config
        from kvsim.config.config_file import check_trace
        from kvsim.engine.intake import requests_for
        from kvsim.fleet import simulate
        from kvsim.view.summary import replica_table, summary_table

        check_out_dir(out)
        check_run_out(out)
        overrides = parse_overrides(set_ or [])
        if config:
            refuse_results(config, "a config TOML")
        if config:
            cfg = load_config(config, overrides)
        else:
            cfg = config_from_dict({}, overrides)
            if "workload.trace" in overrides:  # (a config file's loading checks it)
                check_trace(cfg, lambda: "--set workload.trace")
        with console.status("drawing the workload's requests", spinner="dots") as status:
            if no_progress:
                status.stop()  # (shown on a terminal only: a long draw is not silent)
            requests = requests_for(cfg)
        with tqdm(
            total=len(requests),
            unit="req",
            disable=None if not no_progress and len(requests) >= 2000 else True,  # None: tty only
            desc="preparing",  # which can run, fanned out: seconds at a million requests
        ) as bar:

            def start(num_runnable: int) -> None:
                bar.total = num_runnable  # some may be skipped (counted in the summary)
                bar.set_description("simulating")

            every = map_interval_s([r.arrival_time_s for r in requests], map_frames)
            unmapped = _why_no_map(cfg, out)
            if unmapped:
                every = None  # frames are only written with --out; a tree or a fleet has no map
                if map_frames not in (0, DEFAULT_MAP_FRAMES):  # (asked for: say why not)
                    logging.getLogger("kvsim.cli").warning(
                        "--map-frames %d: no memory map is drawn %s", map_frames, unmapped
                    )
            results = simulate(
                cfg,
                requests,
                on_finish=bar.update,
                strict=strict,
                on_start=start,
                map_every_s=every,
                map_max_frames=2 * map_frames if every is not None else None,
            )
        rejected = int(results.summary.get("num_requests_rejected", 0))
        rows = int(results.summary.get("num_requests", 0)) + rejected
        title = run_title(cfg, len(requests), rejected, rows)
        print_whole(summary_table(results.summary, title))
        if results.replicas is not None:
            print_whole(replica_table(results.replicas))
        from kvsim.workload.generate import resolved_workload

        note_saturation(results, resolved_workload(cfg.workload).arrival)
        note_one_busy_replica(results.summary)
        if out is not None:
            from kvsim.results.replace import save_replacing

            if save_replacing(results, out):  # none of its files beside the new run's
                logging.getLogger("kvsim.cli").warning("--out: replaced the earlier run in %s", out)
            console.print(f"results written to {out}/")

    guard(go)


def _why_no_map(cfg: object, out: Path | None) -> str:
    """Why the run draws no memory-map frames (``""``: it does)."""
    from kvsim.config import SimConfig
    from kvsim.fleet import is_fleet

    assert isinstance(cfg, SimConfig)
    if out is None:
        return "without --out (the frames are written with the run's files)"
    if is_fleet(cfg):
        return "for a fleet (run one replica's config to see its map)"
    if not has_memory_map(cfg.cache.allocator):
        return f"for the {cfg.cache.allocator!r} allocator (its cache is a tree, not a map)"
    return ""


BUSIEST_SHARE_WARNED = 0.9  # one replica's share of its role's requests said to leave the rest idle


def note_one_busy_replica(summary: Mapping[str, Any]) -> None:
    """Warn where one replica served nearly every request of its role
    (``replica_requests_max_share`` of ``BUSIEST_SHARE_WARNED`` or more, with several replicas
    in that role): the others stood idle, as a prefix router does when every request shares
    one prefix (docs/fleet.md)."""
    share = summary.get("replica_requests_max_share")
    replicas = int(summary.get("num_replicas") or 1)
    prefill = int(summary.get("num_prefill_replicas") or 0)
    roles = [replicas] if not prefill else [prefill, replicas - prefill]
    if not any(n > 1 for n in roles):  # (the share is 1 where no role has a choice)
        return
    if not isinstance(share, (int, float)) or not share >= BUSIEST_SHARE_WARNED:
        return
    logging.getLogger("kvsim.cli").warning(
        "one replica served %.0f %% of its role's requests (replica_requests_max_share %.3f): "
        "the fleet's other replicas stood idle; fleet.router = %r sends a request where it "
        "scores best, and a prefix router follows a prefix every request shares",
        100 * share,
        share,
        summary.get("router"),
    )


def note_saturation(results: Results, arrival: str | None) -> None:
    """Warn where the arrivals outpaced the engine (the summary's ``past_saturation``, by
    ``kvsim.results.saturation``); ``arrival``: the workload's (``"trace"``: the trace's own
    times, which its time scale stretches)."""
    from kvsim.results.saturation import growing_queue, replica_growth
    from kvsim.view.summary import format_metric

    summary = results.summary
    if not summary.get("past_saturation"):  # (False, or None: a closed loop, not judged)
        return
    names = ("req_id", "parent_id", "arrival_time_s", "finish_time_s")
    num_replicas = summary.get("num_replicas")
    columns = results.request_columns(*names, *(("replica",) if num_replicas else ()))
    found = growing_queue(columns)
    assert found is not None, "past_saturation without a growing queue"
    which = ""
    if num_replicas and not summary.get("num_prefill_replicas"):
        # (co-located: a disaggregated fleet's rows wait on a prefill replica, then decode)
        growth = replica_growth(columns, int(num_replicas))
        which = " (by replica: " + ", ".join(f"{i} {g:+,}" for i, g in enumerate(growth)) + ")"
    window_s = found.last_arrival_s - found.middle_s
    slower = (
        "raise workload.time_scale (it stretches the trace's own times; kvsim plan --smallest "
        "workload.time_scale --lo 1 --hi 16 finds the least stretch meeting a target)"
        if arrival == "trace"
        else "lower workload.rate_per_s, or see the largest rate meeting a target with kvsim "
        "plan --largest rate"
    )
    logging.getLogger("kvsim.cli").warning(
        "past saturation: over the second half of the arrival window (%s to %s s) %s arrived "
        "and %s finished (%s against %s req/s), so the unfinished requests grew by %s, to %s%s. "
        "The %s served fewer requests a second than arrived: its queue and TTFT (p50 %s here) "
        "grow with the run's length rather than measure it; %s",
        f"{found.middle_s:,.0f}",
        f"{found.last_arrival_s:,.0f}",
        plural(found.arrived, "request"),
        f"{found.finished:,}",
        f"{found.finished / window_s:.3g}",
        f"{found.arrived / window_s:.3g}",
        f"{found.growth:,}",
        f"{found.unfinished:,}",
        which,
        "fleet" if num_replicas else "engine",
        format_metric(
            "time_to_first_token_seconds_p50", summary.get("time_to_first_token_seconds_p50")
        ),
        slower,
    )


def map_interval_s(arrival_times_s: list[float], num_frames: int) -> float | None:
    """Seconds between memory-map frames so that ``num_frames`` cover the arrivals (``None``
    for no frames)."""
    if num_frames <= 0 or not arrival_times_s:
        return None
    return max(max(arrival_times_s), 1.0) / num_frames


def run_title(
    cfg: object, num_requests: int, num_rejected: int = 0, num_rows: int | None = None
) -> str:
    """The summary's header: engine profile and preemption mode, model, GPUs, allocator and
    requests (``num_requests`` the workload's; ``num_rows`` the rows they became, run and
    rejected, where vLLM v1 fanned requests of ``n > 1`` out into samples, ``num_rejected`` of
    them could not run); the workload
    (``workload_text``); the pool (``pool_text``); and for one engine's paged pool under
    ``vllm-v1`` the line vLLM logs for it at startup (``kvsim.config.memory.startup_capacity``)."""
    from kvsim.config import SimConfig
    from kvsim.results.tables import preemption_rule

    assert isinstance(cfg, SimConfig)
    args = cfg.engine_args
    policy = cfg.cache.allocator
    layout = LAYOUTS[cfg.cache.allocator]
    if layout == "blocks":
        policy += ", prefix caching" if cfg.caches_prefixes else ""
    elif layout == "slabs":
        policy += "/" + cfg.cache.reservation
    batching = ", request-level batching" if args.batching == "request" else ""
    spec = cfg.speculative
    if spec.enabled:  # (its drafter's weights and KV are the pool line's)
        drafter = "n-gram" if spec.method == "ngram" else "EAGLE-style"
        policy += f"; {drafter} drafts k = {spec.num_speculative_tokens}"
        if cfg.draft_params:
            policy += f" (drafter {cfg.draft_params / 1e9:.3g} B parameters)"
    fleet = cfg.fleet
    if fleet is not None:
        split = f", {fleet.prefill_replicas} prefill" if fleet.disaggregated else ""
        policy += f"; {plural(fleet.replicas, 'replica')}{split}, {fleet.router} router"
    if cfg.workload.max_concurrency is not None:
        policy += f"; {plural(cfg.workload.max_concurrency, 'closed-loop user')}"
    requests = plural(num_requests, "request")
    rows = num_requests if num_rows is None else num_rows
    if rows != num_requests:  # (vLLM v1 fans a request of n > 1 out into n samples)
        requests += f" as {rows:,} samples"
    if num_rejected:  # (counted as the tables count them: samples)
        requests += f" ({rows - num_rejected:,} run, {num_rejected:,} rejected)"
    from kvsim.config.memory import startup_capacity

    startup = ""
    capacity = None if cfg.fleet is not None else startup_capacity(cfg)
    if capacity is not None:  # (what the server's startup log says of the same pool)
        groups = cfg.kv_groups  # (a sliding group's count depends on the tokens in flight)
        setting = ""
        if groups is not None and "sliding" in groups.kinds:
            setting = " (async scheduling " + ("on" if args.async_scheduling else "off") + ")"
        startup = (
            f"\nvLLM's startup log{setting}: GPU KV cache size: {capacity[0]:,} tokens, Maximum "
            f"concurrency for {cfg.max_model_len:,} tokens per request: {capacity[1]:.2f}x"
        )

    def gpus_of(c: SimConfig) -> str:
        p = c.parallel
        split = f" x{p.world_size} (TP {p.tensor_parallel_size}, PP {p.pipeline_parallel_size})"
        return c.gpu.name + (split if p.world_size > 1 else "")

    served = f"{cfg.model.name} on {gpus_of(cfg)}"
    if fleet is not None:  # (replicas overriding their model, GPU or parallelism: each kind)
        replicas = cfg.replica_configs
        kinds = Counter(gpus_of(r) for r in replicas)
        if len({r.model.name for r in replicas}) > 1:
            pairs = Counter(f"{r.model.name} on {gpus_of(r)}" for r in replicas)
            served = " and ".join(f"{n} {k}" for k, n in pairs.items())
        elif len(kinds) > 1:
            served = f"{cfg.model.name} on " + " and ".join(f"{n} {k}" for k, n in kinds.items())
        else:
            served = f"{cfg.model.name} on {next(iter(kinds))}"
    return (  # (the setup, the workload, then the pool, whose arithmetic is long; vLLM's line)
        f"{args.engine} (preemption: {preemption_rule(cfg)}{batching}): {served}, {policy}, "
        f"{requests}\n"
        f"workload: {workload_text(cfg.workload)}\n" + pools_text(cfg) + startup
    )


def pools_text(cfg: SimConfig) -> str:
    """The ``KV pool:`` line (``pool_text``); a fleet's says whose pool it is, one line for each
    pool its replicas' overrides make (a replica's own KV budget, GPU or block size)."""
    if cfg.fleet is None:
        return f"KV pool: {pool_text(cfg)}"
    owners: dict[str, list[int]] = {}
    replicas = cfg.replica_configs
    gpus = len({(r.gpu.name, r.parallel.tensor_parallel_size) for r in replicas}) > 1
    for index, replica in enumerate(replicas):
        on = f"{replica.gpu.name} x{replica.parallel.tensor_parallel_size}: " if gpus else ""
        owners.setdefault(on + pool_text(replica), []).append(index)
    if len(owners) == 1:
        each = "the replica's" if cfg.fleet.replicas == 1 else "each replica's"
        return f"KV pool ({each}): {next(iter(owners))}"
    return "\n".join(
        f"KV pool ({'replica' if len(indices) == 1 else 'replicas'} {_ranges(indices)}): {text}"
        for text, indices in owners.items()
    )


def _ranges(indices: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2, 5"``."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def workload_text(spec: WorkloadSpec, rate: str | None = None) -> str:
    """The workload in words, as generation reads it (``resolved_workload``: a trace file's
    arrivals known once it is read): its preset's name, where its lengths come from, how
    requests arrive (a closed loop is the setup line's), and what it shares or repeats;
    ``rate``: the words for the arrival rate (a plan searching it), not its value."""
    from kvsim.workload.generate import resolved_workload

    spec = resolved_workload(spec)
    turns = spec.num_turns  # (> 1: the arrivals start conversations of this many requests)
    per_s = spec.rate_per_s or 0.0  # (set wherever arrivals are poisson or gamma)
    if rate is None:
        rate = f"{per_s:g} req/s"
        if turns > 1:
            rate = f"{per_s:g} conversations/s ({turns} requests each: {per_s * turns:g} req/s)"
    elif turns > 1:
        rate += f", in conversations/s ({turns} requests each)"
    lengths = spec.length_source
    if lengths == "trace":
        source = f"trace {spec.trace}" + (", resampled" if spec.sample_mode == "resample" else "")
    elif lengths == "fixed":
        prompt, output = spec.fixed_prompt_tokens, spec.fixed_output_tokens
        source = f"fixed lengths: {prompt:,}-token prompts, {output:,} output tokens"
    elif lengths == "table":
        source = f"{spec.length_table} length table"
    else:
        source = f"{lengths} lengths"
    parts = [source]
    if spec.max_concurrency is None:
        if spec.arrival == "gamma":
            parts.append(f"gamma arrivals at {rate} (cv {spec.cv:g})")
        elif spec.arrival == "poisson":
            parts.append(f"Poisson arrivals at {rate}")
        else:  # ("trace"; None, unresolved: a trace file not read yet)
            parts.append("the trace's arrival times")
    if spec.time_scale != 1:
        parts.append(f"times scaled x{spec.time_scale:g}")
    if spec.num_turns > 1:
        parts.append(f"{spec.num_turns} turns {spec.turn_gap_s:g} s apart")
    if spec.shared_prefix_tokens:
        parts.append(f"a {spec.shared_prefix_tokens:,}-token shared prefix")
    if spec.n > 1:
        parts.append(f"n = {spec.n}")
    if spec.beam_width > 1:
        parts.append(f"beam width {spec.beam_width}")
    named = spec.name and spec.name not in (lengths, spec.trace)  # (not "azure_conv: azure_conv")
    return (f"{spec.name}: " if named else "") + ", ".join(parts)


def pool_text(cfg: object) -> str:
    """The KV pool in words whose arithmetic holds: ``capacity_tokens`` slots, GiB per GPU, and
    for a paged pool its blocks, the slots of a partial block that no block holds, and vLLM v1's
    null block (block 0, which ``BlockPool`` reserves and no request holds). Slab and radix
    pools use every slot, so their slots are the whole story."""
    from kvsim.config import SimConfig

    assert isinstance(cfg, SimConfig)
    slots = cfg.capacity_tokens
    derived = cfg.cache.kv_cache_bytes is None and cfg.cache.kv_cache_gib is None
    drafter = ""
    groups = cfg.kv_groups  # hybrid KV cache groups: a slot is one token of one group
    if cfg.draft_kv_layers:  # the drafter's layers keep KV beside the target's (SpeculativeConfig)
        where = "every slot" if groups is None else "the full-attention groups"
        drafter += f", {plural(cfg.draft_kv_layers, 'drafter layer')} in {where}"
    budget = ""
    if derived:  # where a derived budget comes from (kvsim.config.memory's arithmetic)
        # (a drafter's weights are among them: SimConfig.weight_bytes_per_gpu)
        with_drafter = f" (a drafter's {cfg.draft_params:,} parameters included)"
        budget = (
            f": {cfg.cache.gpu_memory_utilization:g} x {format_gib(cfg.gpu.memory_bytes)} less "
            f"{format_gib(cfg.weight_bytes_per_gpu)} of weights"
            f"{with_drafter if cfg.draft_params else ''} and "
            f"{format_gib(cfg.cache.activation_headroom_bytes)} of activation headroom"
        )
    from kvsim.view.summary import bytes_text

    size_text = bytes_text(cfg.bytes_per_token)  # (one token's KV on one GPU; one group's)
    if cfg.cache.kv_cache_dtype != "auto":  # (the model's dtype otherwise: no news)
        size_text += f" in {cfg.cache.kv_cache_dtype}"
    text = (
        f"{plural(slots, 'KV slot')} of {size_text} ({format_gib(cfg.kv_cache_bytes)} per GPU"
        f"{budget}{drafter})"
    )
    if groups is not None:
        text += (
            f" in {plural(len(groups.groups), 'KV cache group')} of "
            f"{plural(groups.layers_per_group, 'layer')}"
        )
    if cfg.cache.allocator not in PAGED_ALLOCATORS:
        return text
    size = cfg.cache.block_size_tokens if groups is None else groups.block_size_tokens
    blocks, rest = divmod(slots, size)
    notes = []
    if rest:
        notes += [f"{plural(blocks * size, 'slot')}", f"{plural(rest, 'slot')} in no block"]
    if cfg.engine_args.reserve_null_block:
        notes.append("block 0 is vLLM v1's null block")
    text += f": {plural(blocks, 'block')} of {plural(size, 'token')}"
    return text + (f" ({'; '.join(notes)})" if notes else "")


def register(app: typer.Typer) -> None:
    """Add ``run`` to the ``kvsim`` app."""
    app.command("run")(run)
