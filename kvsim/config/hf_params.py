"""Parameter counts of Llama-family decoders from a Hugging Face ``config.json``: the whole count
(``count_params``) and the routed experts' share (``moe_fields``); ``kvsim.config.hf`` reads the
file and calls them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kvsim.base.limits import is_int_at_least

Getter = Callable[..., int]
Where = Callable[[str], str]  # a key's place in the file for messages ("config.json line 7")
# model types whose parameter count count_params knows (gated MLP, RMSNorm, no position table)
LLAMA_FAMILY = {
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "deepseek_v2",
    "deepseek_v3",
    "gemma2",
    "gemma3_text",
}
# their config classes default tie_word_embeddings to False (Gemma's to True)
UNTIED_BY_DEFAULT = LLAMA_FAMILY - {"gemma2", "gemma3_text"}
# four RMSNorms a layer: before and after attention, before and after the MLP (Gemma 2 and 3)
FOUR_NORMS = {"gemma2", "gemma3_text"}


def count_params(
    data: dict[str, Any], path: Path | str = "config.json", where: Where | None = None
) -> int:
    """Parameters of a Llama-family decoder, counted from its ``config.json`` (weights and biases).

    ``V * H`` embedding (+ ``V * H`` untied LM head) + final norm ``H`` + per layer: two norms
    ``2 * H`` (four for Gemma 2 and 3: around attention and around the MLP); attention ``H * (q
    + 2 * kv) * d + q * d * H`` (+ biases: q, k, v for qwen2, q, k, v, o for ``attention_bias``;
    + ``2 * d`` q/k norms for qwen3 and gemma3_text); or MLA: ``q_a`` ``H * r_q`` + norm ``r_q``
    + ``q_b`` ``r_q * q * (d_nope + d_rope)`` (or ``H * q * (d_nope + d_rope)`` without
    ``q_lora_rank``), ``kv_a`` ``H * (r_kv + d_rope)`` + norm ``r_kv``, ``kv_b`` ``r_kv * q *
    (d_nope + d_v)``, ``o`` ``q * d_v * H``; gated MLP ``3 * H * I``; MoE layers (after
    ``first_k_dense_replace`` dense ones, every ``moe_layer_freq``-th): experts ``E * 3 * H *
    I_moe`` + shared experts ``3 * H * I_moe * n_shared`` (or ``3 * H * I_shared + H`` for
    ``shared_expert_intermediate_size``) + router ``E * H`` (+ ``E`` correction bias for
    ``topk_method = "noaux_tc"``). Multi-token-prediction layers (``num_nextn_predict_layers``)
    are left out: vLLM loads them only for speculative decoding.

    ``where`` names a key's line in the file for a bad field's message (else ``path`` alone).

    Raises:
        ValueError: an architecture outside the family, or a missing field.
    """
    get = _getter(data, path, where)
    model_type = str(data.get("model_type", ""))
    if model_type not in LLAMA_FAMILY:
        raise ValueError(
            f"hf_config {path}: cannot count the parameters of model_type {model_type!r} "
            f"(known: {sorted(LLAMA_FAMILY)}); set model.num_params"
        )
    hidden, vocab, layers = get("hidden_size"), get("vocab_size"), get("num_hidden_layers")
    tied = data.get("tie_word_embeddings", model_type not in UNTIED_BY_DEFAULT)
    total = vocab * hidden * (1 if tied else 2) + hidden
    attention = _attention_params(data, get, model_type)
    norms = (4 if model_type in FOUR_NORMS else 2) * hidden
    for layer in range(layers):
        total += norms + attention + _mlp_params(data, get, layer)
    return total


def moe_fields(
    data: dict[str, Any], path: Path | str = "config.json", where: Where | None = None
) -> dict[str, int] | None:
    """``MoeSpec`` fields of a routed-expert model (``None`` for a dense one): experts per MoE
    layer (``n_routed_experts``, ``num_local_experts`` or ``num_experts``), ``num_experts_per_tok``,
    the MoE layers (after ``first_k_dense_replace`` dense ones, every ``moe_layer_freq``-th, as
    :func:`count_params` counts them) and one expert's gated-MLP parameters ``3 * hidden_size *
    moe_intermediate_size`` (``intermediate_size`` when the file has no MoE width).

    Raises:
        ValueError: a field the count needs is missing or malformed.
    """
    experts = data.get("n_routed_experts") or data.get("num_local_experts") or 0
    experts = experts or data.get("num_experts") or 0
    if not experts:
        return None
    get = _getter(data, path, where, f"a mixture-of-experts model's {int(experts)} experts need")
    layers = get("num_hidden_layers")
    dense_first = data.get("first_k_dense_replace", 0) or 0
    freq = data.get("moe_layer_freq", 1) or 1
    moe_layers = sum(1 for i in range(dense_first, layers) if (i - dense_first) % freq == 0)
    width = data.get("moe_intermediate_size") or get("intermediate_size")
    per_tok_key = (  # (the Hugging Face name, where the file has neither)
        "num_experts_per_token" if "num_experts_per_token" in data else "num_experts_per_tok"
    )
    return {
        "num_experts": int(experts),
        "num_experts_per_tok": get(per_tok_key),
        "num_moe_layers": moe_layers,
        "params_per_expert": 3 * get("hidden_size") * int(width),
    }


def _getter(
    data: dict[str, Any], path: Path | str, where: Where | None = None, need: str = ""
) -> Getter:
    """A reader of the file's integer keys; ``need``: what needs them (default: the parameter
    count, which ``model.num_params`` replaces)."""

    def get(key: str, default: int | None = None) -> int:
        value = data.get(key, default)
        if not is_int_at_least(value, 0):
            at = f"hf_config {path}" if where is None or key not in data else where(key)
            what = "which it lacks" if key not in data else f"got {value!r}"
            advice = "" if need else "; set model.num_params"
            raise ValueError(
                f"{at}: {need or 'counting parameters needs'} {key}, an integer >= 0, {what}"
                f"{advice}"
            )
        return value

    return get


def _attention_params(data: dict[str, Any], get: Getter, model_type: str) -> int:
    hidden, heads = get("hidden_size"), get("num_attention_heads")
    if data.get("kv_lora_rank") is not None:
        rank, rope = get("kv_lora_rank"), get("qk_rope_head_dim")
        qk_dim, v_dim = get("qk_nope_head_dim") + rope, get("v_head_dim")
        q_rank = data.get("q_lora_rank")
        if q_rank is None:
            q = hidden * heads * qk_dim
        else:
            q_rank = get("q_lora_rank")
            q = hidden * q_rank + q_rank + q_rank * heads * qk_dim
        kv = hidden * (rank + rope) + rank + rank * heads * (get("qk_nope_head_dim") + v_dim)
        return q + kv + heads * v_dim * hidden
    kv_heads = get("num_key_value_heads", heads)
    head_dim = data.get("head_dim") or hidden // heads
    params = hidden * (heads + 2 * kv_heads) * head_dim + heads * head_dim * hidden
    if data.get("attention_bias"):
        params += (heads + 2 * kv_heads) * head_dim + hidden
    elif model_type in ("qwen2", "qwen2_moe"):  # Qwen2 always has q, k and v biases
        params += (heads + 2 * kv_heads) * head_dim
    if model_type in ("qwen3", "qwen3_moe", "gemma3_text"):  # per-head RMSNorm of q and k
        params += 2 * head_dim
    return int(params)


def _mlp_params(data: dict[str, Any], get: Getter, layer: int) -> int:
    hidden = get("hidden_size")
    experts = data.get("n_routed_experts") or data.get("num_local_experts") or 0
    experts = experts or data.get("num_experts") or 0
    dense_first = data.get("first_k_dense_replace", 0) or 0
    freq = data.get("moe_layer_freq", 1) or 1
    if not experts or layer < dense_first or (layer - dense_first) % freq:
        return 3 * hidden * get("intermediate_size")
    size = data.get("moe_intermediate_size") or get("intermediate_size")
    params = experts * 3 * hidden * size + experts * hidden
    if data.get("n_shared_experts"):
        params += get("n_shared_experts") * 3 * hidden * size
    if data.get("shared_expert_intermediate_size"):
        params += 3 * hidden * get("shared_expert_intermediate_size") + hidden
    if data.get("topk_method") == "noaux_tc":
        params += experts
    return int(params)
