"""Reader of the H100 runs (inference-sim/training @ c4f0340; ``docs/validate.md`` has the format).

``h100/`` holds, per experiment ``EXP``: ``replay/EXP.json`` (server settings, the measured KV pool
and the requests at their send times), ``replay/EXP_ground_truth.json`` (TTFT and E2E per
request, timed by the load generator), ``default_args/EXP/{exp-config.yaml, profile.yaml,
results/config.yaml}`` and ``model_configs/NAME/config.json``; ``split.txt`` gives each
experiment's split. Facts the replay rests on:

- Output lengths are the profile's ``output_len`` (the load generator sent ``ignore_eos`` and
  ``max_tokens = output_len``); the replay's ``output_tokens`` is the client's re-tokenised count.
- Requests with ``has_error`` ran past the client's 300 s timeout: their latencies are left out
  (and counted), but they are replayed as load, since the server served them until then (in the
  one run that has them, every request after the 1,506th has one: the queue wait had grown past
  the timeout, and each was still running when the client gave up).
- Prompts (inference-perf's ``shared_prefix`` generator as the run resolved it,
  ``results/config.yaml``): ``num_groups * num_prompts_per_group`` prompts, each a group's
  system prompt of ``system_prompt_len`` tokens and a question, sent in a fixed cycle, so request
  ``i`` repeats the text of request ``i - P`` (``P`` prompts; the recorded prompt lengths recur
  with that period). A request is given the cycle slot ``i mod P``, or a slot near it whose last
  prompt had the same length when ``i mod P``'s did not (the senders' order shifts a little);
  which slots share a system prompt was shuffled and is not recorded: slot ``s`` is given group
  ``s // num_prompts_per_group`` (it only matters before every prompt has been sent once).
- Load stages: ``profile.yaml`` ``load.stages``; stage ``k`` is the next ``rate * duration``
  requests.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pandas as pd

from kvsim.base.textfile import read_text
from kvsim.config import ModelSpec
from kvsim.validate.fields import (
    flag,
    integer,
    items,
    number,
    read_json_file,
    read_yaml,
    table,
    text,
)
from kvsim.validate.runs import MeasuredRun, Split, Stage, stage_of
from kvsim.workload.request import RequestSpec

logger = logging.getLogger(__name__)

H100_SUBDIR = "h100"
CLIENT_TIMEOUT_S = 300.0  # the load generator's timeout (a request past it has_error)
H100_VLLM_VERSION = "0.15.1"  # inference-sim/training's README for these runs
_SPLITS = ("train", "validate", "test")
_SLOT_SEARCH = 4  # slots either side of i mod P searched for a prompt of the same length
NOTES = (
    "the runs' 8 GiB CPU KV offload (vLLM's OffloadingConnector) is left out of the replay "
    "(kvsim's [offload] tier off): blocks evicted from the GPU are recomputed where the server "
    "may have loaded them back (rare: the 100 prompts fit in every run's GPU pool)",
    "latencies are the load generator's (client side): they include the HTTP and API-server "
    "path, which the replay adds as frontend_latency_s",
    "async scheduling assumed on (vLLM's default since 0.14; the runs' configs do not say)",
    "which prompts share a system prompt is assumed (slot // num_prompts_per_group)",
)


def read_split(root: Path) -> dict[str, Split]:
    """``h100/split.txt``: experiment name -> its split.

    Raises:
        ValueError: a line that is not ``NAME SPLIT`` with a known split, or an experiment
            named twice (file and lines named); the file not UTF-8 text.
    """
    path = root / H100_SUBDIR / "split.txt"
    out: dict[str, Split] = {}
    lines: dict[str, int] = {}
    for number_, line in enumerate(read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2 or parts[1] not in _SPLITS:
            raise ValueError(
                f"{path} line {number_}: expected 'EXPERIMENT SPLIT' with SPLIT one of "
                f"{list(_SPLITS)}, got {line.strip()!r}"
            )
        if parts[0] in lines:  # (the last line won: a validate run could be fitted on)
            raise ValueError(
                f"{path} line {number_}: {parts[0]} is split again ({parts[1]!r}; line "
                f"{lines[parts[0]]} says {out[parts[0]]!r}); expected one line an experiment"
            )
        lines[parts[0]] = number_
        out[parts[0]] = parts[1]  # type: ignore[assignment]
    return out


def h100_experiments(root: Path) -> dict[str, Split]:
    """The experiments whose replay files are present, with their splits (sorted by name)."""
    splits = read_split(root)
    replay = root / H100_SUBDIR / "replay"
    return {
        name: split for name, split in sorted(splits.items()) if (replay / f"{name}.json").exists()
    }


def read_h100_run(root: Path, name: str) -> MeasuredRun:
    """Read experiment ``name`` of ``root/h100`` (rules: the module docstring).

    Raises:
        FileNotFoundError: a file of the experiment is missing.
        ValueError: a malformed file or field, naming the file, the place and the value.
    """
    base = root / H100_SUBDIR
    replay_path = base / "replay" / f"{name}.json"
    replay = table(read_json_file(replay_path), str(replay_path))
    config = table(replay.get("config"), f"{replay_path}: config")
    where = f"{replay_path}: config"
    exp_dir = base / "default_args" / name
    profile_path = exp_dir / "profile.yaml"
    profile = table(read_yaml(profile_path), str(profile_path))
    shared = _shared_prefix(exp_dir, profile)
    output_len = shared["output_len"]
    stages = _stages(profile, profile_path)
    settings = table(read_yaml(exp_dir / "exp-config.yaml"), str(exp_dir / "exp-config.yaml"))
    model = _model(base, text(replay, "model_id", str(replay_path)))
    specs, kept = _requests(replay_path, replay, shared)
    _check_stage_counts(stages, replay, profile_path, replay_path)
    _check_arrival_span(specs, stages, profile_path, replay_path)
    measured = _ground_truth(base / "replay" / f"{name}_ground_truth.json", kept, output_len)
    measured["stage"] = [stage_of(i, stages) for i in measured["req_id"]]
    split = read_split(root).get(name, "held-out")
    exp_where = str(exp_dir / "exp-config.yaml")
    _check_settings_agree(settings, config, exp_where, where, text(replay, "model_id", where))
    return MeasuredRun(
        name=name,
        kind="h100",
        split=split,
        model=model,
        gpu="h100-80gb",
        tensor_parallel_size=integer(config, "tensor_parallelism", where, minimum=1),
        num_gpu_blocks=integer(config, "kv_blocks_total_gpu", where, minimum=2),
        block_size_tokens=integer(config, "block_size", where, minimum=1),
        max_num_seqs=integer(config, "max_num_seqs", where, minimum=1),
        max_num_batched_tokens=integer(config, "max_num_batched_tokens", where, minimum=1),
        max_model_len=integer(settings, "max_model_len", exp_where, minimum=2),
        enable_prefix_caching=True,
        async_scheduling=True,
        vllm_version=H100_VLLM_VERSION,
        clock="client",
        requests=specs,
        measured=measured,
        stages=stages,
        num_left_out=len(items(replay.get("requests"), f"{replay_path}: requests")) - len(kept),
        notes=NOTES,
    )


def _shared_prefix(exp_dir: Path, profile: dict[str, Any]) -> dict[str, int]:
    """The prompt generator's settings as the run resolved them (``results/config.yaml``), with
    the profile's ``output_len``."""
    resolved_path = exp_dir / "results" / "config.yaml"
    resolved = table(read_yaml(resolved_path), str(resolved_path))
    where = f"{resolved_path}: data.shared_prefix"
    data = table(resolved.get("data"), f"{resolved_path}: data")
    shared = table(data.get("shared_prefix"), where)
    profile_data = table(profile.get("data"), f"{exp_dir / 'profile.yaml'}: data")
    profile_where = f"{exp_dir / 'profile.yaml'}: data.shared_prefix"
    profile_shared = table(profile_data.get("shared_prefix"), profile_where)
    out = {
        "num_groups": integer(shared, "num_groups", where, minimum=1),
        "num_prompts_per_group": integer(shared, "num_prompts_per_group", where, minimum=1),
        "system_prompt_len": integer(shared, "system_prompt_len", where),
        "output_len": integer(profile_shared, "output_len", profile_where, minimum=1),
    }
    resolved_out = shared.get("output_len")
    if resolved_out is not None and resolved_out != out["output_len"]:
        logger.warning(
            "%s: output_len %s differs from the profile's %d; the profile's is used",
            where,
            resolved_out,
            out["output_len"],
        )
    return out


