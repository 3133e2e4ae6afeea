"""Does the model fit the GPUs, and does the KV pool hold one request? Errors saying what is short.

vLLM sizes the KV cache per worker as ``gpu_memory_utilization * total - weights on the GPU -
peak activations - non-torch memory`` (``vllm/v1/worker/gpu_worker.py``,
``determine_available_memory``) and refuses to start when one ``max_model_len`` request does not fit
(``check_enough_kv_cache_memory``). kvsim folds activations and non-torch memory into
``cache.activation_headroom_bytes``.
"""

from __future__ import annotations

from typing import Protocol

from kvsim.base.limits import MAX_POOL_BLOCKS
from kvsim.base.units import format_gib as _gib  # three significant digits: 0.25 GiB, not 0.2
from kvsim.base.units import next_power_of_2, prev_power_of_2
from kvsim.config.allocators import (
    PAGED_ALLOCATORS,
    POWER_OF_TWO_SLABS,
    SLAB_ALLOCATORS,
    maps_virtual_pages,
    vattention_pages,
)
from kvsim.config.hardware import (
    GpuSpec,
    ModelSpec,
    ParallelConfig,
    kv_bytes_per_token_per_gpu,
    model_kv_groups,
    weight_bytes_per_gpu,
)
from kvsim.config.layers import KVCacheGroups, max_request_tokens, request_blocks
from kvsim.config.serving import (
    MIN_MAX_MODEL_LEN,
    VATTENTION_PAGE_SIZES,
    CacheSpec,
    EngineArgs,
)
from kvsim.config.speculative import SpeculativeConfig


class ConfigParts(Protocol):
    """What this module reads of a ``SimConfig`` (its parts and derived sizes)."""

    @property
    def model(self) -> ModelSpec: ...

    @property
    def gpu(self) -> GpuSpec: ...

    @property
    def parallel(self) -> ParallelConfig: ...

    @property
    def cache(self) -> CacheSpec: ...

    @property
    def engine_args(self) -> EngineArgs: ...

    @property
    def max_model_len(self) -> int: ...

    @property
    def bytes_per_token(self) -> int: ...

    @property
    def capacity_tokens(self) -> int: ...

    @property
    def kv_groups(self) -> KVCacheGroups | None: ...

    @property
    def kv_cache_bytes(self) -> int: ...

    @property
    def weight_bytes_per_gpu(self) -> int: ...

    @property
    def draft_params(self) -> int: ...

    @property
    def draft_kv_layers(self) -> int: ...

    @property
    def num_kv_tensors(self) -> int: ...

    @property
    def speculative(self) -> SpeculativeConfig: ...


MAX_SUGGESTED_TP = 64


