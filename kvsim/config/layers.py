"""A hybrid model's layer kinds and vLLM v1's KV cache groups over them.

Some models mix layer kinds: full attention, sliding-window attention (Gemma 2/3, gpt-oss, Mistral
with a window) and linear-attention / state-space layers that keep one constant state per request
(Qwen3-Next, Jamba, Nemotron-H). vLLM v1's hybrid KV cache manager splits the layers into *KV cache
groups* of equal layer counts that share one block pool with one page size
(``vllm/v1/core/kv_cache_utils.py``, ``_get_kv_cache_groups_uniform_page_size`` and
``get_kv_cache_config_from_groups``):

    group size g = fewest layers of any kind, or the most when every kind has < 1.5x the fewest
    groups of a kind = cdiv(layers of that kind, g)      (the last group padded to g layers)
    one block      = g layers x block_size tokens x per-layer KV bytes per token
    num_blocks     = KV bytes // one block

e.g. Gemma-3-27B: 52 sliding + 10 full layers -> g = 10, 6 sliding groups (8 padding layers)
+ 1 full group, 7 groups of 10 layers. A state layer's page is its whole state; vLLM raises the
attention block size to the smallest multiple of ``max(16, block_size)`` tokens whose page holds
it (``vllm/platforms/interface.py``, ``_align_hybrid_block_size``: ``state_block_size``).
``hybrid_kv_cache = false`` treats every attention layer as full attention, as vLLM's
``--disable-hybrid-kv-cache-manager`` does (``unify_hybrid_kv_cache_specs``); vLLM cannot do that
for state layers, nor can kvsim.

In kvsim a *slot* of a hybrid pool is one token of one group (``g`` layers), so a pool's
``bytes_per_token`` is ``g`` layers' KV and ``capacity_tokens`` is ``num_blocks * block_size``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kvsim.base.limits import (
    MAX_CONTEXT_TOKENS,
    MAX_MODEL_LAYERS,
    is_int_at_least,
    refuse_coerced_scalars,
)
from kvsim.base.say_once import warn_once
from kvsim.base.units import cdiv

logger = logging.getLogger(__name__)

GroupKind = Literal["full", "sliding", "state"]
MAMBA_BLOCK_ALIGN_TOKENS = 16  # FlashAttention's smallest kernel block: the raised size's unit


class AttentionLayers(BaseModel):
    """Which of a model's layers are not full attention (``model.attention`` in a config).

    Attributes:
        num_sliding_layers: layers attending to the last ``sliding_window_tokens`` tokens only.
        sliding_window_tokens: the window, tokens (Hugging Face ``sliding_window``).
        num_state_layers: linear-attention / state-space layers: no per-token KV, one constant
            state per request.
        state_bytes_per_layer: one request's state in one state layer, bytes (conv + SSM state).
        hybrid_kv_cache: use vLLM's hybrid KV cache groups; ``False`` treats every attention
            layer as full attention (vLLM ``--disable-hybrid-kv-cache-manager``).
        kind_order: the kinds of layer in the order of each one's first layer ("full",
            "sliding", "state"): vLLM forms the KV cache groups in the order the layers register
            (``_get_kv_cache_groups_uniform_page_size``), so the groups of the first layer's
            kind come first (Gemma-3's layer 0 slides: its sliding groups, then the full one).
            ``None``: full, then sliding, then state.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    num_sliding_layers: int = Field(default=0, ge=0, le=MAX_MODEL_LAYERS)
    sliding_window_tokens: int | None = Field(default=None, ge=1, le=MAX_CONTEXT_TOKENS)
    num_state_layers: int = Field(default=0, ge=0, le=MAX_MODEL_LAYERS)
    state_bytes_per_layer: int | None = Field(default=None, ge=1, le=2**40)
    hybrid_kv_cache: bool = True
    kind_order: tuple[GroupKind, ...] | None = Field(default=None, min_length=1, max_length=3)

    @model_validator(mode="before")
    @classmethod
    def _no_coerced_scalars(cls, data: Any) -> Any:
        return refuse_coerced_scalars(cls.model_fields, data)

    @model_validator(mode="after")
    def _paired(self) -> AttentionLayers:
        if (self.num_sliding_layers > 0) != (self.sliding_window_tokens is not None):
            raise ValueError(
                "model.attention: num_sliding_layers and sliding_window_tokens go together, got "
                f"{self.num_sliding_layers} and {self.sliding_window_tokens}"
            )
        if (self.num_state_layers > 0) != (self.state_bytes_per_layer is not None):
            raise ValueError(
                "model.attention: num_state_layers and state_bytes_per_layer go together, got "
                f"{self.num_state_layers} and {self.state_bytes_per_layer}"
            )
        if self.kind_order is not None:
            if len(set(self.kind_order)) != len(self.kind_order):
                raise ValueError(
                    "model.attention.kind_order: each kind once, in the order of its first "
                    f"layer, got {list(self.kind_order)}"
                )
            counts = {"full": 1, "sliding": self.num_sliding_layers, "state": self.num_state_layers}
            absent = [k for k in self.kind_order if not counts[k]]
            if absent:
                warn_once(
                    logger,
                    f"model.attention.kind_order: {absent} name layers the model does not have "
                    f"(num_sliding_layers {self.num_sliding_layers}, num_state_layers "
                    f"{self.num_state_layers}); the order of the others is kept",
                )
        if (
            "hybrid_kv_cache" in self.model_fields_set
            and not self.num_sliding_layers
            and not self.num_state_layers
        ):
            warn_once(
                logger,
                f"model.attention.hybrid_kv_cache = {str(self.hybrid_kv_cache).lower()} has no "
                "effect: the model has no sliding-window or state layers (every layer full "
                "attention, one KV cache group)",
            )
        if self.num_state_layers and not self.hybrid_kv_cache:
            raise ValueError(
                "model.attention.hybrid_kv_cache: false cannot treat "
                f"{self.num_state_layers} state layers as full attention (vLLM cannot either)"
            )
        return self


@dataclass(frozen=True, slots=True)
class KVCacheGroup:
    """One KV cache group: ``num_layers`` layers of one kind sharing a block table.

    Attributes:
        kind: ``"full"``, ``"sliding"`` or ``"state"``.
        num_real_layers: layers of the model in it (the rest of the group size is padding).
        sliding_window_tokens: the window of a sliding group, else ``None``.
    """

    kind: GroupKind
    num_real_layers: int
    sliding_window_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class KVCacheGroups:
    """vLLM's KV cache groups of a model on one GPU (see the module docstring).

    Attributes:
        groups: in vLLM's order (the kinds in the order of their first layers, ``kind_order``).
        layers_per_group: ``g``, layers (real or padding) of every group.
        block_size_tokens: tokens per block (raised for a state group's page).
        layer_bytes_per_token: KV bytes of one token in one attention layer.
        state_blocks_per_request: blocks a state group holds for one request: its state, and
            under speculative decoding one more per draft position (vLLM 0.34.0
            ``MambaSpec.num_speculative_blocks = num_speculative_tokens``,
            ``vllm/model_executor/layers/mamba/abstract.py``; ``MambaManager`` adds them in
            ``mamba_cache_mode`` "none", ``vllm/v1/core/single_type_kv_cache_manager.py``).
    """

    groups: tuple[KVCacheGroup, ...]
    layers_per_group: int
    block_size_tokens: int
    layer_bytes_per_token: int
    state_blocks_per_request: int = 1

    @property
    def slot_bytes(self) -> int:
        """Bytes of one slot: one token in every layer of one group."""
        return self.layers_per_group * self.layer_bytes_per_token

    @property
    def block_bytes(self) -> int:
        """Bytes of one block of the pool (vLLM ``page_size_bytes * group_size``)."""
        return self.slot_bytes * self.block_size_tokens

    @property
    def attention_bytes_per_token(self) -> int:
        """KV bytes of one token in every real attention layer (full and sliding; no padding
        layer, no state): what computing the token's KV writes, once in every layer."""
        layers = sum(g.num_real_layers for g in self.groups if g.kind != "state")
        return layers * self.layer_bytes_per_token

    @property
    def num_padding_layers(self) -> int:
        return sum(self.layers_per_group - g.num_real_layers for g in self.groups)

    @property
    def kinds(self) -> tuple[GroupKind, ...]:
        return tuple(g.kind for g in self.groups)


def vllm_group_size(layer_counts: list[int]) -> int:
    """Layers per KV cache group from the layer count of each kind (vLLM
    ``_get_kv_cache_groups_uniform_page_size``): the fewest, unless the most is < 1.5x it."""
    fewest, most = min(layer_counts), max(layer_counts)
    return most if most < fewest * 1.5 else fewest


def state_block_size(block_size_tokens: int, state_bytes: int, layer_bytes_per_token: int) -> int:
    """The attention block size vLLM 0.34.0 uses beside a state layer
    (``Platform._align_hybrid_block_size``, ``vllm/platforms/interface.py``): the smallest
    multiple of ``a = max(16, block_size_tokens)`` tokens (FlashAttention's smallest kernel
    block, or the configured block if larger) whose page holds ``state_bytes``, rounded up to
    a multiple of 16, and never below the configured block size."""
    align = max(MAMBA_BLOCK_ALIGN_TOKENS, block_size_tokens)
    tokens = align * cdiv(state_bytes, align * layer_bytes_per_token)
    tokens = cdiv(tokens, MAMBA_BLOCK_ALIGN_TOKENS) * MAMBA_BLOCK_ALIGN_TOKENS
    return max(block_size_tokens, tokens)


def kv_cache_groups(
    num_layers: int,
    attention: AttentionLayers,
    layer_bytes_per_token: int,
    block_size_tokens: int,
    tensor_parallel_size: int = 1,
    num_draft_layers: int = 0,
    num_speculative_tokens: int = 0,
) -> KVCacheGroups:
    """vLLM's KV cache groups of a model (one GPU, no pipeline split).

    Args:
        num_layers: all layers of the model.
        attention: which of them slide or keep a state, and the order of the kinds
            (``AttentionLayers.kind_order``: the groups' order).
        layer_bytes_per_token: KV bytes of one token in one attention layer on one GPU.
        block_size_tokens: the configured block size, tokens.
        tensor_parallel_size: GPUs a state is split over (by heads, as the KV is).
        num_draft_layers: a speculative drafter's full-attention layers; their spec equals the
            target's full layers' (vLLM's ``is_draft`` is left out of spec equality), so they
            join the full-attention kind.
        num_speculative_tokens: drafts a step under speculative decoding (0: none); a state
            group holds a block more per draft (``KVCacheGroups.state_blocks_per_request``).

    Raises:
        ValueError: more sliding and state layers than the model has.
    """
    sliding, state = attention.num_sliding_layers, attention.num_state_layers
    full = num_layers - sliding - state
    if full < 0:
        raise ValueError(
            f"model.attention: {sliding} sliding + {state} state layers exceed num_layers "
            f"({num_layers})"
        )
    if not attention.hybrid_kv_cache:  # every attention layer full: one group of all of them
        kinds: list[tuple[GroupKind, int, int | None]] = [
            ("full", full + sliding + num_draft_layers, None)
        ]
    else:
        counts: dict[GroupKind, tuple[int, int | None]] = {
            "full": (full, None),
            "sliding": (sliding, attention.sliding_window_tokens),
            "state": (state, None),
        }
        order = [*(attention.kind_order or ()), "full", "sliding", "state"]
        kinds = [(k, *counts[k]) for k in dict.fromkeys(order) if counts[k][0] > 0]
        if num_draft_layers:  # (a drafter's layers register after the target's)
            if full:
                kinds = [(k, n + num_draft_layers if k == "full" else n, w) for k, n, w in kinds]
            else:
                kinds.append(("full", num_draft_layers, None))
    size = vllm_group_size([count for _, count, _ in kinds])
    groups: list[KVCacheGroup] = []
    for kind, count, window in kinds:
        num = cdiv(count, size)
        # vLLM deals layers round-robin (layers[i::num]): group i gets every num-th layer
        groups += [KVCacheGroup(kind, len(range(i, count, num)), window) for i in range(num)]
    block = block_size_tokens
    if state and attention.state_bytes_per_layer is not None:
        state_bytes = cdiv(attention.state_bytes_per_layer, tensor_parallel_size)
        block = state_block_size(block, state_bytes, layer_bytes_per_token)
    state_blocks = 1 + num_speculative_tokens if state else 1
    return KVCacheGroups(tuple(groups), size, block, layer_bytes_per_token, state_blocks)


def attention_from_hf(
    data: dict[str, Any],
    num_layers: int,
    dtype_bytes: int,
    where: Callable[[str], str] = lambda key: "hf_config",
) -> dict[str, Any]:
    """``model.attention`` fields from a Hugging Face ``config.json`` (empty: every layer full).

    The layer kinds are read as transformers builds them (each model's ``*Config``, whose
    ``layer_types`` vLLM reads):

    - ``layer_types`` when present: one entry a layer (``len == num_hidden_layers``), each
      ``"full_attention"`` (or the legacy ``"attention"``), ``"sliding_attention"`` or
      ``"linear_attention"`` (gpt-oss, Gemma-3, Qwen3-Next); a sliding layer without a window
      (``sliding_window`` null, or ``use_sliding_window`` false) is full attention, with a
      warning;
    - the kinds' order (``kind_order``) as their first layers come;
    - else by ``model_type``: Gemma-2 alternates sliding and full, the even layers sliding
      (``Gemma2Config``); Gemma-3 makes layer ``i`` global when ``(i + 1) %
      sliding_window_pattern == 0`` (6 when absent: ``Gemma3TextConfig``), so a pattern of 1 is
      every layer global; Qwen2/Qwen3 (and their MoE) have no window unless
      ``use_sliding_window``, then the layers from ``max_window_layers`` (28 when absent) on
      slide (``Qwen2Config``); any other model with a ``sliding_window`` has it on every layer
      unless ``use_sliding_window`` is false (Mistral-7B-v0.1). A Gemma model without a window
      is every layer full, with a warning.

    A linear-attention layer's state is Qwen3-Next's Gated DeltaNet: a conv state of
    ``(linear_conv_kernel_dim - 1) x (2 x linear_num_key_heads x linear_key_head_dim +
    linear_num_value_heads x linear_value_head_dim)`` values and an SSM state of
    ``linear_num_value_heads x linear_key_head_dim x linear_value_head_dim`` values, in the
    model's dtype (vLLM ``MambaStateShapeCalculator``).

    Args:
        where: names a key's place in the file for messages (``config.json line 7``).

    Raises:
        ValueError: a ``sliding_window`` that is not an integer >= 1; ``layer_types`` that is not
            a list of ``num_layers`` known kinds; a ``sliding_window_pattern`` or
            ``max_window_layers`` that is not an integer (>= 1, >= 0); a linear-attention model
            without the state's sizes. Each names the key, its place and the value.
    """
    window = data.get("sliding_window")
    model_type = str(data.get("model_type", ""))
    use = data.get("use_sliding_window")
    if use is False or (model_type in _WINDOW_OPT_IN and use is not True):
        window = None  # (whatever the file's sliding_window says)
    if window is not None and (not is_int_at_least(window, 1) or window > MAX_CONTEXT_TOKENS):
        raise ValueError(
            f"{where('sliding_window')}: sliding_window must be an integer from 1 to "
            f"{MAX_CONTEXT_TOKENS:,} (tokens) or null, got {window!r}"
        )
    kinds = data.get("layer_types")
    if kinds is not None:
        return _from_layer_types(data, kinds, num_layers, dtype_bytes, window, where)
    patterned = model_type in _PATTERNED or "sliding_window_pattern" in data
    # (its layers slide by pattern, gpt-oss's every other one: say they do not here)
    if window is None and (patterned or model_type == "gpt_oss"):
        warn_once(
            logger,
            "%s: a %s model's sliding layers have no window (sliding_window null, or "
            "use_sliding_window false): every layer full attention, as transformers builds them",
            where("sliding_window"),
            model_type or "sliding_window_pattern",
        )
    if window is None:
        return {}
    first: GroupKind = "sliding"  # layer 0's kind
    if model_type == "gemma2":
        sliding = num_layers - num_layers // 2
    elif patterned:
        pattern = _int_key(data, "sliding_window_pattern", 6, 1, where)
        sliding = num_layers - num_layers // pattern
        first = "sliding" if pattern > 1 else "full"
    elif model_type in _WINDOW_OPT_IN:
        sliding = max(0, num_layers - _int_key(data, "max_window_layers", 28, 0, where))
        first = "full" if sliding < num_layers else "sliding"
    else:
        sliding = num_layers
    if not sliding:
        return {}
    out: dict[str, Any] = {"num_sliding_layers": sliding, "sliding_window_tokens": window}
    if sliding < num_layers:
        out["kind_order"] = [first, "full" if first == "sliding" else "sliding"]
    return out


# model types whose layers slide by a fixed pattern (transformers' Gemma2Config, Gemma3TextConfig)
_PATTERNED = frozenset({"gemma2", "gemma3", "gemma3_text"})
# model types whose window is off unless use_sliding_window is true (transformers' Qwen2Config
# and Qwen3Config default it to false)
_WINDOW_OPT_IN = frozenset({"qwen2", "qwen2_moe", "qwen3", "qwen3_moe"})
_LAYER_KINDS = {
    "full_attention": "full",
    "attention": "full",  # (transformers' legacy name)
    "sliding_attention": "sliding",
    "linear_attention": "state",
}


def _int_key(
    data: dict[str, Any], key: str, default: int, minimum: int, where: Callable[[str], str]
) -> int:
    value = data.get(key, default)
    if value is None:
        return default
    if not is_int_at_least(value, minimum):
        raise ValueError(f"{where(key)}: {key} must be an integer >= {minimum}, got {value!r}")
    return value


def _from_layer_types(
    data: dict[str, Any],
    kinds: Any,
    num_layers: int,
    dtype_bytes: int,
    window: int | None,
    where: Callable[[str], str],
) -> dict[str, Any]:
    """``attention_from_hf`` for a file with ``layer_types``."""
    if not isinstance(kinds, list) or len(kinds) != num_layers:
        got = f"{len(kinds)} entries" if isinstance(kinds, list) else repr(kinds)
        raise ValueError(
            f"{where('layer_types')}: layer_types must be a list of one kind per layer "
            f"({num_layers}, num_hidden_layers), got {got}"
        )
    for i, kind in enumerate(kinds):
        if not isinstance(kind, str) or kind not in _LAYER_KINDS:  # (a list is unhashable)
            raise ValueError(
                f"{where('layer_types')}: layer_types[{i}] = {kind!r} is not a kind kvsim "
                f"models; expected one of {', '.join(map(repr, _LAYER_KINDS))}"
            )
    sliding = sum(1 for k in kinds if _LAYER_KINDS[k] == "sliding")
    linear = sum(1 for k in kinds if _LAYER_KINDS[k] == "state")
    out: dict[str, Any] = {}
    slides = sliding and window is not None  # (else its sliding layers are full attention)
    seen = [_LAYER_KINDS[k] if _LAYER_KINDS[k] != "sliding" or slides else "full" for k in kinds]
    order = list(dict.fromkeys(seen))
    if len(order) > 1:  # the groups' order: the kinds' first layers' (vLLM registers in order)
        out["kind_order"] = order
    if sliding and window is None:
        logger.warning(
            "%s: %d sliding_attention layers but no window (sliding_window null, or "
            "use_sliding_window false): full attention, as transformers builds them",
            where("layer_types"),
            sliding,
        )
    elif sliding:
        out.update(num_sliding_layers=sliding, sliding_window_tokens=window)
    if linear:
        out.update(
            num_state_layers=linear, state_bytes_per_layer=_gdn_state(data, dtype_bytes, where)
        )
    return out


def _gdn_state(data: dict[str, Any], dtype_bytes: int, where: Callable[[str], str]) -> int:
    """One Gated DeltaNet layer's state, bytes (see ``attention_from_hf``)."""
    keys = (
        "linear_conv_kernel_dim",
        "linear_num_key_heads",
        "linear_key_head_dim",
        "linear_num_value_heads",
        "linear_value_head_dim",
    )
    for key in keys:
        if not is_int_at_least(data.get(key), 1):
            raise ValueError(
                f"{where(key)}: linear_attention layers need {key} (an integer >= 1), got "
                f"{data.get(key)!r}"
            )
    kernel, nk, dk, nv, dv = (int(data[k]) for k in keys)
    conv = (kernel - 1) * (2 * nk * dk + nv * dv)
    return (conv + nv * dk * dv) * dtype_bytes


def max_request_tokens(
    groups: KVCacheGroups, usable_blocks: int, max_num_batched_tokens: int, cap_tokens: int
) -> int:
    """The longest request (tokens, whole blocks) whose KV fits ``usable_blocks`` blocks, as
    vLLM sizes a request's need per group (``vllm/v1/kv_cache_interface.py``,
    ``max_memory_usage_bytes``): a full group ``cdiv(L, B)`` blocks, a sliding group at most
    ``cdiv(W - 1 + max_num_batched_tokens, B) + 1`` (a step's chunk plus the window before it),
    a state group ``state_blocks_per_request``. ``cap_tokens`` bounds the answer when no full
    group limits it."""
    b = groups.block_size_tokens
    num_full = sum(1 for g in groups.groups if g.kind == "full")
    sliding = [g for g in groups.groups if g.kind == "sliding"]
    num_state = sum(1 for g in groups.groups if g.kind == "state")
    window = sliding[0].sliding_window_tokens or 0 if sliding else 0
    sliding_cap = cdiv(window - 1 + max_num_batched_tokens, b) + 1 if sliding else 0
    room = usable_blocks - num_state * groups.state_blocks_per_request
    if room <= 0:
        return 0
    per_block = num_full + len(sliding)  # while every group still grows with L
    blocks = room // per_block if per_block else cap_tokens // b
    if sliding and blocks > sliding_cap:
        if not num_full:
            return cap_tokens  # sliding groups alone: a request of any length fits
        blocks = (room - len(sliding) * sliding_cap) // num_full
    return min(blocks * b, cap_tokens)


def request_blocks(
    groups: KVCacheGroups, num_tokens: int, in_flight_tokens: int, *, startup: bool = False
) -> int:
    """Blocks one request of ``num_tokens`` tokens may need at once over every group, as vLLM's
    admission gate counts them (the sizes of ``max_request_tokens``): a full group
    ``cdiv(L, B)``, a sliding group that or its peak ``cdiv(min(W - 1 + in_flight_tokens, L),
    B) + 1`` if fewer (``max_admission_blocks_per_request``), a state group
    ``state_blocks_per_request``. ``startup``:
    as vLLM's startup counts a ``max_model_len`` request (``max_memory_usage_bytes``,
    ``vllm/v1/kv_cache_interface.py``, 0.34.0), a sliding group at its peak, a block more where
    ``cdiv(L, B) <= cdiv(W - 1 + in_flight_tokens, B)``."""
    b = groups.block_size_tokens
    total = 0
    for g in groups.groups:
        if g.kind == "full":
            total += cdiv(num_tokens, b)
        elif g.kind == "sliding":
            window = g.sliding_window_tokens or 0
            peak = cdiv(min(window - 1 + in_flight_tokens, num_tokens), b) + 1
            total += peak if startup else min(cdiv(num_tokens, b), peak)
        else:
            total += groups.state_blocks_per_request
    return total