def _stages(profile: dict[str, Any], path: Path) -> list[Stage]:
    load = table(profile.get("load"), f"{path}: load")
    stages = []
    for k, raw in enumerate(items(load.get("stages"), f"{path}: load.stages")):
        where = f"{path}: load.stages[{k}]"
        stage = table(raw, where)
        rate = number(stage, "rate", where, minimum=1e-6, maximum=1e6)
        duration = number(stage, "duration", where, minimum=1e-3)
        stages.append(Stage(k, rate, duration, round(rate * duration)))
    return stages


def _check_settings_agree(
    settings: dict[str, Any], config: dict[str, Any], exp_where: str, where: str, model_id: str
) -> None:
    """Warn where the experiment's ``exp-config.yaml`` and the replay file's ``config`` give
    the server another setting (the replay file's is the one replayed; the model is the
    replay file's ``model_id``)."""
    differ = [
        f"{key} {settings[key]!r} against {config[key]!r}"
        for key in ("tensor_parallelism", "max_num_seqs", "max_num_batched_tokens")
        if key in settings and key in config and settings[key] != config[key]
    ]
    if "model" in settings and settings["model"] != model_id:
        differ.append(f"model {settings['model']!r} against model_id {model_id!r}")
    if differ:
        logger.warning(
            "%s and %s disagree: %s; the replay file's settings are replayed",
            exp_where,
            where,
            "; ".join(differ),
        )


