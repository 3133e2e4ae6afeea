"""The model, the GPU and how the model is split over GPUs: frozen, validated specs and KV sizes.

``ModelSpec.bytes_per_token`` is the whole model's KV per token. Under tensor parallelism of size
``tp`` and pipeline parallelism of size ``pp`` one GPU holds ``max(1, num_kv_heads // tp)`` KV heads
(heads are split across ranks, and replicated when ``tp`` exceeds them: vLLM
``ModelConfig.get_num_kv_heads``) of ``cdiv(num_layers, pp)`` layers (the largest stage of vLLM's
``get_pp_indices`` split; every rank gets the block count of the smallest, vLLM
``get_kv_cache_configs``), in the KV cache's dtype (``kv_cache_dtype``: "auto" is the model's dtype,
the fp8 variants 1 byte; vLLM ``STR_DTYPE_TO_TORCH_DTYPE``). An MLA model (``kv_lora_rank`` set)
caches one latent of ``kv_lora_rank + qk_rope_head_dim`` values per token per layer, which tensor
parallelism does not split (vLLM ``MLAAttentionSpec``; ``get_num_kv_heads`` returns 1 for MLA).
Models come from presets (``kvsim/data/models.toml``) or a Hugging Face ``config.json``
(``kvsim.config.hf``).
"""

from __future__ import annotations

import math
import tomllib
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from kvsim.base.limits import (
    MAX_CONTEXT_TOKENS,
    MAX_GPU_MEMORY_BYTES,
    MAX_HEAD_DIM,
    MAX_HW_PER_S,
    MAX_MODEL_HEADS,
    MAX_MODEL_LAYERS,
    MAX_MODEL_PARAMS,
    refuse_coerced_scalars,
)
from kvsim.base.names import preset_hint
from kvsim.base.units import cdiv
from kvsim.config.hf import check_file_heads, model_fields_from_hf
from kvsim.config.layers import AttentionLayers, KVCacheGroups, kv_cache_groups

_OPTIONAL_MODEL_FIELDS = (
    "kv_lora_rank",
    "qk_rope_head_dim",
    "vocab_size",
    "embedding_dim",
    "moe",
    "attention",
)
KvCacheDtype = Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"]
FP8_KV_DTYPES = ("fp8", "fp8_e4m3", "fp8_e5m2")


class Frozen(BaseModel):
    """Base of every config section: unknown keys are errors, instances are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_coerced_scalars(cls, data: Any) -> Any:
        return refuse_coerced_scalars(cls.model_fields, data)


@cache
def preset_table(kind: str) -> dict[str, dict[str, Any]]:
    """The ``kvsim/data/{kind}.toml`` presets (``"models"``, ``"gpus"``, ``"costs"``) by name."""
    text = resources.files("kvsim.data").joinpath(f"{kind}.toml").read_text()
    return tomllib.loads(text)


def resolve_preset(kind: str, value: Any) -> Any:
    """Turn a preset name (``"opt-13b"``) or ``{preset = "opt-13b", ...}`` into field values
    (a table given for a table field, such as ``attention``, overrides its keys one by one)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):  # (--set gpu=4090)
        raise ValueError(
            f"a {kind[:-1]} preset's name or a table, got the number {value!r}"
            + preset_hint(kind, str(value), preset_table(kind))
        )
    if isinstance(value, str):
        value = {"preset": value}
    if isinstance(value, dict) and "preset" in value:
        presets = preset_table(kind)
        name = str(value["preset"]).lower()
        if name not in presets:
            raise ValueError(
                f"unknown {kind[:-1]} preset {name!r}; choose from {sorted(presets)}"
                + preset_hint(kind, name, presets)
            )
        rest = {k: v for k, v in value.items() if k != "preset"}
        return overlaid({"name": name, **presets[name]}, rest)
    return value