def utilization_for_budget(config: ConfigParts) -> float:
    """The least ``gpu_memory_utilization`` whose derived budget holds the config's KV budget
    (``(kv_cache_bytes + weights + activation headroom) / GPU memory``, the derivation above
    solved for it), rounded up to 0.001 so that the budget derived from it is no smaller; above
    1 when they exceed the GPU."""
    others = config.weight_bytes_per_gpu + config.cache.activation_headroom_bytes
    memory = config.gpu.memory_bytes
    share = -(-(config.kv_cache_bytes + others) * 1000 // memory) / 1000
    if int(share * memory - others) < config.kv_cache_bytes:  # (a float's last bit short)
        share = round(share + 0.001, 3)
    return share


def check_memory(config: ConfigParts) -> None:
    """Raise ``ValueError`` when the weights, the KV budget or one request do not fit.

    Messages name which of weights, KV or activation headroom is short, by how much, and the
    smallest tensor-parallel size that would fit when a larger one helps.
    """
    cache, gpu = config.cache, config.gpu
    weights = config.weight_bytes_per_gpu
    where = (
        f"{config.model.name} on {gpu.name}, tensor_parallel_size "
        f"{config.parallel.tensor_parallel_size}, pipeline_parallel_size "
        f"{config.parallel.pipeline_parallel_size}"
    )
    field = _budget_field(config)
    if field != "cache.gpu_memory_utilization":  # an explicit budget
        if config.kv_cache_bytes + weights > gpu.memory_bytes:
            drafter, lower = "", "the KV budget"
            if config.draft_params:  # (the drafter's weights alone may be what does not fit)
                drafter = (
                    f" (a drafter's {config.draft_params:,} parameters included: "
                    "speculative.draft_num_params)"
                )
                lower += " or the drafter's size"
            raise ValueError(
                f"{field}: {_gib(config.kv_cache_bytes)} of KV per GPU plus "
                f"{_gib(weights)} of weights{drafter} exceed the {_gib(gpu.memory_bytes)} of "
                f"one {gpu.name} ({where}); lower {lower} or raise parallel.tensor_parallel_size"
            )
    else:
        usable = cache.gpu_memory_utilization * gpu.memory_bytes
        left = usable - weights - cache.activation_headroom_bytes
        slots = max(0, int(left // config.bytes_per_token))
        if request_limit_tokens(config, slots) < config.max_model_len:
            if left > 0:  # (with no room left for KV, the weights are what does not fit)
                _refuse_an_outsized_state(config, slots, where)
            raise ValueError(_derived_budget_message(config, where, usable, left))
    if config.capacity_tokens < 2:
        raise ValueError(
            f"{field}: the KV budget of {config.kv_cache_bytes:,} bytes per GPU holds "
            f"{config.capacity_tokens} tokens of {config.bytes_per_token:,} bytes ({where}); "
            "raise it"
        )
    limit = request_limit_tokens(config, config.capacity_tokens)
    if limit < config.max_model_len:
        _refuse_an_outsized_state(config, config.capacity_tokens, where)
        need = least_pool_bytes(config)
        raise ValueError(
            f"scheduler.max_model_len: one request of {config.max_model_len:,} tokens"
            f"{_shape_note(config)} needs {_gib(need, round_up=True)} of KV but the pool holds "
            f"{config.capacity_tokens:,} tokens ({_gib(config.kv_cache_bytes)}, {where})"
            f"{_limit_note(config, limit)}{_drafter_layers_note(config)}; "
            + _context_advice(config, limit, " or raise the KV budget")
        )


def _reserves_trained_context(config: ConfigParts) -> bool:
    """A slab allocator under ``full_context``: every request's slab is the model's trained
    context, whatever ``max_model_len``."""
    return config.cache.allocator in SLAB_ALLOCATORS and config.cache.reservation == "full_context"


def _fits_beside_weights(config: ConfigParts, kv_bytes: int) -> bool:
    """Whether a KV budget of ``kv_bytes`` fits one GPU beside its weights (the explicit
    budget's check in ``check_memory``)."""
    return kv_bytes + config.weight_bytes_per_gpu <= config.gpu.memory_bytes


def _shape_note(config: ConfigParts) -> str:
    """What a request's pool holds beyond its tokens, in words (``""`` for none): the
    ``full_context`` slab of the trained context, or buddy's power-of-two chunk."""
    if _reserves_trained_context(config):
        return f" (its 'full_context' slab: {config.model.max_position_embeddings:,} tokens)"
    if config.cache.allocator in POWER_OF_TWO_SLABS:
        chunk = next_power_of_2(_largest_slab(config))
        return f" (a {chunk:,}-slot buddy chunk)" if chunk > config.max_model_len else ""
    return ""


def _context_advice(config: ConfigParts, limit: int, or_raise: str = "") -> str:
    """What a pool holding one request of at most ``limit`` tokens asks of the config: a shorter
    ``max_model_len`` (buddy's a power of two; then ``or_raise``, where a budget that holds one
    request fits beside the weights), another reservation where the slab is the trained context
    whatever ``max_model_len`` (``full_context``; raising the budget first where ``or_raise``
    asks for it and it fits), or ``_no_row_advice``."""
    fits = _fits_beside_weights(config, least_pool_bytes(config))
    if config.cache.allocator in POWER_OF_TWO_SLABS and limit >= 1:
        limit = prev_power_of_2(limit)  # (buddy's chunk of max_model_len: a power of two)
    if _reserves_trained_context(config):
        advice = (
            "choose another cache.reservation ('full_context' reserves "
            f"{config.model.name}'s trained context, {config.model.max_position_embeddings:,} "
            "tokens, whatever max_model_len)"
        )
        if limit < config.max_model_len:  # (another reservation's slab: max_model_len)
            advice += f" and lower scheduler.max_model_len to at most {limit:,}"
        return ("raise the KV budget or " if or_raise and fits else "") + advice
    if limit >= MIN_MAX_MODEL_LEN and _holds_a_block(config):
        return f"lower scheduler.max_model_len to at most {limit:,}{or_raise if fits else ''}"
    return _no_row_advice(config)


def _refuse_an_outsized_state(config: ConfigParts, slots: int, where: str) -> None:
    """Raise, naming ``model.attention.state_bytes_per_layer``, when a state group's page (one
    state per page, as vLLM sizes pages) is what leaves a pool of ``slots`` without one block per
    KV cache group beside the null block; a pool short of the context is left to the caller."""
    groups, attention = config.kv_groups, config.model.attention
    if groups is None or attention is None or attention.state_bytes_per_layer is None:
        return
    b = groups.block_size_tokens
    if b <= config.cache.block_size_tokens or slots // b > len(groups.groups):
        return
    raise ValueError(
        f"model.attention.state_bytes_per_layer: a state of "
        f"{attention.state_bytes_per_layer:,} bytes per layer raises every KV cache group's "
        f"block from {config.cache.block_size_tokens} to {b:,} tokens (one page holds a state, "
        f"as vLLM sizes pages), and the pool holds {slots // b:,} such blocks "
        f"({_gib(slots * config.bytes_per_token)}, {where}), too few for one request's "
        f"{len(groups.groups):,} groups and the null block; lower it or raise the KV budget"
    )


def _budget_field(config: ConfigParts) -> str:
    """The field that sets the KV budget: the explicit one the user set (``kv_cache_gb`` is read
    as ``kv_cache_bytes``), else the derived budget's ``gpu_memory_utilization``."""
    cache = config.cache
    if cache.kv_cache_bytes is not None:
        return "cache.kv_cache_bytes"
    if cache.kv_cache_gib is not None:
        return "cache.kv_cache_gib"
    return "cache.gpu_memory_utilization"


def request_limit_tokens(config: ConfigParts, capacity_tokens: int) -> int:
    """Tokens one request can hold in an empty pool of ``capacity_tokens`` slots: a paged pool's
    whole blocks less vLLM v1's null block (block 0, which no request ever holds: vLLM
    ``BlockPool``), the whole pool otherwise (slab reservations are checked by
    ``check_pool_shape``). A paged pool without one usable block counts whole here: that is
    ``kvsim.config.sim``'s block-size error, which names the block size."""
    cache = config.cache
    if maps_virtual_pages(cache.allocator):
        page = _vattention_page(config)
        if page is None:
            return capacity_tokens  # kvsim.config.sim's page-size error names the page
        tokens_per_page, tensor_bytes = page
        rows = capacity_tokens * config.bytes_per_token // (cache.page_size_bytes * tensor_bytes)
        return rows * tokens_per_page if rows > 0 else capacity_tokens
    if cache.allocator not in PAGED_ALLOCATORS:
        return capacity_tokens
    groups = config.kv_groups
    if groups is not None:  # hybrid KV cache groups: the blocks a request needs in every group
        usable = capacity_tokens // groups.block_size_tokens - 1
        batched = config.engine_args.max_in_flight_tokens  # (the admission gate's)
        # (sliding groups alone hold a request of any length: the cap is then the answer)
        cap = max(capacity_tokens, config.max_model_len)
        return max_request_tokens(groups, usable, batched, cap)
    blocks = capacity_tokens // cache.block_size_tokens - config.engine_args.reserve_null_block
    return blocks * cache.block_size_tokens if blocks > 0 else capacity_tokens


def startup_capacity(config: ConfigParts) -> tuple[int, float] | None:
    """What vLLM v1 logs at startup for the pool: ``(kv_cache_size_tokens,
    kv_cache_max_concurrency)``, "GPU KV cache size: N tokens, Maximum concurrency for
    max_model_len tokens per request: X x" (vLLM 0.34.0 ``update_kv_cache_capacity``,
    ``vllm/v1/core/kv_cache_utils.py``): the concurrency is the pool's blocks (the null block
    among them) over the blocks vLLM counts for one ``max_model_len`` request in every group
    (``request_blocks(startup=True)`` with ``EngineArgs.max_in_flight_tokens``;
    ``cdiv(max_model_len, block_size)`` without groups), the size that times ``max_model_len``,
    rounded down. ``None`` for a pool that is not paged, under ``vllm-v0`` (which logs its
    block count only: ``num_gpu_blocks``), or with state layers, whose count in vLLM depends on
    its mamba cache mode and speculative blocks, which kvsim does not model (one block a
    request: ``kvsim.config.layers``)."""
    cache = config.cache
    if cache.allocator not in PAGED_ALLOCATORS or config.engine_args.engine != "vllm-v1":
        return None
    groups = config.kv_groups
    if groups is not None and "state" in groups.kinds:
        return None
    size = cache.block_size_tokens if groups is None else groups.block_size_tokens
    num_blocks = config.capacity_tokens // size
    length = config.max_model_len
    if groups is None:
        per_request = -(-length // size)
    else:
        in_flight = config.engine_args.max_in_flight_tokens
        per_request = request_blocks(groups, length, in_flight, startup=True)
    concurrency = num_blocks / per_request
    return int(concurrency * length), concurrency


def _vattention_page(config: ConfigParts) -> tuple[int, int] | None:
    """``(tokens_per_page, num_kv_tensors)`` of a vAttention pool, ``None`` when its page holds
    no token (``kvsim.config.allocators.vattention_pages``)."""
    tensors = config.num_kv_tensors
    try:
        tokens_per_page, _ = vattention_pages(
            0, config.bytes_per_token, config.cache.page_size_bytes, tensors
        )
    except ValueError:
        return None
    return tokens_per_page, tensors


def pool_tokens_for_request(config: ConfigParts, num_tokens: int) -> int:
    """The smallest pool, in slots, whose ``request_limit_tokens`` is at least ``num_tokens``."""
    cache = config.cache
    page = _vattention_page(config) if maps_virtual_pages(cache.allocator) else None
    if page is not None:  # whole page rows, each page_size bytes per tensor
        tokens_per_page, tensors = page
        row_bytes = cache.page_size_bytes * tensors
        return -((-(num_tokens // -tokens_per_page) * row_bytes) // -config.bytes_per_token)
    if cache.allocator not in PAGED_ALLOCATORS:
        return num_tokens
    groups = config.kv_groups
    if groups is not None:
        return _group_pool_tokens(config, groups, num_tokens)
    b = cache.block_size_tokens
    return (-(num_tokens // -b) + config.engine_args.reserve_null_block) * b


def _group_pool_tokens(config: ConfigParts, groups: KVCacheGroups, num_tokens: int) -> int:
    """Slots of the smallest pool of KV cache groups ``groups`` that holds one request of
    ``num_tokens`` tokens: its blocks in every group and the null block
    (``request_limit_tokens``)."""
    batched = config.engine_args.max_in_flight_tokens
    return (request_blocks(groups, num_tokens, batched) + 1) * groups.block_size_tokens


def _limit_note(config: ConfigParts, limit: int) -> str:
    """How a paged pool's request limit falls short of its slots (empty when it does not)."""
    if limit == config.capacity_tokens:
        return ""
    if maps_virtual_pages(config.cache.allocator):
        return f", of which whole pages of {_gib(config.cache.page_size_bytes)} hold {limit:,}"
    null = "; block 0 is vLLM v1's null block" if config.engine_args.reserve_null_block else ""
    groups = config.kv_groups
    if groups is not None:  # every KV cache group takes its blocks from the one pool
        b, n = groups.block_size_tokens, len(groups.groups)
        serve = f"serve all {n:,} KV cache groups" if n > 1 else "serve its one KV cache group"
        return (
            f", of which one request can hold {limit:,} (the pool's "
            f"{config.capacity_tokens // b:,} blocks of {b} tokens {serve}{null})"
        )
    b = config.cache.block_size_tokens
    return f", of which requests can hold {limit:,} ({limit // b:,} blocks of {b} tokens{null})"


def _holds_a_block(config: ConfigParts) -> bool:
    """A paged pool has a block beside vLLM v1's null block, a vAttention pool a row of pages
    (``request_limit_tokens`` counts a pool without one whole, so a shorter ``max_model_len``
    would not help it)."""
    if maps_virtual_pages(config.cache.allocator):
        page = _vattention_page(config)  # (None: kvsim.config.sim's page-size error)
        return page is None or _page_rows(config, config.cache.page_size_bytes) > 0
    if config.cache.allocator not in PAGED_ALLOCATORS:
        return True
    groups = config.kv_groups
    size = config.cache.block_size_tokens if groups is None else groups.block_size_tokens
    return config.capacity_tokens // size > config.engine_args.reserve_null_block


def _whole_units(config: ConfigParts) -> str:
    """What a request's tokens are held in: whole page rows (vAttention) or whole blocks (of
    the hybrid KV cache groups' block size where the pool has groups: a state layer raises it
    past ``cache.block_size_tokens``)."""
    page = _vattention_page(config) if maps_virtual_pages(config.cache.allocator) else None
    if page is not None:
        return f"whole rows of {page[1]:,} pages, {page[0]:,} tokens a row"
    null = ", less vLLM v1's null block" if config.engine_args.reserve_null_block else ""
    groups = config.kv_groups
    if groups is None:
        return f"whole blocks of {config.cache.block_size_tokens}{null}"
    n = len(groups.groups)  # each takes its blocks of the request from the one pool
    serve = f"serving all {n:,} KV cache groups" if n > 1 else "serving its one KV cache group"
    return f"whole blocks of {groups.block_size_tokens} {serve}{null}"


def _page_rows(config: ConfigParts, page_size_bytes: int) -> int:
    """Rows of ``num_kv_tensors`` pages of ``page_size_bytes`` the vAttention pool holds
    (``vattention_pages``; 0 where such a page holds no token)."""
    try:
        _, rows = vattention_pages(
            config.kv_cache_bytes, config.bytes_per_token, page_size_bytes, config.num_kv_tensors
        )
    except ValueError:
        return 0
    return rows


def _no_row_advice(config: ConfigParts) -> str:
    """What makes a pool without a usable block or page row hold a request: for vAttention, the
    largest smaller page size (of ``VATTENTION_PAGE_SIZES``) that gives a row, with the
    ``max_model_len`` its rows then hold, in one suggestion; else a larger KV budget."""
    if not maps_virtual_pages(config.cache.allocator) or _vattention_page(config) is None:
        return "raise the KV budget"
    tensors, per_token = config.num_kv_tensors, config.bytes_per_token
    page = config.cache.page_size_bytes
    head = (
        f"the pool holds no row of {tensors:,} pages of {page:,} bytes (a vAttention request "
        "maps a page in every KV tensor at once)"
    )
    for size in sorted(VATTENTION_PAGE_SIZES, reverse=True):
        if size >= page or _page_rows(config, size) < 1:
            continue
        tokens_per_page, rows = vattention_pages(config.kv_cache_bytes, per_token, size, tensors)
        limit = tokens_per_page * rows
        if limit < MIN_MAX_MODEL_LEN:
            continue
        shorter = (
            f" and scheduler.max_model_len to at most {limit:,}"
            if limit < config.max_model_len
            else ""
        )
        return f"{head}; lower cache.page_size_bytes to {size:,}{shorter}, or raise the KV budget"
    return f"{head}; raise the KV budget"


def _drafter_layers_note(config: ConfigParts) -> str:
    """Names a speculative drafter's KV layers among a token's bytes (empty without them)."""
    n = config.draft_kv_layers
    if not n:
        return ""
    layers = "layer" if n == 1 else "layers"
    return (
        f" (a token's {config.bytes_per_token:,} bytes include the drafter's {n:,} KV {layers}, "
        "speculative.draft_num_kv_layers)"
    )


def _derived_budget_message(config: ConfigParts, where: str, usable: float, left: float) -> str:
    cache = config.cache
    weights = config.weight_bytes_per_gpu
    drafter = (
        f" (a drafter's {config.draft_params:,} parameters included)" if config.draft_params else ""
    )
    head = (  # the field that sets this budget first, as every config error names its field
        f"cache.gpu_memory_utilization = {cache.gpu_memory_utilization:g} ({where}): "
        f"{cache.gpu_memory_utilization:g} x {_gib(config.gpu.memory_bytes)} = "
        f"{_gib(usable)} usable per GPU; weights take {_gib(weights)}{drafter} and activation "
        f"headroom {_gib(cache.activation_headroom_bytes)}, leaving {_gib(left)} for KV"
    )
    need_kv = least_pool_bytes(config)  # whole blocks, a slab's shape
    if weights > usable:
        short = f"the weights alone are short by {_gib(weights - usable)}"
    elif weights + cache.activation_headroom_bytes > usable:
        short = (
            "weights plus activation headroom are short by "
            f"{_gib(weights + cache.activation_headroom_bytes - usable)}"
        )
    else:
        slots = max(0, int(left // config.bytes_per_token))
        fits = request_limit_tokens(config, slots)
        short = (
            f"KV is short by {_gib(need_kv - left)} for one max_model_len = "
            f"{config.max_model_len:,} request{_shape_note(config)}{_drafter_layers_note(config)}"
            if config.bytes_per_token * config.max_model_len > left  # (short of the tokens)
            else f"its {slots:,} slots hold one request of at most {fits:,} tokens, fewer than "
            f"max_model_len = {config.max_model_len:,} ({_whole_units(config)})"
        ) + f"; {_context_advice(config, fits)}"
    rooms = _room_beside_weights(config)
    headroom = cache.activation_headroom_bytes
    tp = next((size for size, room in rooms if room >= headroom), None)
    if tp is not None and tp > config.parallel.tensor_parallel_size:
        advice = f"; parallel.tensor_parallel_size = {tp} fits"
    else:
        options = _budget_options(config, weights, usable, need_kv)
        if tp is None and (both := _headroom_and_tp_advice(config, rooms)) is not None:
            options.insert(0, both)
        advice = "; " + _either(options)
    return f"{head}: {short}{advice}"


def _budget_options(config: ConfigParts, weights: int, usable: float, need_kv: int) -> list[str]:
    """What would make room for the smallest pool that holds one ``max_model_len`` request
    (``need_kv`` bytes: ``least_pool_tokens``) beside the weights on this GPU: a higher
    utilisation where weights, headroom and that pool fit in its memory; less headroom where
    weights and pool fit the usable part; a KV budget of one's own (checked against the whole
    GPU, weights included) where weights and pool fit in it."""
    memory, headroom = config.gpu.memory_bytes, config.cache.activation_headroom_bytes
    options = []
    if weights + headroom + need_kv <= memory:
        options.append("raise cache.gpu_memory_utilization")
    if headroom and weights + need_kv <= usable:
        options.append("lower cache.activation_headroom_bytes")
    if weights + need_kv <= memory:
        options.append("set cache.kv_cache_gib")
    options.append("use a larger GPU")
    return options


def _either(options: list[str]) -> str:
    """``"a"``, ``"a or b"``, ``"a, b, or c"``."""
    if len(options) <= 2:
        return " or ".join(options)
    return ", ".join(options[:-1]) + f", or {options[-1]}"


def _room_beside_weights(config: ConfigParts) -> list[tuple[int, float]]:
    """``(tp, bytes)`` for each tensor-parallel size up to ``MAX_SUGGESTED_TP`` the model splits
    by: the usable memory per GPU less its weights and the KV pool that holds one
    ``max_model_len`` request (``least_pool_tokens``: whole blocks, the null block, a slab
    reservation's largest slab; a vAttention pool's page rows as at the config's own size), what
    is left for activation headroom (negative where even none leaves room)."""
    model, cache = config.model, config.cache
    slots = least_pool_tokens(config)
    hybrid = config.kv_groups is not None
    rooms = []
    tp = 1
    while tp <= MAX_SUGGESTED_TP:
        heads = model.num_kv_heads
        if model.num_attention_heads % tp == 0 and (heads % tp == 0 or tp % heads == 0):
            parallel = ParallelConfig(
                tensor_parallel_size=tp,
                pipeline_parallel_size=config.parallel.pipeline_parallel_size,
            )
            if hybrid:  # a slot of one group, as many slots as the groups' blocks hold
                groups = model_kv_groups(
                    model,
                    parallel,
                    cache.kv_cache_dtype,
                    cache.block_size_tokens,
                    config.draft_kv_layers,
                    config.speculative.num_speculative_tokens,
                )
                pool = groups.slot_bytes * _group_pool_tokens(config, groups, config.max_model_len)
            else:
                per_token = kv_bytes_per_token_per_gpu(
                    model, parallel, cache.kv_cache_dtype, config.draft_kv_layers
                )
                pool = per_token * slots
            room = (
                cache.gpu_memory_utilization * config.gpu.memory_bytes
                - weight_bytes_per_gpu(model, parallel, config.draft_params)
                - pool
            )
            rooms.append((tp, room))
        tp *= 2
    return rooms


def _headroom_and_tp_advice(config: ConfigParts, rooms: list[tuple[int, float]]) -> str | None:
    """Where only the activation headroom keeps every tensor-parallel size from holding one
    ``max_model_len`` request (and a larger one than the config's is needed): the smallest
    size that fits with less headroom, and at most how much (``rooms``:
    ``_room_beside_weights``); else ``None``. Paged pools only: one request's pool is then the
    same whole blocks at every size, where a vAttention page row or a slab's shape depends on
    more than the budget."""
    if config.cache.allocator not in PAGED_ALLOCATORS:
        return None
    fits = [(tp, room) for tp, room in rooms if room >= 0]
    if not fits or fits[0][0] <= config.parallel.tensor_parallel_size:
        return None  # (less headroom at this size is ``_budget_options``' advice)
    tp, room = fits[0]
    return (
        f"lower cache.activation_headroom_bytes to at most {int(room):,} ({_gib(room)}) and set "
        f"parallel.tensor_parallel_size = {tp}"
    )


def check_pool_shape(config: ConfigParts) -> None:
    """The pool's blocks or slabs can hold the requests the config allows, and no more blocks than
    kvsim can track.

    - paged: at most ``kvsim.base.limits.MAX_POOL_BLOCKS`` blocks (a block table entry each).
    - contiguous slabs: the largest slab the reservation asks for (``max_model_len``, or the
      model's trained context under ``full_context``) fits the pool.
    - buddy: that slab, rounded up to its power-of-two chunk, fits the largest chunk the empty
      pool is carved into (chunks reach ``next_power_of_2(max_model_len)`` at most).

    Raises:
        ValueError: naming the field to change, the pool (GPU, model) and the numbers.
    """
    cache = config.cache
    where = f"{config.model.name} on {config.gpu.name}"
    capacity = config.capacity_tokens
    if cache.allocator in PAGED_ALLOCATORS:
        blocks = capacity // cache.block_size_tokens
        if blocks > MAX_POOL_BLOCKS:
            raise ValueError(
                f"cache.block_size_tokens: the {capacity:,}-slot KV pool ({where}, "
                f"{_gib(config.kv_cache_bytes)} per GPU) makes {blocks:,} blocks of "
                f"{cache.block_size_tokens} tokens, more than the {MAX_POOL_BLOCKS:,} kvsim "
                "tracks; raise block_size_tokens or lower the KV budget"
            )
        return
    page = _vattention_page(config) if maps_virtual_pages(cache.allocator) else None
    if page is not None:
        rows = capacity * config.bytes_per_token // (cache.page_size_bytes * page[1])
        if rows > MAX_POOL_BLOCKS:
            raise ValueError(
                f"cache.page_size_bytes: the {_gib(config.kv_cache_bytes)} KV pool ({where}) "
                f"makes {rows:,} rows of {cache.page_size_bytes:,}-byte pages, more than the "
                f"{MAX_POOL_BLOCKS:,} kvsim tracks; raise page_size_bytes or lower the KV budget"
            )
        return
    if cache.allocator not in SLAB_ALLOCATORS:
        return
    slab = _largest_slab(config)
    what = (
        f"reservation 'full_context' reserves {config.model.name}'s trained context of "
        f"{slab:,} tokens per request"
        if _reserves_trained_context(config)
        else f"one max_model_len = {slab:,} request takes a {slab:,}-slot slab"
    )
    if slab > capacity:
        fits = _fits_beside_weights(config, least_pool_bytes(config))
        raise ValueError(
            f"cache.reservation: {what}, more than the {capacity:,}-slot pool ({where}); "
            "choose another reservation" + (" or raise the KV budget" if fits else "")
        )
    if cache.allocator in POWER_OF_TWO_SLABS:
        _check_buddy(config, slab, what, where)


def _largest_slab(config: ConfigParts) -> int:
    """Slots of the largest slab a slab allocator's reservation asks for: ``max_model_len``, or
    the model's trained context under ``full_context``."""
    if _reserves_trained_context(config):
        return config.model.max_position_embeddings
    return config.max_model_len


def least_pool_tokens(config: ConfigParts) -> int:
    """The smallest pool, in slots, that holds one ``max_model_len`` request and whose shape
    ``check_pool_shape`` accepts: ``pool_tokens_for_request``'s, or a slab allocator's largest
    slab (``_largest_slab``), buddy's rounded up to its power-of-two chunk (which
    ``check_buddy_reach`` keeps within the chunks buddy carves)."""
    need = pool_tokens_for_request(config, config.max_model_len)
    if config.cache.allocator not in SLAB_ALLOCATORS:
        return need
    slab = _largest_slab(config)
    if config.cache.allocator in POWER_OF_TWO_SLABS:
        slab = next_power_of_2(slab)
    return max(need, slab)


def least_pool_bytes(config: ConfigParts) -> int:
    """``least_pool_tokens`` in bytes of KV per GPU."""
    return least_pool_tokens(config) * config.bytes_per_token


def check_buddy_reach(config: ConfigParts) -> None:
    """Buddy carves its pool into chunks of at most ``next_power_of_2(max_model_len)`` slots, so
    a ``full_context`` reservation of a longer trained context fits no pool of any size: checked
    before the budget, whose advice (a larger TP or GPU) would not help.

    Raises:
        ValueError: naming ``cache.reservation``, the chunk and the largest one buddy carves.
    """
    if config.cache.allocator not in POWER_OF_TWO_SLABS:
        return
    slab = _largest_slab(config)
    chunk, max_chunk = next_power_of_2(slab), next_power_of_2(config.max_model_len)
    if chunk <= max_chunk:
        return
    raise ValueError(
        f"cache.reservation: 'full_context' reserves {config.model.name}'s trained context of "
        f"{slab:,} tokens per request, a {chunk:,}-slot power-of-two chunk, but buddy carves "
        f"chunks of at most next_power_of_2(max_model_len) = {max_chunk:,} slots, whatever the "
        f"pool's size; choose another reservation or raise scheduler.max_model_len to {slab:,}"
    )


def _check_buddy(config: ConfigParts, slab: int, what: str, where: str) -> None:
    capacity = config.capacity_tokens
    chunk = next_power_of_2(slab)  # (within buddy's reach: check_buddy_reach)
    largest = prev_power_of_2(capacity)  # the empty pool's first chunk
    if chunk <= largest:
        return
    budget = chunk * config.bytes_per_token
    # (the trained context's chunk does not shrink with max_model_len; another reservation's
    # chunk is max_model_len's)
    other = f"lower scheduler.max_model_len to {largest:,}"
    if _reserves_trained_context(config):
        other = f"choose another reservation and {other}"
    if not _fits_beside_weights(config, budget):  # (refused if followed)
        advice = (
            f"{other} (a pool of {chunk:,} slots, {_gib(budget)}, does not fit beside the "
            f"{_gib(config.weight_bytes_per_gpu)} of weights on one {config.gpu.name})"
        )
    else:
        advice = f"{other} or raise the KV budget to {chunk:,} slots ({_gib(budget)}) or more"
    raise ValueError(
        f"cache.allocator: 'buddy' rounds every slab up to a power-of-two chunk: {what}, "
        f"rounded up to a {chunk:,}-slot chunk, but the largest chunk of the {capacity:,}-slot "
        f"pool ({where}) is {largest:,} slots; {advice}"
    )