def _check_arrival_span(
    specs: list[RequestSpec], stages: list[Stage], profile_path: Path, replay_path: Path
) -> None:
    """Warn where the requests' send times span far less or far more than the profile's
    stages last (a tenth, or ten times): ``arrival_time_us`` given in another unit."""
    span = max((spec.arrival_time_s for spec in specs), default=0.0)
    planned = sum(stage.duration_s for stage in stages)
    if planned > 0 and not planned / 10 <= span <= planned * 10:
        logger.warning(
            "%s: the requests are sent over %.4g s, but %s's load stages last %.4g s: is "
            "arrival_time_us in another unit than microseconds?",
            replay_path,
            span,
            profile_path.name,
            planned,
        )


def _check_stage_counts(
    stages: list[Stage], replay: dict[str, Any], profile_path: Path, replay_path: Path
) -> None:
    """Warn where the profile's stages (rate x duration requests each) send another number of
    requests than the replay file holds: each request's stage is read off the counts, so the
    per-stage errors would compare requests of other stages."""
    sent = sum(stage.num_requests for stage in stages)
    rows = replay.get("requests")
    held = len(rows) if isinstance(rows, list) else 0
    if sent != held:
        logger.warning(
            "%s: its load stages send %s requests (rate x duration each), but %s holds %s: "
            "requests are assigned to stages by these counts, so the per-stage errors mix "
            "stages",
            profile_path,
            f"{sent:,}",
            replay_path,
            f"{held:,}",
        )


def _model(base: Path, model_id: str) -> ModelSpec:
    """The model of the run's Hugging Face ``config.json`` (``model_configs/<id's last part>``)."""
    path = base / "model_configs" / model_id.rsplit("/", 1)[-1] / "config.json"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file (the config.json of {model_id})")
    return ModelSpec.model_validate({"hf_config": str(path)})


def _requests(
    path: Path, replay: dict[str, Any], shared: dict[str, int]
) -> tuple[list[RequestSpec], list[int]]:
    """Every request, with its prompt's token identity, and the indices of those measured.

    A request with ``has_error`` ran out of the client's 300 s with its output unfinished; the
    server still served it until then, so it is replayed as load (its prompt, recorded as 0
    tokens, is its cycle slot's last prompt) but not measured. One whose slot has not been seen
    yet is left out.
    """
    rows = items(replay.get("requests"), f"{path}: requests")
    num_prompts = shared["num_groups"] * shared["num_prompts_per_group"]
    last_len: dict[int, int] = {}  # cycle slot -> its last prompt's length
    specs: list[RequestSpec] = []
    kept: list[int] = []
    previous_s = 0.0
    seen: dict[int, int] = {}  # index -> its entry
    for i, raw in enumerate(rows):
        where = f"{path}: requests[{i}]"
        row = table(raw, where)
        index = integer(row, "index", where)
        if index in seen:  # (said later as "req_id appears more than once", no file named)
            raise ValueError(
                f"{where}: index {index} is sent twice (requests[{seen[index]}] and [{i}]); "
                "expected one entry a request"
            )
        seen[index] = i
        arrival_s = integer(row, "arrival_time_us", where) / 1e6
        if arrival_s < previous_s:
            raise ValueError(
                f"{where}: arrival_time_us {row['arrival_time_us']} is earlier than the "
                "request before it (requests are in send order)"
            )
        previous_s = arrival_s
        error = flag(row, "has_error", where)
        prompt = integer(row, "input_tokens", where, minimum=0 if error else 1)
        if error and prompt == 0:
            slot = index % num_prompts
            if slot not in last_len:
                continue
            prompt = last_len[slot]
        else:
            slot = _slot(index, prompt, num_prompts, last_len)
            last_len[slot] = prompt
        specs.append(_spec(index, arrival_s, prompt, slot, shared))
        if not error:
            kept.append(index)
    system = shared["system_prompt_len"]
    within = sum(1 for spec in specs if spec.prompt_tokens <= system)
    if within:  # (each prompt then all system prompt: shared whole by its group, hits inflated)
        logger.warning(
            "%s: %d of %d prompts are no longer than the system prompt (system_prompt_len %d "
            "of results/config.yaml): each is replayed as all system prompt, shared whole by "
            "its group",
            path,
            within,
            len(specs),
            system,
        )
    return specs, kept