def overlaid(fields: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """``fields`` (a preset's, or a config.json's) with ``given`` over them: a table given for
    a table field (``attention``, ``moe``) overrides its keys one by one, anything else whole.

    Raises:
        ValueError: ``given`` sets such a table field to null (``--set model.attention=null``),
            which would silently drop what the model has (its sliding-window or state layers,
            its experts): the message names the field and the way to say what is meant.
    """
    out = dict(fields)
    for key, value in given.items():
        known = out.get(key)
        if value is None and isinstance(known, dict):
            name = fields.get("name", "the model")
            way = (
                "to treat every layer as full attention set attention.hybrid_kv_cache = false "
                "(refused for state layers, as vLLM refuses)"
                if key == "attention"
                else f"override {key}'s keys one by one"
            )
            raise ValueError(f"{key}: null would drop {name}'s {key} table ({known}); {way}")
        out[key] = (
            {**known, **value} if isinstance(known, dict) and isinstance(value, dict) else value
        )
    return out


class MoeSpec(Frozen):
    """The routed experts of a mixture-of-experts model (Mixtral, Qwen3-MoE, DeepSeek).

    Every token of a MoE layer runs ``num_experts_per_tok`` of the layer's ``num_experts`` routed
    experts (shared experts and the router are dense weights, outside this spec). Hugging Face
    names: ``num_local_experts`` (Mixtral) / ``num_experts`` (Qwen) / ``n_routed_experts``
    (DeepSeek), ``num_experts_per_tok``.

    Attributes:
        num_experts: routed experts per MoE layer.
        num_experts_per_tok: experts each token runs (top-k).
        num_moe_layers: layers whose MLP is routed.
        params_per_expert: one expert's parameters in one layer (gated MLP: ``3 * hidden *
            moe_intermediate_size``).
        expert_weight_bits: bits one routed-expert parameter takes on the GPU, scales included;
            ``None``: the model's ``dtype_bytes``. gpt-oss ships its experts in MXFP4, which
            vLLM keeps on the GPU (``vllm/model_executor/layers/quantization/mxfp4.py``):
            4-bit E2M1 values and one 8-bit E8M0 scale per block of 32 (OCP Microscaling
            Formats v1.0), 4.25 bits (``kvsim.base.units.MXFP4_BITS``).
    """

    num_experts: int = Field(ge=1, le=MAX_MODEL_HEADS)
    num_experts_per_tok: int = Field(ge=1, le=MAX_MODEL_HEADS)
    num_moe_layers: int = Field(ge=1, le=MAX_MODEL_LAYERS)
    params_per_expert: int = Field(ge=1, le=MAX_MODEL_PARAMS)
    expert_weight_bits: float | None = Field(default=None, ge=1, le=32)

    @model_serializer(mode="wrap")
    def _drop_unset_bits(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Leave ``expert_weight_bits`` out when unset, so MoE models keep their hash."""
        data: dict[str, Any] = handler(self)
        if data.get("expert_weight_bits") is None:
            data.pop("expert_weight_bits", None)
        return data

    @model_validator(mode="after")
    def _top_k(self) -> MoeSpec:
        if self.num_experts_per_tok > self.num_experts:
            raise ValueError(
                f"num_experts_per_tok ({self.num_experts_per_tok}) exceeds num_experts "
                f"({self.num_experts})"
            )
        return self

    @property
    def expert_params(self) -> int:
        """Parameters of every routed expert of every MoE layer."""
        return self.num_experts * self.num_moe_layers * self.params_per_expert

    def expert_bytes_per_param(self, dtype_bytes: int) -> float:
        """Bytes one routed-expert parameter takes: ``expert_weight_bits / 8``, else
        ``dtype_bytes``."""
        bits = self.expert_weight_bits
        return float(dtype_bytes) if bits is None else bits / 8


class ModelSpec(Frozen):
    """A decoder-only transformer's size, as far as KV memory and step cost need it.

    ``bytes_per_token = 2 (K and V) * num_layers * num_kv_heads * head_dim * dtype_bytes``; OPT-13B
    in FP16 gives 819,200 bytes (800 KiB), as in the PagedAttention paper (Kwon et al., SOSP 2023).
    An MLA model (DeepSeek-V2/V3) sets ``kv_lora_rank`` and ``qk_rope_head_dim`` and holds
    ``num_layers * (kv_lora_rank + qk_rope_head_dim) * dtype_bytes`` per token (no K/V pair).

    Built from a preset name (``"llama-3.1-8b"``), ``{preset = ..., field = ...}``, explicit fields,
    or a Hugging Face ``config.json``: ``{hf_config = "path/config.json", ...}`` or a bare
    ``"path/config.json"`` (``kvsim.config.hf``); further keys override the file's values.

    Attributes:
        num_params: parameter count (weights).
        dtype_bytes: bytes per weight element (and per KV element under ``kv_cache_dtype="auto"``).
        max_position_embeddings: the trained context in tokens; ``max_model_len`` defaults to it.
        kv_lora_rank: MLA latent width (values per token per layer), ``None`` for K/V attention.
        qk_rope_head_dim: MLA rotary key width cached beside the latent (values per token per
            layer), ``None`` for K/V attention.
        vocab_size: tokens of the vocabulary (the embedding and LM-head rows), ``None`` when
            unknown (the step cost then charges every parameter to every token).
        embedding_dim: width of the residual stream (Hugging Face ``hidden_size``; ``None``:
            ``num_attention_heads * head_dim``); the embedding, the LM head and each
            tensor-parallel all-reduce are this wide.
        tie_word_embeddings: the LM head reuses the input embedding's weights.
        moe: the routed experts (``MoeSpec``), ``None`` for a dense model.
        attention: the layers that are not full attention (sliding-window or state layers,
            ``kvsim.config.layers``), ``None`` when every layer is full attention.
    """

    name: str = "custom"
    num_layers: int = Field(ge=1, le=MAX_MODEL_LAYERS)
    num_attention_heads: int = Field(ge=1, le=MAX_MODEL_HEADS)
    num_kv_heads: int = Field(ge=1, le=MAX_MODEL_HEADS)
    head_dim: int = Field(ge=1, le=MAX_HEAD_DIM)
    num_params: int = Field(ge=1, le=MAX_MODEL_PARAMS, description="parameter count (weights)")
    dtype_bytes: int = Field(default=2, ge=1, le=8, description="bytes per weight element")
    max_position_embeddings: int = Field(
        default=2048, ge=2, le=MAX_CONTEXT_TOKENS, description="trained context, tokens"
    )
    kv_lora_rank: int | None = Field(
        default=None, ge=1, le=MAX_HEAD_DIM, description="MLA latent width"
    )
    qk_rope_head_dim: int | None = Field(
        default=None, ge=0, le=MAX_HEAD_DIM, description="MLA rotary key width"
    )
    vocab_size: int | None = Field(default=None, ge=1, le=2**31 - 1, description="vocabulary")
    embedding_dim: int | None = Field(
        default=None, ge=1, le=MAX_HEAD_DIM * MAX_MODEL_HEADS, description="residual width"
    )
    tie_word_embeddings: bool = False
    moe: MoeSpec | None = None
    attention: AttentionLayers | None = None

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, value: Any) -> Any:
        if isinstance(value, str) and value.lower().endswith(".json"):
            value = {"hf_config": value}
        if isinstance(value, dict) and "hf_config" in value:
            if "preset" in value:
                raise ValueError(
                    f"give preset ({value['preset']!r}) or hf_config ({value['hf_config']!r}), "
                    "not both"
                )
            if not isinstance(value["hf_config"], str | Path) or not str(value["hf_config"]):
                raise ValueError(
                    f"hf_config: expected the path of a config.json (text), got "
                    f"{value['hf_config']!r}"
                )
            rest = {k: v for k, v in value.items() if k != "hf_config"}
            fields = model_fields_from_hf(
                value["hf_config"], rest.get("num_params"), rest.get("attention")
            )
            check_file_heads(value["hf_config"], fields, rest)
            return overlaid(fields, rest)
        return resolve_preset("models", value)

    @model_validator(mode="after")
    def _heads(self) -> ModelSpec:
        if self.num_attention_heads % self.num_kv_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_kv_heads ({self.num_kv_heads})"
            )
        if (self.kv_lora_rank is None) != (self.qk_rope_head_dim is None):
            raise ValueError(
                "kv_lora_rank and qk_rope_head_dim describe an MLA cache together: set both or "
                f"neither, got {self.kv_lora_rank} and {self.qk_rope_head_dim}"
            )
        if self.attention is not None:
            odd = self.attention.num_sliding_layers + self.attention.num_state_layers
            if odd > self.num_layers:
                raise ValueError(
                    f"model.attention: {odd} sliding and state layers exceed num_layers "
                    f"({self.num_layers})"
                )
            if self.attention.num_state_layers >= self.num_layers:
                raise ValueError(
                    f"model.attention.num_state_layers: {self.attention.num_state_layers} state "
                    f"layers leave no attention layer of num_layers ({self.num_layers}); kvsim "
                    "allocates the KV of attention layers, so a model needs one at least"
                )
        if self.is_mla and self.num_kv_heads != 1:
            raise ValueError(
                f"num_kv_heads: an MLA model caches one latent head, got {self.num_kv_heads}"
            )
        if self.embedding_params + self.lm_head_params + self.expert_params > self.num_params:
            raise ValueError(
                f"num_params ({self.num_params:,}) is smaller than the embedding, LM head and "
                f"routed experts it holds ({self.embedding_params + self.lm_head_params:,} + "
                f"{self.expert_params:,}); check vocab_size, embedding_dim and moe"
            )
        return self

    @model_serializer(mode="wrap")
    def _drop_unset_mla(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Leave the optional fields out when unset (MLA, vocabulary, experts), so models
        without them keep their canonical hash."""
        data: dict[str, Any] = handler(self)
        for key in _OPTIONAL_MODEL_FIELDS:
            if data.get(key) is None:
                data.pop(key, None)
        if data.get("tie_word_embeddings") is False:
            data.pop("tie_word_embeddings")
        return data

    @property
    def is_mla(self) -> bool:
        """Whether the KV cache is MLA's latent (``kv_lora_rank`` set)."""
        return self.kv_lora_rank is not None

    @property
    def kv_values_per_token_per_layer(self) -> int:
        """Cached values one token holds in one layer: ``2 * num_kv_heads * head_dim`` (K and
        V), or MLA's ``kv_lora_rank + qk_rope_head_dim``."""
        if self.kv_lora_rank is not None and self.qk_rope_head_dim is not None:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.num_kv_heads * self.head_dim

    @property
    def hidden_size(self) -> int:
        """Attention width: ``num_attention_heads * head_dim``."""
        return self.num_attention_heads * self.head_dim

    @property
    def num_kv_layers(self) -> int:
        """Layers that keep KV per token: all but the state layers (``attention``)."""
        return self.num_layers - (self.attention.num_state_layers if self.attention else 0)

    @property
    def bytes_per_token(self) -> int:
        """KV bytes one token holds across all layers and heads, in the model's dtype."""
        return self.num_kv_layers * self.kv_values_per_token_per_layer * self.dtype_bytes

    @property
    def weight_bytes(self) -> int:
        """Bytes of weights: ``num_params * dtype_bytes``, the routed experts at
        ``MoeSpec.expert_weight_bits`` where set (rounded up to a byte)."""
        if self.moe is None or self.moe.expert_weight_bits is None:
            return self.num_params * self.dtype_bytes
        experts = self.moe.expert_params
        expert_bytes = math.ceil(experts * self.moe.expert_weight_bits / 8)
        return (self.num_params - experts) * self.dtype_bytes + expert_bytes

    @property
    def residual_width(self) -> int:
        """``embedding_dim``, else ``num_attention_heads * head_dim``."""
        return self.embedding_dim or self.hidden_size

    @property
    def lm_head_params(self) -> int:
        """Parameters of the LM head (``vocab_size * residual_width``; 0 when the vocabulary is
        unknown). Tied or not, the head is one matrix product per sampled token."""
        return (self.vocab_size or 0) * self.residual_width

    @property
    def embedding_params(self) -> int:
        """Parameters of the input embedding that are not also the LM head: a table looked up
        row by row, no matrix product (0 when tied, or the vocabulary is unknown)."""
        return 0 if self.tie_word_embeddings else self.lm_head_params

    @property
    def expert_params(self) -> int:
        """Parameters of the routed experts (0 for a dense model)."""
        return self.moe.expert_params if self.moe is not None else 0


class GpuSpec(Frozen):
    """One GPU: memory (bytes), HBM bandwidth (bytes/s), FP16 FLOP/s, link bandwidths (bytes/s).

    ``nvlink_bandwidth_bytes_per_s`` is one direction of the GPU-to-GPU link (NVLink: A100 600 GB/s
    and H100/H200 900 GB/s in total, half each way), used by tensor-parallel all-reduces.
    ``interconnect`` says which link the GPUs of one replica share: ``"nvlink"`` (SXM parts) or
    ``"pcie"`` (cards without NVLink, e.g. the GeForce RTX 4090: all-reduces then cross PCIe at
    ``pcie_bandwidth_bytes_per_s``).

    ``c2c_bandwidth_bytes_per_s`` is one direction of NVLink-C2C between the GPU and its Grace CPU
    on a superchip (GH200, GB200), ``None`` on a GPU behind PCIe: the host link that KV offloading
    to CPU memory crosses is whichever the GPU has (``host_link_bandwidth_bytes_per_s``).
    """

    name: str = "custom"
    memory_bytes: int = Field(ge=1, le=MAX_GPU_MEMORY_BYTES)
    hbm_bandwidth_bytes_per_s: float = Field(ge=1, le=MAX_HW_PER_S)
    fp16_flops_per_s: float = Field(ge=1, le=MAX_HW_PER_S)
    pcie_bandwidth_bytes_per_s: float = Field(default=25.6e9, ge=1, le=MAX_HW_PER_S)
    nvlink_bandwidth_bytes_per_s: float = Field(default=300e9, ge=1, le=MAX_HW_PER_S)
    interconnect: Literal["nvlink", "pcie"] = "nvlink"
    c2c_bandwidth_bytes_per_s: float | None = Field(default=None, ge=1, le=MAX_HW_PER_S)

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, value: Any) -> Any:
        return resolve_preset("gpus", value)

    @model_serializer(mode="wrap")
    def _drop_default_link(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Leave ``interconnect`` out when it is NVLink, so GPUs keep their canonical hash."""
        data: dict[str, Any] = handler(self)
        if data.get("interconnect") == "nvlink":
            data.pop("interconnect")
        if data.get("c2c_bandwidth_bytes_per_s") is None:  # (likewise: no superchip link)
            data.pop("c2c_bandwidth_bytes_per_s", None)
        return data

    @property
    def host_link_bandwidth_bytes_per_s(self) -> float:
        """One direction of the GPU-CPU link (KV offloading, ``kvsim.config.offload``):
        NVLink-C2C on a superchip, else PCIe."""
        if self.c2c_bandwidth_bytes_per_s is not None:
            return self.c2c_bandwidth_bytes_per_s
        return self.pcie_bandwidth_bytes_per_s

    @property
    def link_bandwidth_bytes_per_s(self) -> float:
        """One direction of the link all-reduces cross: NVLink's, or PCIe's without NVLink."""
        if self.interconnect == "pcie":
            return self.pcie_bandwidth_bytes_per_s
        return self.nvlink_bandwidth_bytes_per_s


class ParallelConfig(Frozen):
    """How the model is split over GPUs (``tensor_parallel_size``, ``pipeline_parallel_size``).

    Tensor parallelism splits every layer's heads and weights over ``tensor_parallel_size`` GPUs;
    pipeline parallelism splits the layers into ``pipeline_parallel_size`` stages. The KV budget
    (``cache.kv_cache_gib`` or the derived one) is per GPU, as vLLM sizes it per worker.
    """

    tensor_parallel_size: int = Field(default=1, ge=1, le=1024)
    pipeline_parallel_size: int = Field(default=1, ge=1, le=1024)

    @property
    def world_size(self) -> int:
        """GPUs serving one replica: ``tensor_parallel_size * pipeline_parallel_size``."""
        return self.tensor_parallel_size * self.pipeline_parallel_size


def check_parallel_fits_model(model: ModelSpec, parallel: ParallelConfig) -> None:
    """vLLM's split rules: heads divide by TP, KV heads divide TP or TP divides them, one layer
    per stage at least.

    Raises:
        ValueError: naming the sizes that do not split.
    """
    tp, pp = parallel.tensor_parallel_size, parallel.pipeline_parallel_size
    if model.num_attention_heads % tp:
        raise ValueError(
            f"parallel.tensor_parallel_size: {model.name} has {model.num_attention_heads} "
            f"attention heads, not divisible by tensor_parallel_size = {tp}"
        )
    kv = model.num_kv_heads
    if kv % tp and tp % kv:
        raise ValueError(
            f"parallel.tensor_parallel_size: {model.name} has {kv} KV heads; tensor_parallel_size "
            f"= {tp} must divide them or be a multiple of them"
        )
    if pp > model.num_layers:
        raise ValueError(
            f"parallel.pipeline_parallel_size: {pp} stages for {model.num_layers} layers"
        )


def kv_dtype_bytes(model: ModelSpec, kv_cache_dtype: KvCacheDtype) -> int:
    """Bytes per KV element: the model's dtype for ``"auto"``, 1 for the fp8 variants."""
    return 1 if kv_cache_dtype in FP8_KV_DTYPES else model.dtype_bytes


def kv_bytes_per_token_per_gpu(
    model: ModelSpec,
    parallel: ParallelConfig,
    kv_cache_dtype: KvCacheDtype = "auto",
    draft_kv_layers: int = 0,
) -> int:
    """KV bytes one token takes on one GPU (the module docstring gives the split), with
    ``draft_kv_layers`` speculative-drafter layers of the target's layer shape beside the
    target's (``SpeculativeConfig.draft_num_kv_layers``; counted whole on the one pipeline stage
    that drafts, which bounds the pool)."""
    layers = cdiv(model.num_kv_layers, parallel.pipeline_parallel_size) + draft_kv_layers
    if model.is_mla:  # one latent per layer, whole on every TP rank
        return layers * model.kv_values_per_token_per_layer * kv_dtype_bytes(model, kv_cache_dtype)
    heads = max(1, model.num_kv_heads // parallel.tensor_parallel_size)
    return 2 * layers * heads * model.head_dim * kv_dtype_bytes(model, kv_cache_dtype)


def model_kv_groups(
    model: ModelSpec,
    parallel: ParallelConfig,
    kv_cache_dtype: KvCacheDtype,
    block_size_tokens: int,
    draft_kv_layers: int = 0,
    num_speculative_tokens: int = 0,
) -> KVCacheGroups:
    """vLLM v1's hybrid KV cache groups of ``model`` on one GPU of ``parallel``
    (``kvsim.config.layers.kv_cache_groups``, its layer bytes from
    ``kv_bytes_per_token_per_gpu``; ``num_speculative_tokens``: drafts a step, a state group's
    extra blocks). ``model.attention`` must be set.

    Raises:
        ValueError: as ``kv_cache_groups``.
    """
    assert model.attention is not None, "a model with hybrid layers"
    full = kv_bytes_per_token_per_gpu(model, parallel, kv_cache_dtype)
    return kv_cache_groups(
        model.num_layers,
        model.attention,
        full // model.num_kv_layers,
        block_size_tokens,
        parallel.tensor_parallel_size,
        draft_kv_layers,
        num_speculative_tokens,
    )


def kv_tensors_per_gpu(model: ModelSpec, parallel: ParallelConfig, draft_kv_layers: int = 0) -> int:
    """KV cache tensors one GPU keeps: a K and a V tensor per layer with KV of its pipeline stage
    (state layers keep none) and per drafter layer, or one latent tensor per layer for MLA
    (vAttention's virtual tensors, ``kvsim.core.kv.vattention``)."""
    layers = cdiv(model.num_kv_layers, parallel.pipeline_parallel_size) + draft_kv_layers
    return layers if model.is_mla else 2 * layers


def weight_bytes_per_gpu(model: ModelSpec, parallel: ParallelConfig, draft_params: int = 0) -> int:
    """Weights the GPU that holds the most holds: an even share over ``world_size`` GPUs of
    ``weight_bytes``, and a speculative drafter's ``draft_params`` in the model's dtype split over
    the tensor-parallel GPUs of the last pipeline stage alone (vLLM 0.34.0 loads the drafter
    beside the target before it sizes the KV cache, on the last stage only:
    ``vllm/v1/worker/gpu/model_runner.py`` builds the speculator ``if self.is_last_pp_rank``;
    every stage then takes the fewest blocks any stage fits)."""
    stages = parallel.pipeline_parallel_size
    drafter = draft_params * model.dtype_bytes * stages  # (over world_size: / TP on one stage)
    return cdiv(model.weight_bytes + drafter, parallel.world_size)
