"""Hostile configs: ``--set`` overrides, TOML config files and plain dicts. Each is rejected before
anything is simulated, with one line naming the field (or file and line) and the value; a legal
setting the config ignores runs as written, with a warning naming it, its value and why."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from kvsim.config import config_from_dict, load_config
from kvsim.presets import experiments_dir, plans_dir, workloads_dir
from kvsim.study.experiment import load_experiment, parse_experiment
from kvsim.study.plan import load_plan
from tests.conftest import forget_warnings, moot_warnings, summary_without

RUN = ["run", "--no-progress", "--set", "workload.num_requests=3"]
BIG = str(10**29)
TINY_MODEL = [
    "model.num_layers=1",
    "model.num_kv_heads=1",
    "model.num_attention_heads=1",
    "model.head_dim=1",
    "model.dtype_bytes=1",
]

# id: (--set pairs, fragments of the error line)
SETS: dict[str, tuple[list[str], list[str]]] = {
    # runaways: a window without a count, absurd counts, sizes and times
    "duration_inf_no_count": (
        ["workload.duration_s=inf", "workload.num_requests=null"],
        ["workload.duration_s", "finite"],
    ),
    "duration_huge_no_count": (
        ["workload.duration_s=1e8", "workload.num_requests=null"],
        ["workload.duration_s", "1,000,000 a run holds"],
    ),
    "duration_past_max": (["workload.duration_s=1e10"], ["workload.duration_s", "1000000000"]),
    "duration_over_time_scale": (
        ["workload.duration_s=1e9", "workload.time_scale=1e-6"],
        ["workload.duration_s", "31.7 years"],
    ),
    "num_requests_1e12": (
        ["workload.num_requests=1000000000000"],
        ["workload.num_requests", "at most 1,000,000", "1,000,000,000,000"],
    ),
    "num_requests_zero": (["workload.num_requests=0"], ["workload.num_requests", "0"]),
    "num_requests_negative": (["workload.num_requests=-5"], ["workload.num_requests", "-5"]),
    "num_requests_text": (["workload.num_requests=many"], ["workload.num_requests", "many"]),
    "num_requests_float": (["workload.num_requests=2.5"], ["workload.num_requests", "2.5"]),
    "kv_gib_inf": (["cache.kv_cache_gib=inf"], ["cache.kv_cache_gib", "finite"]),
    "kv_gib_nan": (["cache.kv_cache_gib=NaN"], ["cache.kv_cache_gib", "finite"]),
    "kv_gib_1e9": (["cache.kv_cache_gib=1e9"], ["cache.kv_cache_gib", "a100-40gb"]),
    "kv_gib_negative": (["cache.kv_cache_gib=-1"], ["cache.kv_cache_gib", "-1"]),
    "kv_bytes_2e70": ([f"cache.kv_cache_bytes={2**70}"], ["cache.kv_cache_bytes"]),
    "kv_bytes_float": (["cache.kv_cache_bytes=1.5"], ["cache.kv_cache_bytes", "1.5"]),
    "kv_both_budgets": (
        ["cache.kv_cache_bytes=1000000000", "cache.kv_cache_gib=1"],
        ["kv_cache_gib", "kv_cache_bytes"],
    ),
    "gpu_util_above_1": (["cache.gpu_memory_utilization=1.5"], ["gpu_memory_utilization"]),
    "gpu_util_zero": (["cache.gpu_memory_utilization=0"], ["gpu_memory_utilization"]),
    "headroom_huge": ([f"cache.activation_headroom_bytes={BIG}"], ["activation_headroom_bytes"]),
    "rate_denormal": (["workload.rate_per_s=1e-320"], ["workload.rate_per_s", "1e-320"]),
    "rate_zero": (["workload.rate_per_s=0"], ["workload.rate_per_s"]),
    "rate_1e30": (["workload.rate_per_s=1e30"], ["workload.rate_per_s"]),
    "rate_infinity": (["workload.rate_per_s=Infinity"], ["workload.rate_per_s", "finite"]),
    "rate_text": (["workload.rate_per_s=fast"], ["workload.rate_per_s", "fast"]),
    "rate_null_poisson": (["workload.rate_per_s=null"], ["rate_per_s", "required"]),
    "time_scale_inf": (["workload.time_scale=inf"], ["workload.time_scale", "finite"]),
    "time_scale_denormal": (["workload.time_scale=1e-320"], ["workload.time_scale", "1e-320"]),
    "time_scale_1e7": (["workload.time_scale=1e7"], ["workload.time_scale"]),
    "arrivals_past_1e9_s": (
        ["workload.time_scale=1e6", "workload.num_requests=5000"],
        ["arrival times", "time_scale", "1e+09"],
    ),
    "cv_denormal": (
        ["workload.arrival=gamma", "workload.cv=1e-320"],
        ["workload.cv", "1e-320"],
    ),
    "cv_1e30": (["workload.arrival=gamma", "workload.cv=1e30"], ["workload.cv"]),
    "turn_gap_inf": (["workload.turn_gap_s=inf"], ["workload.turn_gap_s"]),
    "turn_gap_huge": (["workload.turn_gap_s=1e12"], ["workload.turn_gap_s"]),
    "start_s_poisson": (["workload.start_s=5"], ["start_s", "trace"]),
    # token counts and groups beyond any model or int64
    "max_tokens_huge": ([f"workload.max_tokens={BIG}"], ["workload.max_tokens"]),
    "fixed_prompt_huge": (
        ["workload.lengths=fixed", f"workload.fixed_prompt_tokens={BIG}"],
        ["workload.fixed_prompt_tokens"],
    ),
    "max_total_huge": ([f"workload.max_total_tokens={BIG}"], ["workload.max_total_tokens"]),
    "min_over_max_total": (
        ["workload.min_total_tokens=500", "workload.max_total_tokens=400"],
        ["max_total_tokens", "500"],
    ),
    "shared_prefix_huge": ([f"workload.shared_prefix_tokens={BIG}"], ["shared_prefix_tokens"]),
    "shared_prefix_whole_context": (  # (every prompt was cut to it, every output to 1 token)
        ["scheduler.max_model_len=4096", "workload.shared_prefix_tokens=4096"],
        ["workload.shared_prefix_tokens = 4,096", "shorter than scheduler.max_model_len (4,096)"],
    ),
    "hash_block_huge": ([f"workload.hash_block_size_tokens={BIG}"], ["hash_block_size_tokens"]),
    "n_huge": ([f"workload.n={BIG}"], ["workload.n"]),
    "beam_width_5000": (["workload.beam_width=5000"], ["workload.beam_width", "5000"]),
    "beam_under_v1": (["workload.beam_width=4"], ["workload.beam_width", "vllm-v0"]),
    "n_and_beam": (
        ["scheduler.engine=vllm-v0", "workload.n=2", "workload.beam_width=2"],
        ["beam_width"],
    ),
    "beam_survival_renamed": (
        ["workload.beam_survival=0.8"],
        ["beam_survival", "beam_branch_tokens"],
    ),
    "beam_branch_prob_renamed": (
        ["workload.beam_branch_prob=0.09"],
        ["beam_branch_prob", "0.09", "beam_branch_tokens"],
    ),
    "beam_branch_tokens_negative": (
        ["workload.beam_branch_tokens=-1"],
        ["beam_branch_tokens", "-1"],
    ),
    # pydantic reads true / false as 1 / 0: num_requests = true ran one request
    "num_requests_true": (
        ["workload.num_requests=true"],
        ["workload.num_requests: expected a number, got true"],
    ),
    "beam_branch_tokens_true": (
        ["workload.beam_branch_tokens=true"],
        ["workload.beam_branch_tokens: expected a number, got true"],
    ),
    "kv_cache_gib_false": (
        ["cache.kv_cache_gib=false"],
        ["cache.kv_cache_gib: expected a number, got false"],
    ),
    "max_num_seqs_true": (
        ["scheduler.max_num_seqs=true"],
        ["scheduler.max_num_seqs: expected a number, got true"],
    ),
    "request_batching_v1": (["scheduler.batching=request"], ["scheduler.batching", "vllm-v0"]),
    "batching_misspelt": (
        ["scheduler.batching=requests"],
        ["scheduler.batching", "requests", "'iteration' or 'request'"],
    ),
    "num_turns_huge": ([f"workload.num_turns={BIG}"], ["workload.num_turns"]),
    "num_tenants_huge": ([f"workload.num_tenants={BIG}"], ["workload.num_tenants"]),
    "sigma_huge": (
        ["workload.lengths=lognormal", "workload.prompt_sigma=1e30"],
        ["workload.prompt_sigma"],
    ),
    "prompt_mean_zero": (
        ["workload.lengths=lognormal", "workload.prompt_mean_tokens=1e-320"],
        ["workload.prompt_mean_tokens"],
    ),
    "split_ratio_denormal": (
        ["workload.lengths=uniform", "workload.prefill_decode_ratio=1e-320"],
        ["workload.prefill_decode_ratio"],
    ),
    "unknown_lengths": (["workload.lengths=zipf"], ["workload.lengths", "zipf"]),
    "unknown_arrival": (["workload.arrival=bursty"], ["workload.arrival", "bursty"]),
    "trace_lengths_no_trace": (["workload.lengths=trace"], ["lengths='trace'"]),
    "trace_missing_file": (
        ["workload.trace=/nonexistent/trace.csv"],
        ["--set workload.trace: ", "/nonexistent/trace.csv", "kvsim data fetch"],
    ),
    "unknown_workload_key": (["workload.rate=2"], ["workload.rate", "Extra inputs"]),
    "unknown_workload_preset": (["workload=nosuchpreset"], ["nosuchpreset"]),
    "workload_preset_escape": (["workload=../../../etc/passwd"], ["passwd"]),
    # the pool: blocks, slabs and buddy chunks that cannot work
    "block_size_zero": (["cache.block_size_tokens=0"], ["cache.block_size_tokens", "0"]),
    "block_size_huge": ([f"cache.block_size_tokens={BIG}"], ["cache.block_size_tokens"]),
    "block_bigger_than_pool": (
        ["cache.kv_cache_gib=2", "cache.block_size_tokens=4096", "scheduler.max_model_len=256"],
        ["cache.block_size_tokens", "block"],
    ),
    "pool_of_500m_blocks": (
        [*TINY_MODEL, "cache.block_size_tokens=1", "cache.kv_cache_gib=1"],
        ["cache.block_size_tokens", "536,870,912", "33,554,432"],
    ),
    "buddy_chunk_3000": (
        [
            "cache.allocator=buddy",
            "cache.kv_cache_bytes=2457600000",
            "scheduler.max_model_len=3000",
        ],
        ["buddy", "4,096-slot chunk", "3,000-slot pool", "2,048"],
    ),
    "full_context_slab": (
        [
            "cache.allocator=first_fit",
            "cache.reservation=full_context",
            "scheduler.max_model_len=1024",
            "cache.kv_cache_bytes=1228800000",
        ],
        ["cache.reservation", "2,048", "1,500-slot pool"],
    ),
    "pool_below_max_model_len": (
        ["cache.kv_cache_bytes=819200000"],
        ["scheduler.max_model_len", "1,000"],
    ),
    "unknown_allocator": (["cache.allocator=nope"], ["cache.allocator", "nope"]),
    "unknown_reservation": (["cache.reservation=huge"], ["cache.reservation", "huge"]),
    "watermark_under_v1_slabs": (  # (v1's watermark is a share of a block pool's blocks)
        ["cache.allocator=first_fit", "cache.watermark=0.5"],
        ["cache.watermark", "0.5", "block pool"],
    ),
    "watermark_one": (
        ["scheduler.engine=vllm-v0", "cache.watermark=1"],
        ["cache.watermark", "1"],
    ),
    "prefix_caching_contiguous": (
        ["cache.enable_prefix_caching=true", "cache.allocator=first_fit"],
        ["cache.enable_prefix_caching", "first_fit"],
    ),
    # hardware and model beyond physics
    "unknown_model": (["model=gpt-17"], ["model", "gpt-17"]),
    "unknown_gpu": (["gpu=b9000"], ["gpu", "b9000"]),
    "gpu_memory_1e29": ([f"gpu.memory_bytes={BIG}"], ["gpu.memory_bytes"]),
    "gpu_bandwidth_denormal": (
        ["gpu.hbm_bandwidth_bytes_per_s=1e-320"],
        ["gpu.hbm_bandwidth_bytes_per_s"],
    ),
    "gpu_flops_1e30": (["gpu.fp16_flops_per_s=1e30"], ["gpu.fp16_flops_per_s"]),
    "gpu_nvlink_nan": (["gpu.nvlink_bandwidth_bytes_per_s=NaN"], ["nvlink_bandwidth_bytes_per_s"]),
    "layers_1e9": (["model.num_layers=1000000000"], ["model.num_layers"]),
    "heads_1e29": ([f"model.num_attention_heads={BIG}"], ["model.num_attention_heads"]),
    "head_dim_zero": (["model.head_dim=0"], ["model.head_dim"]),
    "dtype_bytes_1000": (["model.dtype_bytes=1000"], ["model.dtype_bytes"]),
    "params_1e29": ([f"model.num_params={BIG}"], ["model.num_params"]),
    "kv_heads_not_dividing": (["model.num_kv_heads=7"], ["num_kv_heads", "7"]),
    "mla_half": (["model.kv_lora_rank=512"], ["kv_lora_rank", "qk_rope_head_dim"]),
    # a list's item by index (read as a field named "replica_overrides[0]": "did you mean")
    "list_item_indexed": (
        ["fleet.replicas=2", "fleet.replica_overrides[0].cache.block_size_tokens=32"],
        ["an item of a list cannot be set alone", "fleet.replica_overrides=[...]"],
    ),
    "list_item_dotted": (
        ["fleet.replicas=2", "fleet.replica_overrides.0.cache.block_size_tokens=32"],
        ["an item of a list cannot be set alone", "fleet.replica_overrides=[...]"],
    ),
    # a table where a number belongs: the message showed no value
    "number_given_a_table": (['fleet.replicas={"a": 1}'], ["valid integer, got a table", "'a'"]),
    "tp_3": (["parallel.tensor_parallel_size=3"], ["parallel.tensor_parallel_size", "3"]),
    "tp_1e6": (["parallel.tensor_parallel_size=1000000"], ["parallel.tensor_parallel_size"]),
    "pp_over_layers": (["parallel.pipeline_parallel_size=64"], ["pipeline_parallel_size", "64"]),
    # scheduler knobs
    "max_model_len_1e12": (
        ["scheduler.max_model_len=1000000000000"],
        ["scheduler.max_model_len"],
    ),
    "max_model_len_one": (["scheduler.max_model_len=1"], ["scheduler.max_model_len"]),
    "max_num_seqs_zero": (["scheduler.max_num_seqs=0"], ["scheduler.max_num_seqs"]),
    "batched_tokens_huge": (
        [f"scheduler.max_num_batched_tokens={BIG}"],
        ["scheduler.max_num_batched_tokens"],
    ),
    "batched_below_seqs": (
        ["scheduler.max_num_batched_tokens=16", "scheduler.max_num_seqs=64"],
        ["max_num_batched_tokens", "max_num_seqs"],
    ),
    "unknown_engine": (["scheduler.engine=vllm-v9"], ["scheduler.engine", "vllm-v9"]),
    "swap_under_v1": (["scheduler.preemption_mode=swap"], ["scheduler.preemption_mode", "swap"]),
    "swap_space_negative": (["scheduler.swap_space_gib=-1"], ["scheduler.swap_space_gib"]),
    "preemptions_zero": (
        ["scheduler.max_preemptions_per_request=0"],
        ["max_preemptions_per_request"],
    ),
    "chunked_under_v0": (
        ["scheduler.engine=vllm-v0", "scheduler.enable_chunked_prefill=true"],
        ["scheduler.enable_chunked_prefill"],
    ),
    # cost model
    "overhead_1e308": (["cost.step_overhead_s=1e308"], ["cost.step_overhead_s"]),
    "paged_factor_denormal": (
        ["cost.paged_attention_factor=1e-320"],
        ["cost.paged_attention_factor"],
    ),
    "hbm_efficiency_zero": (["cost.hbm_efficiency=0"], ["cost.hbm_efficiency"]),
    "link_efficiency_2": (["cost.link_efficiency=2"], ["cost.link_efficiency"]),
    "unknown_cost_preset": (["cost=vllm-1999"], ["cost", "vllm-1999"]),
    # top-level fields and --set syntax
    "seed_then_seed_table": (["seed=1", "seed.x=2"], ["seed.x", "seed is 1", "not a table"]),
    "seed_negative": (["seed=-1"], ["seed", "-1"]),
    "seed_beyond_64_bits": ([f"seed={2**70}"], ["seed"]),
    "seed_text": (["seed=abc"], ["seed", "abc"]),
    "bool_not_bool": (["debug_invariants=maybe"], ["debug_invariants", "maybe"]),
    "summary_window": (["summary_window=forever"], ["summary_window", "forever"]),
    "memory_resolution": (["memory_resolution=nano"], ["memory_resolution", "nano"]),
    "unknown_section": (["foo.bar=1"], ["foo", "Extra inputs"]),
    "set_without_equals": (["seed"], ["--set", "KEY=VALUE", "'seed'"]),
    "set_empty_key": (["=5"], ["--set", "'=5'"]),
    "set_empty_part": (["cache..block_size_tokens=8"], ["cache..block_size_tokens"]),
    "set_trailing_dot": (["cache.=8"], ["'cache.'"]),
    # a space no one sees in the echo: "offload: Extra inputs are not permitted"
    "set_key_with_space": (
        [" offload.kv_offloading_size=4"],
        ["' offload.kv_offloading_size' holds white space", "--set offload.kv_offloading_size=4"],
    ),
    "set_section_scalar": (["cache=5"], ["cache"]),
    # vLLM's method names: EAGLE-3 and the MTP heads are kvsim's 'eagle' (a drafter with KV),
    # ngram_gpu its 'ngram'; the error says which to write
    "spec_method_eagle3": (
        ["speculative.method=eagle3"],
        ["speculative.method", "vLLM's 'eagle3' is kvsim's 'eagle'", "got 'eagle3'"],
    ),
    "spec_method_mtp": (
        ["speculative.method=deepseek_mtp"],
        ["speculative.method", "'deepseek_mtp' is kvsim's 'eagle'", "MTP"],
    ),
    "spec_method_ngram_gpu": (
        ["speculative.method=ngram_gpu"],
        ["speculative.method", "'ngram_gpu' is kvsim's 'ngram'", "no lookahead slot"],
    ),
    # vLLM logs rates in %: the list gets the shares they stand for, as the scalar does
    "spec_rates_in_percent": (
        ["speculative.num_speculative_tokens=3", "speculative.acceptance_rates=[80,60,40]"],
        ["acceptance_rates", "rates in % are [0.8, 0.6, 0.4] here"],
    ),
    "spec_method_unknown": (
        ["speculative.method=medusa"],
        ["speculative.method", "'eagle' or 'ngram'", "medusa"],
    ),
    "ngram_with_drafter_weights": (  # n-gram lookup runs on the CPU: no weights to read
        [
            "speculative.method=ngram",
            "speculative.num_speculative_tokens=3",
            "speculative.acceptance_rate=0.5",
            "speculative.draft_num_params=240000000",
        ],
        ["speculative.draft_num_params", "method 'ngram'", "reads no weights", "240,000,000"],
    ),
    "ngram_with_drafter_kv_layers": (  # n-gram lookup runs no layer: no KV to keep
        [
            "speculative.method=ngram",
            "speculative.num_speculative_tokens=3",
            "speculative.acceptance_rate=0.5",
            "speculative.draft_num_kv_layers=2",
        ],
        ["speculative.draft_num_kv_layers", "method 'ngram'", "keeps no KV", "got 2"],
    ),
    "drafter_larger_than_the_gpu": (  # the drafter's weights count against the GPU's memory
        [
            "cache.kv_cache_gib=null",
            "speculative.num_speculative_tokens=3",
            "speculative.acceptance_rate=0.5",
            "speculative.draft_num_params=70000000000",
        ],
        ["cache.gpu_memory_utilization", "a drafter's 70,000,000,000 parameters included"],
    ),
    # hybrid attention
    "every_layer_a_state_layer": (  # 32 of Llama-3.1-8B's 32 layers: no attention layer left
        [
            "model=llama-3.1-8b",
            "model.attention.num_state_layers=32",
            "model.attention.state_bytes_per_layer=1000000",
        ],
        ["model.attention.num_state_layers", "no attention layer", "num_layers (32)"],
    ),
    "a_state_no_block_can_hold": (  # 1 GB a layer: one page outgrows the whole pool
        ["model.attention.num_state_layers=4", "model.attention.state_bytes_per_layer=1e9"],
        ["model.attention.state_bytes_per_layer", "too few for one request"],
    ),
    "page_size_named_once": (
        ["cache.allocator=vattention", "cache.page_size_bytes=100000"],
        ["cache.page_size_bytes: vAttention maps pages of a power of two", "100,000"],
    ),
    # a section's field given at the top level, and a section's short name
    "section_field_at_top": (
        ["attention.num_sliding_layers=3"],
        ["attention", "did you mean 'model.attention'?"],
    ),
    "section_short_name": (
        ["spec.num_speculative_tokens=3"],
        ["spec", "did you mean 'speculative'?"],
    ),
    # a vLLM engine argument in the wrong section: the section that has it, not a near
    # spelling here (a hostile trial got 'memory_resolution' and 'max_num_batched_tokens')
    "vllm_argument_at_top": (
        ["gpu_memory_utilization=0.9"],
        ["did you mean 'cache.gpu_memory_utilization'?"],
    ),
    "vllm_argument_in_another_section": (
        ["scheduler.num_speculative_tokens=2"],
        ["did you mean 'speculative.num_speculative_tokens'?"],
    ),
    "vllm_parallel_argument_in_scheduler": (
        ["scheduler.tensor_parallel_size=2"],
        ["did you mean 'parallel.tensor_parallel_size'?"],
    ),
    "vllm_name_kvsim_gives_a_unit": (  # vLLM's block_size is kvsim's block_size_tokens
        ["block_size=16"],
        ["did you mean 'cache.block_size_tokens'?"],
    ),
    # the same in its own section: the hint is the whole dotted field (it said
    # 'block_size_tokens'), and a key a field begins with beats a nearer spelling (it said
    # 'trace' for rate)
    "vllm_name_in_its_section": (
        ["cache.block_size=16"],
        ["did you mean 'cache.block_size_tokens'?"],
    ),
    "a_fields_beginning": (["workload.rate=5"], ["did you mean 'workload.rate_per_s'?"]),
    # vLLM arguments kvsim reads in another form say which (they said "Extra inputs")
    "vllm_block_override": (
        ["cache.num_gpu_blocks_override=1000"],
        ["kvsim takes cache.kv_cache_bytes = blocks x block_size_tokens"],
    ),
    "vllm_kv_bytes": (["cache.kv_cache_memory_bytes=1"], ["kvsim takes cache.kv_cache_bytes"]),
    # a preset name's beginning, a repository id ending in a preset's name, and several
    # presets begun (no guess)
    "gpu_short_name": (["gpu=h100"], ["did you mean 'h100-80gb'?"]),
    "gpu_two_begun": (["gpu=a100"], ["did you mean 'a100-40gb' or 'a100-80gb'?"]),
    "gpu_a_number": (["gpu=4090"], ["got the number 4090; did you mean 'rtx-4090'?"]),
    "workload_preset_begun": (
        ["workload=sharegpt"],
        ["no workload preset 'sharegpt'", "did you mean 'sharegpt_like' or 'sharegpt_paper'?"],
    ),
    "hf_repository_id_spelt_otherwise": (
        ["model=meta-llama/Meta-Llama-3.1-8B"],
        ["did you mean 'llama-3.1-8b'?"],
    ),
    "hf_repository_id": (
        ["model=meta-llama/Llama-3.1-8B-Instruct"],
        ["did you mean 'llama-3.1-8b'?", 'model.hf_config = "path/to/config.json"'],
    ),
    # an explicit KV budget that fits but for a drafter's weights: the drafter is named
    "drafter_outgrows_the_gpu": (
        [
            "model=llama-3.1-8b",
            "gpu=h100-80gb",
            "cache.kv_cache_gib=4",
            "speculative.num_speculative_tokens=5",
            "speculative.acceptance_rate=0.5",
            "speculative.draft_num_params=70000000000",
        ],
        ["cache.kv_cache_gib", "70,000,000,000 parameters", "speculative.draft_num_params"],
    ),
    # a list's item named as the list's [index] (it was "acceptance_rates.1"), and a value of
    # 5,000 digits not echoed whole
    "list_item_index": (
        ["speculative.num_speculative_tokens=2", 'speculative.acceptance_rates=[0.9, "x"]'],
        ["speculative.acceptance_rates[1]: expected a number, got 'x'"],
    ),
    "overlong_inside_a_list": (
        ['fleet.replica_overrides=[{"seed": 1' + "0" * 5000 + "}]"],
        # '[{"seed": 1' (11 characters) + 5,000 zeros + '}]' (2): 5,013 characters
        ['{"seed": 1000', "... (5,013 characters) holds NaN, an infinity or an overlong"],
    ),
    # a % is a share's only where the field is one (kv_cache_gib=50% is no half of anything)
    "percent_of_a_share": (
        ["cache.gpu_memory_utilization=90%"],
        ["cache.gpu_memory_utilization: expected a share of 1, got '90%': write 0.9"],
    ),
    "percent_of_a_size": (["cache.kv_cache_gib=50%"], ["expected a number, got '50%'"]),
    # a table cut short was read as a preset's name: "No workload preset '{"preset":'"
    "table_cut_short": (
        ['workload={"preset":'],
        ['--set workload: {"preset": is neither a JSON nor a TOML table or array'],
    ),
    "array_cut_short": (
        ["speculative.acceptance_rates=[0.8, 0.7"],
        ["--set speculative.acceptance_rates: [0.8, 0.7 is neither"],
    ),
    # two problems: each named, one after the other on the one error line
    "two_problems": (
        ["model=llama-3.1-405b", "cache.kv_cache_dtype=fp32"],
        # (the preset's message names the value: not repeated after it)
        ["unknown model preset", "'llama-3.1-70b'?; cache.kv_cache_dtype: Input should be"],
    ),
}


@pytest.mark.parametrize("case", sorted(SETS))
def test_bad_override(hostile, case: str) -> None:
    pairs, expected = SETS[case]
    args = list(RUN)
    for pair in pairs:
        args += ["--set", pair]
    hostile.run(args, *expected)


# id: (file bytes, fragments); the file is cwd/cfg.toml
FILES: dict[str, tuple[bytes, list[str]]] = {
    "not_utf8": (b'seed = 1\nname = "\xff"\n', ["cfg.toml line 2", "not UTF-8", "0xff"]),
    "utf16": ("seed = 1\n".encode("utf-16"), ["cfg.toml", "not UTF-8"]),
    "binary_garbage": (bytes(range(256)) * 4, ["cfg.toml", "not UTF-8"]),
    "invalid_toml": (b"seed = = 1\n", ["cfg.toml", "invalid TOML", "line 1"]),
    "duplicate_key": (
        b"seed = 1\nseed = 2\n",
        ["cfg.toml", "invalid TOML", "line 2", "a key is set twice"],
    ),
    "unclosed_table": (b"[cache\nblock_size_tokens = 8\n", ["cfg.toml", "invalid TOML"]),
    "toml_date": (b"seed = 1979-05-27\n", ["seed"]),
    "huge_int": (b"seed = 99999999999999999999\n", ["seed"]),
    "toml_inf": (b"[cache]\nkv_cache_gib = inf\n", ["cache.kv_cache_gib", "finite"]),
    "toml_nan": (b"[workload]\nrate_per_s = nan\n", ["workload.rate_per_s", "finite"]),
    "section_is_number": (b"workload = 5\n", ["workload"]),
    "section_is_array": (b"cache = [1, 2]\n", ["cache"]),
    # a preset's name would do as well as a table (it said "a table" only)
    "gpu_is_number": (
        b"gpu = 5\n",
        ["cfg.toml line 1", "gpu: a gpu preset's name or a table, got the number 5"],
    ),
    "cache_is_number": (
        b"cache = 5\n",
        ["cfg.toml line 1", "cache: Input should be a table, got 5"],
    ),
    "block_size_fraction": (
        b"[cache]\nblock_size_tokens = 16.5\n",
        ["cache.block_size_tokens", "with a fractional part: 16.5"],
    ),
    # an item's error at its key's line (it said line 1, the section's, naming "speculative")
    "quoted_item_in_array": (
        b'[speculative]\nnum_speculative_tokens = 2\nacceptance_rates = [\n  "0.8",\n  0.7,\n]\n',
        ["cfg.toml line 3: speculative.acceptance_rates[0]: expected a number", "'0.8'"],
    ),
    "empty_model_table": (b"[model]\n", ["model", "Field required"]),
    "block_size_word": (b'[cache]\nblock_size_tokens = "sixteen"\n', ["block_size_tokens"]),
    # pydantic's lax mode would read these as 16, true and true
    "block_size_quoted": (
        b'[cache]\nblock_size_tokens = "16"\n',
        ["cfg.toml line 2", "cache.block_size_tokens", "the string '16'", "without quotes"],
    ),
    "workload_name_control_characters": (  # (printed raw: a colour code, a line break)
        b'[workload]\nname = "a\\u001b[31mred\\nx"\n',
        ["cfg.toml line 2", "workload.name", "without line breaks or control characters"],
    ),
    "block_size_full_width_digits": (  # ("write it without quotes": none were written)
        '[cache]\nblock_size_tokens = "\uff11\uff16"\n'.encode(),
        ["cfg.toml line 2", "cache.block_size_tokens", "ASCII digits (0-9)", "'\uff11\uff16'"],
    ),
    "bool_yes": (
        b'[cache]\nenable_prefix_caching = "yes"\n',
        ["cfg.toml line 2", "cache.enable_prefix_caching", "expected true or false", "'yes'"],
    ),
    "bool_one": (
        b"debug_invariants = 1\n",
        ["cfg.toml line 1", "debug_invariants", "expected true or false, got 1"],
    ),
    "hf_config_missing": (
        b'[model]\nhf_config = "/nonexistent/config.json"\n',
        ["hf_config", "/nonexistent/config.json"],
    ),
    "pricing_table_missing": (  # an OSError with no field named
        b'[pricing]\ntable = "/nonexistent/prices.toml"\n',
        ["pricing.table", "no such file", "/nonexistent/prices.toml"],
    ),
    "hf_config_a_number": (  # a TypeError escaped (exit 1)
        b"[model]\nhf_config = 5\n",
        ["cfg.toml line 2", "model.hf_config", "expected the path of a config.json", "got 5"],
    ),
    "preset_path_escape": (
        b'[workload]\npreset = "../../../../etc/hostname"\n',
        ["hostname"],
    ),
    "unknown_top_key": (b"seeds = 3\n", ["seeds", "Extra inputs"]),
    # the item's own [[table]] and its line setting the field (line 6); it named the last
    # [[fleet.replica_overrides]] header, line 7, whichever item was at fault
    "replica_override_item": (
        b"[fleet]\nreplicas = 3\n[[fleet.replica_overrides]]\nscheduler = { max_num_seqs = 64 }\n"
        b"[[fleet.replica_overrides]]\ncache = { kv_cache_gib = 0.001 }\n"
        b"[[fleet.replica_overrides]]\nscheduler = { max_num_seqs = 32 }\n",
        ["cfg.toml line 6: fleet.replica_overrides[1]: cache.kv_cache_gib"],
    ),
    "preset_then_its_table": (  # a key given a value, then opened as a table
        b'model = "llama-3.1-8b"\n[model.attention]\nnum_sliding_layers = 2\n',
        ["invalid TOML", "cannot also be opened as a table", 'preset = "llama-3.1-8b"'],
    ),
}


@pytest.mark.parametrize("case", sorted(FILES))
def test_bad_config_file(hostile, case: str) -> None:
    content, expected = FILES[case]
    path = hostile.write("cfg.toml", content)
    hostile.run(["run", "--no-progress", path, "--set", "workload.num_requests=3"], *expected)


@pytest.mark.parametrize(
    "pair",
    [
        "workload.rate_per_s=[NaN]",
        "speculative.acceptance_rates=[NaN,0.8,0.7]",
        'offload={"kv_offloading_size": Infinity}',
        'fleet.replica_overrides=[{"seed": 1' + "0" * 5000 + "}]",  # (past 4,300 digits)
    ],
)
def test_a_nan_inside_a_set_value_beside_a_file_names_the_key(hostile, pair: str) -> None:
    # beside a config file the error line quoted the value with json.dumps, which raised
    # "Object of type NotANumber is not JSON serializable" (exit 1)
    path = hostile.write("cfg.toml", b'model = "llama-3.1-8b"\n')
    key, _, raw = pair.partition("=")
    hostile.run(["run", "--no-progress", path, "--set", pair], f"--set {key}: {raw[:40]}")
    hostile.run(["run", "--no-progress", path, "--set", pair], "holds NaN, an infinity or an")


@pytest.mark.usefixtures("fresh_warnings")
def test_a_bad_override_beside_a_file_warns_nothing_of_the_file_alone(hostile, caplog) -> None:
    # to place the blame kvsim builds the file alone: opt-13b, the default model, with the
    # file's max_model_len of 4,096 over its 2,048 trained tokens; that warning preceded the error
    path = hostile.write("cfg.toml", b"[scheduler]\nmax_model_len = 4096\n")
    bad = hostile.write("config.json", b'{"num_hidden_layers": 0}')
    with caplog.at_level(logging.WARNING):
        args = ["run", "--no-progress", path, "--set", f"model.hf_config={bad}"]
        hostile.run(args, "config.json: missing field 'num_attention_heads'")
    assert "trained context" not in caplog.text


def test_config_folder_and_missing_file(hostile) -> None:
    folder = hostile.cwd / "cfgdir.toml"
    folder.mkdir()
    hostile.run(["run", "--no-progress", folder], "cfgdir.toml", "is a folder")
    hostile.run(["run", "--no-progress", "nope.toml"], "nope.toml", "no such file")


def test_hf_config_not_utf8_and_infinite(hostile) -> None:
    bad = hostile.write("hf/config.json", b'{"num_hidden_layers": 40\xff}')
    hostile.run(
        ["run", "--no-progress", "--set", f"model={bad}"], "config.json line 1", "not UTF-8"
    )
    inf = hostile.write(
        "hf2/config.json",
        '{"num_hidden_layers": Infinity, "num_attention_heads": 40, "hidden_size": 5120}',
    )
    hostile.run(["run", "--no-progress", "--set", f"model={inf}"], "num_hidden_layers")


# plain dicts through the API: ValueError naming the field
DICTS: dict[str, tuple[dict, str]] = {
    "cache_none": ({"cache": None}, r"cache"),
    "cache_list": ({"cache": [1]}, r"cache"),
    "block_size_2e70": ({"cache": {"block_size_tokens": 2**70}}, r"cache\.block_size_tokens"),
    "num_requests_1e12": ({"workload": {"num_requests": 10**12}}, r"workload\.num_requests"),
    "seed_table": ({"seed": {"x": 1}}, r"seed"),
    "model_number": ({"model": 3}, r"model"),
    "workload_preset_number": ({"workload": {"preset": 3}}, r"workload"),
    "rate_nan": ({"workload": {"rate_per_s": float("nan")}}, r"workload\.rate_per_s.*finite"),
    "kv_gib_inf": ({"cache": {"kv_cache_gib": float("inf")}}, r"cache\.kv_cache_gib.*finite"),
    "gpu_memory_negative": (
        {"gpu": {"preset": "a100-40gb", "memory_bytes": -1}},
        r"gpu\.memory_bytes",
    ),
    # a quoted item of a list of numbers, as a quoted single value is refused (not read as 0.5)
    "acceptance_rates_quoted": (
        {"speculative": {"num_speculative_tokens": 3, "acceptance_rates": [0.9, "0.5", 0.1]}},
        r"acceptance_rates\[1\]: expected a number, got the string '0\.5'",
    ),
    "acceptance_rates_true": (
        {"speculative": {"num_speculative_tokens": 2, "acceptance_rates": [True, 0.5]}},
        r"acceptance_rates\[0\]: expected a number, got true",
    ),
}


@pytest.mark.parametrize("case", sorted(DICTS))
def test_bad_dict(case: str) -> None:
    data, match = DICTS[case]
    with pytest.raises(ValueError, match=match):
        config_from_dict(data, {"workload.num_requests": 3} if "workload" not in data else None)


# Legal settings the config ignores (kvsim.config.ignored). id: (overrides, the ignored field
# last, fragments of the one warning); "TRACE" stands for a trace file with its own arrivals.
TRACE = "arrival_time_s,prompt_tokens,output_tokens\n0,10,5\n0.5,20,5\n1.0,30,5\n"
IGNORED: dict[str, tuple[dict[str, Any], list[str]]] = {
    "utilization_beside_gib_budget": (
        {"cache.kv_cache_gib": 4, "cache.gpu_memory_utilization": 0.5},
        ["cache.gpu_memory_utilization = 0.5", "cache.kv_cache_gib sets", "takes precedence"],
    ),
    "headroom_beside_gib_budget": (
        {"cache.kv_cache_gib": 4, "cache.activation_headroom_bytes": 1000},
        ["cache.activation_headroom_bytes = 1000", "cache.kv_cache_gib sets", "takes precedence"],
    ),
    "utilization_beside_gb_budget": (
        {"cache.kv_cache_gb": 4, "cache.gpu_memory_utilization": 0.5},
        ["cache.gpu_memory_utilization = 0.5", "cache.kv_cache_gb sets"],
    ),
    "reservation_on_paged": (
        {"cache.allocator": "paged", "cache.reservation": "pow2"},
        ["cache.reservation = 'pow2'", "allocator 'paged'", "first_fit, best_fit, buddy"],
    ),
    "block_size_on_first_fit": (
        {"cache.allocator": "first_fit", "cache.block_size_tokens": 32},
        ["cache.block_size_tokens = 32", "allocator 'first_fit'", "applies to paged"],
    ),
    "block_size_on_radix": (
        {"cache.allocator": "radix", "cache.block_size_tokens": 32},
        ["cache.block_size_tokens = 32", "allocator 'radix'"],
    ),
    "prefix_caching_off_on_radix": (  # SGLang's RadixCache is a prefix cache: it caches anyway
        {"cache.allocator": "radix", "cache.enable_prefix_caching": False},
        ["cache.enable_prefix_caching = False", "allocator 'radix'", "caches prefixes"],
    ),
    "rate_with_trace_arrivals": (
        {"workload.trace": "TRACE", "workload.arrival": "trace", "workload.rate_per_s": 50},
        ["workload.rate_per_s = 50", "arrival = 'trace'"],
    ),
    "cv_with_poisson_arrivals": (
        {"workload.cv": 2.0},
        ["workload.cv = 2.0", "gamma arrivals only", "'poisson'"],
    ),
    "beam_branch_tokens_without_beams": (
        {"workload.beam_branch_tokens": 3.0},
        ["workload.beam_branch_tokens = 3.0", "beam search only", "beam_width is 1"],
    ),
    "acceptance_rate_without_drafts": (
        {"speculative.acceptance_rate": 0.5},
        ["speculative.acceptance_rate = 0.5", "num_speculative_tokens is 0"],
    ),
    # a list of rates without drafts was an error ("one rate per speculative token (0)") where
    # the scalar rates warn
    "acceptance_rates_without_drafts": (
        {"speculative.acceptance_rates": (0.8,)},  # (a tuple, as the field keeps it)
        ["speculative.acceptance_rates = ", "0.8", "num_speculative_tokens is 0"],
    ),
    "drafter_kv_layers_without_drafts": (
        {"speculative.draft_num_kv_layers": 2},
        ["speculative.draft_num_kv_layers = 2", "num_speculative_tokens is 0"],
    ),
    "prefix_router_weighing_nothing": (  # every replica scores 0: ties go round robin
        {
            "fleet.replicas": 2,
            "fleet.prefix_weight": 0,
            "fleet.kv_usage_weight": 0,
            "fleet.queue_weight": 0,
            "fleet.router": "prefix",  # (last: the ignored field; round robin without it)
        },
        ["fleet.router = 'prefix'", "are all 0", "round robin"],
    ),
    "link_bandwidth_without_a_tier": (
        {"offload.link_bandwidth_bytes_per_s": 1e9},
        ["offload.link_bandwidth_bytes_per_s = 1000000000.0", "kv_offloading_size is unset"],
    ),
}


def _with_trace(overrides: dict[str, Any], trace: Path) -> dict[str, Any]:
    trace.write_text(TRACE, encoding="utf-8")
    return {k: str(trace) if v == "TRACE" else v for k, v in overrides.items()}


@pytest.mark.usefixtures("fresh_warnings")
@pytest.mark.parametrize("case", sorted(IGNORED))
def test_an_ignored_setting_warns_and_changes_nothing(case, tmp_path, caplog) -> None:
    overrides = _with_trace(IGNORED[case][0], tmp_path / "t.csv")
    *kept, ignored = overrides
    config = config_from_dict({}, {"workload.num_requests": 3, **overrides})
    (message,) = moot_warnings(caplog)
    for fragment in IGNORED[case][1]:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    # the same run as without the ignored field
    plain = config_from_dict({}, {"workload.num_requests": 3, **{k: overrides[k] for k in kept}})
    section, name = ignored.split(".")
    assert getattr(getattr(config, section), name) == overrides[ignored]  # kept as written
    assert config.kv_cache_bytes == plain.kv_cache_bytes
    assert summary_without(config) == summary_without(plain)


@pytest.mark.usefixtures("fresh_warnings")
def test_an_ignored_setting_reads_the_same_at_every_budget(caplog) -> None:
    # a plan's points (kvsim plan bursty-kv --set cache.gpu_memory_utilization=0.8) each set
    # another budget; a warning that named its value was said once per point
    for gib in (4, 5.5):
        overrides = {"cache.kv_cache_gib": gib, "cache.gpu_memory_utilization": 0.5}
        config_from_dict({}, {"workload.num_requests": 3, **overrides})
    (message,) = moot_warnings(caplog)
    assert "cache.kv_cache_gib sets the KV budget" in message


QUIET: dict[str, dict[str, Any]] = {
    "budget_beside_default_utilization": {
        "cache.kv_cache_gib": 4,
        "cache.gpu_memory_utilization": 0.9,  # its default: nothing differs either way
    },
    "utilization_alone": {"cache.gpu_memory_utilization": 0.95},
    "reservation_on_buddy": {"cache.allocator": "buddy", "cache.reservation": "pow2"},
    "block_size_on_paged": {"cache.block_size_tokens": 32},
    "prefix_caching_on_radix": {"cache.allocator": "radix", "cache.enable_prefix_caching": True},
    "rate_for_the_fallback": {
        "workload.trace": "TRACE",
        "workload.arrival": "trace",
        "workload.fallback_synthetic": True,
        "workload.rate_per_s": 50,
    },
    "cv_with_gamma_arrivals": {"workload.arrival": "gamma", "workload.cv": 2.0},
    "beam_branch_tokens_with_beams": {
        "scheduler.engine": "vllm-v0",
        "workload.beam_width": 2,
        "workload.beam_branch_tokens": 3.0,
    },
    "trace_arrival_preset": {"workload": "azure_conv"},
}


@pytest.mark.usefixtures("fresh_warnings")
@pytest.mark.parametrize("case", sorted(QUIET))
def test_a_setting_that_applies_is_not_warned(case, tmp_path, caplog) -> None:
    config_from_dict({}, {"workload.num_requests": 3, **_with_trace(QUIET[case], tmp_path / "t")})
    assert moot_warnings(caplog) == []


@pytest.mark.usefixtures("fresh_warnings")
def test_a_later_override_that_moots_a_file_setting_is_not_warned(tmp_path, caplog) -> None:
    # the file's reservation is for its slabs; --set moves the run to paging
    path = tmp_path / "c.toml"
    path.write_text('[cache]\nallocator = "first_fit"\nreservation = "pow2"\n')
    load_config(path, {"cache.allocator": "paged", "workload.num_requests": 3})
    assert moot_warnings(caplog) == []
    # the file contradicts itself: warned
    path.write_text('[cache]\nallocator = "paged"\nreservation = "pow2"\n')
    load_config(path, {"workload.num_requests": 3})
    (message,) = moot_warnings(caplog)
    assert "cache.reservation = 'pow2'" in message


@pytest.mark.usefixtures("fresh_warnings")
def test_a_sweep_moots_its_base_setting_without_a_warning(caplog) -> None:
    base = {"cache": {"kv_cache_gib": 4, "reservation": "pow2"}, "workload": {"num_requests": 3}}
    swept = parse_experiment(
        {"base": base, "grid": {"cache.allocator": ["paged", "buddy"]}}, name="t"
    )
    assert all(p.error is None for p in swept.points())
    assert moot_warnings(caplog) == []
    # every point on paging: the base's reservation is never read
    fixed = parse_experiment(
        {"base": base, "grid": {"cache.block_size_tokens": [16, 32]}}, name="t"
    )
    assert all(p.error is None for p in fixed.points())
    (message,) = moot_warnings(caplog)
    assert "cache.reservation = 'pow2'" in message


@pytest.mark.usefixtures("fresh_warnings")
def test_no_shipped_preset_sets_an_ignored_field(caplog) -> None:
    for path in sorted(experiments_dir().glob("*.toml")):
        for quick in (False, True):
            load_experiment(path).points(quick=quick)
    for path in sorted(plans_dir().glob("*.toml")):
        plan = load_plan(path)
        spec = plan.config(plan.hi)
        config_from_dict(spec["data"], spec["overrides"])
    for path in sorted(workloads_dir().glob("*.toml")):
        config_from_dict({"workload": path.stem, "scheduler": {"engine": "vllm-v0"}})
    scenario = workloads_dir() / "scenarios" / "azure_conv_llama31_8b.toml"
    load_config(scenario)
    load_config(  # the README's slab run
        scenario, {"cache.allocator": "first_fit", "cache.reservation": "prompt_max_tokens"}
    )
    assert moot_warnings(caplog) == []


CALIBRATION_HEAD = (
    "# source: measured\n# device_name: NVIDIA A100\n# driver_version: 1\n"
    "# cupy_version: 1\n# date_utc: now\n"
    "batch_size,context_tokens,block_size_tokens,contiguous_s,paged_s,kv_bytes\n"
)
# id: (file name, content, fragments of the error line); CSV data rows start at line 7
CALIBRATIONS = {
    "short_row": ("c.csv", CALIBRATION_HEAD + "1,256,16,1.0\n", ["c.csv line 7", "4 fields"]),
    "text": ("c.csv", CALIBRATION_HEAD + "1,256,16,1.0,abc,0\n", ["line 7: paged_s", "'abc'"]),
    "nan": ("c.csv", CALIBRATION_HEAD + "1,256,16,1.0,nan,0\n", ["line 7: paged_s", "finite"]),
    "fraction": ("c.csv", CALIBRATION_HEAD + "1,256,16.7,1,1,0\n", ["block_size_tokens", "16.7"]),
    "rows_int": ("c.json", '{"meta": {}, "rows": 5}', ["c.json: meta.source: Field required"]),
    "meta_list": ("c.json", '{"meta": [], "rows": []}', ["c.json: meta:", "got []"]),
    "not_json": ("c.json", "not json", ["c.json line 1 column 1: invalid JSON"]),
}


@pytest.mark.parametrize("case", CALIBRATIONS)
def test_bad_calibration_table(hostile, case: str) -> None:
    name, content, fragments = CALIBRATIONS[case]
    table = hostile.write(name, content)
    args = [*RUN, "--set", f"cost.calibration={table}", "--out", hostile.out]
    hostile.run(args, *fragments)


def test_a_missing_calibration_table_names_the_field(hostile) -> None:
    # "[Errno 2] No such file or directory: ...", naming no field
    args = [*RUN, "--set", "cost.calibration=missing.csv", "--out", hostile.out]
    hostile.run(args, "cost.calibration: 'missing.csv' is no such file", "or 'analytic'")


def test_a_table_measured_on_another_gpu_is_warned(hostile, caplog) -> None:
    # said at INFO, which the CLI never shows: the A100's ratios stood for an H200's unsaid
    import logging

    table = hostile.write("c.csv", CALIBRATION_HEAD + "1,256,16,1.0,1.1,0\n")
    args = [*RUN, "--set", "gpu=h200", "--set", f"cost.calibration={table}"]
    with caplog.at_level(logging.WARNING, logger="kvsim.calibrate"):
        hostile.run([*args, "--out", hostile.out], code=0)
    said = [r.getMessage() for r in caplog.records]
    assert any(
        "the table measured on NVIDIA A100 is applied to the simulated h200" in m for m in said
    )


def test_a_check_that_names_its_field_in_full_is_not_prefixed_twice():
    # a model check raises "model.attention: ..." at the location "model": the line names
    # the field once (it read "model: model.attention: ...")
    model = {
        "num_layers": 32,
        "num_attention_heads": 32,
        "num_kv_heads": 8,
        "head_dim": 128,
        "num_params": 8_000_000_000,
        "attention": {"num_sliding_layers": 40, "sliding_window_tokens": 1024},
    }
    with pytest.raises(ValueError, match="exceed num_layers") as err:
        config_from_dict({"model": model, "gpu": "h100-80gb"})
    line = str(err.value)
    assert line.startswith("model.attention: 40 sliding and state layers exceed num_layers (32)")
    assert "model: model" not in line


def test_a_pool_the_drafters_layers_fill_names_them_and_asks_for_more_kv() -> None:
    # (32 + 100,000 layers) x 4,096 B = 409,731,072 B a token: 4 GiB holds 10 tokens, not one
    # 16-token block, so no max_model_len would fit: the message asks for KV only
    data = {
        "model": "llama-3.1-8b",
        "gpu": "h100-80gb",
        "cache": {"kv_cache_gib": 4},
        "scheduler": {"max_model_len": 8192},
        "workload": {"num_requests": 3},
        "speculative": {
            "num_speculative_tokens": 3,
            "acceptance_rate": 0.5,
            "draft_num_kv_layers": 100_000,
        },
    }
    with pytest.raises(ValueError, match=r"scheduler\.max_model_len") as err:
        config_from_dict(data)
    message = str(err.value)
    assert "holds 10 tokens" in message
    assert "409,731,072 bytes include the drafter's 100,000 KV layers" in message
    assert message.endswith("raise the KV budget")
    assert "lower scheduler.max_model_len" not in message


@pytest.mark.usefixtures("fresh_warnings")
@pytest.mark.parametrize("text", ["", "# only a comment\n\n"])
def test_a_config_file_that_sets_nothing_is_warned_about(text, tmp_path, caplog) -> None:
    """An empty file is valid TOML and runs the default config: legal, but likely a wrong or
    truncated file, so it warns; a file that sets one field does not."""
    empty = tmp_path / "empty.toml"
    empty.write_text(text)
    assert load_config(empty) == config_from_dict({})
    assert [r.getMessage() for r in caplog.records if "sets no field" in r.getMessage()] == [
        f"{empty} sets no field (empty, or only comments): every field is kvsim's default "
        "(`kvsim presets` lists presets)"
    ]
    forget_warnings(caplog)
    one = tmp_path / "one.toml"
    one.write_text("[cache]\nblock_size_tokens = 16\n")
    load_config(one)
    load_config(empty, {"cache.block_size_tokens": 32})  # the --set overrides say something
    assert not [r for r in caplog.records if "sets no field" in r.getMessage()]


@pytest.mark.parametrize("price", ["inf", "nan", "1e10", "-1"])
def test_a_price_table_refuses_what_pricing_usd_per_gpu_hour_refuses(price, tmp_path) -> None:
    """The table's prices are held to the field's bounds, [0, 1e9] USD per GPU-hour: an
    infinite price ran and printed an infinite cost (summary.json: null)."""
    table = tmp_path / "prices.toml"
    table.write_text(f'[a100-40gb]\nusd_per_gpu_hour = {price}\nsource = "x"\ndate = "d"\n')
    with pytest.raises(
        ValueError, match=r"prices.toml line 2: \[a100-40gb\] usd_per_gpu_hour: expected a price "
    ):
        config_from_dict({"pricing": {"table": str(table)}})
    with pytest.raises(ValueError, match=r"usd_per_gpu_hour"):
        config_from_dict({"pricing": {"usd_per_gpu_hour": float(price)}})


@pytest.mark.parametrize("key", ["usd_per_gpu_hr", "sorce"])
def test_a_price_tables_misspelt_key_is_refused_naming_its_line(key: str, tmp_path) -> None:
    """A row of a price table holds usd_per_gpu_hour, source and date: a misspelt source was
    dropped without a word (and a misspelt price read as no price at all)."""
    table = tmp_path / "prices.toml"
    table.write_text(f'[a100-40gb]\nusd_per_gpu_hour = 2.0\n{key} = 3.0\ndate = "d"\n')
    with pytest.raises(
        ValueError, match=r"prices.toml line 3: \[a100-40gb\] expected the keys"
    ) as err:
        config_from_dict({"pricing": {"table": str(table)}})
    assert str(err.value).endswith(f"got unknown ['{key}']")  # (not the table's path as 'got')


def test_a_price_tables_row_that_is_a_number_is_said_to_need_a_table(tmp_path) -> None:
    """`h100-80gb = 3` was 'usd_per_gpu_hour: expected a price ..., got None'."""
    table = tmp_path / "prices.toml"
    table.write_text("h100-80gb = 3\n")
    with pytest.raises(ValueError, match=r"prices.toml line 1: h100-80gb: expected a table") as e:
        config_from_dict({"pricing": {"table": str(table)}})
    assert "got 3" in str(e.value)


def test_hf_config_may_be_a_path_object(tmp_path) -> None:
    """The Python API's callers may give a ``pathlib.Path`` (the check that refuses a number
    refused it too)."""
    from kvsim.config import ModelSpec

    fields = {"model_type": "llama", "hidden_size": 512, "num_hidden_layers": 4}
    fields |= {"num_attention_heads": 8, "num_key_value_heads": 8, "intermediate_size": 1024}
    fields |= {"vocab_size": 1000, "max_position_embeddings": 4096, "torch_dtype": "float16"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(fields))
    assert ModelSpec.model_validate({"hf_config": path}).num_layers == 4


def test_a_name_many_presets_begin_gets_no_guess() -> None:
    # "llama" begins four model presets: the list is the answer, not one of them
    from kvsim.base.names import preset_hint
    from kvsim.config.hardware import preset_table

    assert preset_hint("models", "llama", preset_table("models")) == ""
    assert preset_hint("gpus", "h100", preset_table("gpus")) == "; did you mean 'h100-80gb'?"