def _spec(
    index: int, arrival_s: float, prompt: int, slot: int, shared: dict[str, int]
) -> RequestSpec:
    """Request ``index``: its group's system prompt, then its slot's question."""
    group = slot // shared["num_prompts_per_group"]
    system = min(shared["system_prompt_len"], prompt)
    segments = ((("system", group), system), (("prompt", slot), prompt - system))
    output = shared["output_len"]
    return RequestSpec(
        req_id=index,
        arrival_time_s=arrival_s,
        prompt_tokens=prompt,
        output_tokens=output,
        max_tokens=output,
        token_segments=tuple(seg for seg in segments if seg[1] > 0),
    )


def _slot(index: int, prompt: int, num_prompts: int, last_len: dict[int, int]) -> int:
    """The cycle slot of request ``index``: ``index mod P``, or the nearest slot whose last
    prompt had this length when that one's did not (a first sight keeps ``index mod P``)."""
    slot = index % num_prompts
    if last_len.get(slot, prompt) == prompt:
        return slot
    for step in range(1, _SLOT_SEARCH + 1):
        for near in ((index - step) % num_prompts, (index + step) % num_prompts):
            if last_len.get(near) == prompt:
                return near
    return slot


def _ground_truth(path: Path, kept: list[int], output_len: int) -> pd.DataFrame:
    """Measured TTFT, E2E and TPOT of the kept requests (seconds)."""
    rows = items(read_json_file(path), str(path))
    by_index: dict[int, tuple[float, float]] = {}
    first: dict[int, int] = {}  # index -> the entry that gave it
    for i, raw in enumerate(rows):
        where = f"{path}: [{i}]"
        row = table(raw, where)
        index = integer(row, "index", where)
        if index in first:  # (the later entry replaced the earlier's measurement)
            raise ValueError(
                f"{where}: index {index} is measured twice (entries [{first[index]}] and [{i}]); "
                "expected one entry a request"
            )
        first[index] = i
        if flag(row, "has_error", where):
            continue
        ttft = number(row, "ttft_s", where)
        e2e = number(row, "e2e_s", where)
        if e2e < ttft:
            raise ValueError(f"{where}: e2e_s {e2e} is shorter than ttft_s {ttft}")
        by_index[index] = (ttft, e2e)
    late = sum(1 for _, e2e in by_index.values() if e2e > CLIENT_TIMEOUT_S + 1.0)
    if late:  # (none can finish past the client's timeout: latencies in ms?)
        logger.warning(
            "%s: %d measured e2e_s exceed the client's %g s timeout, which no request without "
            "has_error can: are the latencies in another unit than seconds?",
            path,
            late,
            CLIENT_TIMEOUT_S,
        )
    stray = sorted(set(by_index) - set(kept))
    if stray:  # (measurements of no replayed request: left out, said)
        logger.warning(
            "%s: %d measurement(s) of requests the replay file does not run without error "
            "(first: index %d) are left out",
            path,
            len(stray),
            stray[0],
        )
    missing = [i for i in kept if i not in by_index]
    if missing:
        raise ValueError(
            f"{path}: no measurement of request(s) {missing[:5]} that ran without error in the "
            "replay file"
        )
    ttft_s = [by_index[i][0] for i in kept]
    e2e_s = [by_index[i][1] for i in kept]
    frame = pd.DataFrame({"req_id": kept, "ttft_s": ttft_s, "e2e_s": e2e_s})
    frame["tpot_s"] = (frame["e2e_s"] - frame["ttft_s"]) / max(output_len - 1, 1)
    frame["queue_s"] = float("nan")
    return frame
