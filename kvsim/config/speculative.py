"""``SpeculativeConfig``: speculative decoding as vLLM's ``--speculative-config`` sets it, and
how many drafts the target model accepts.

A drafter proposes ``num_speculative_tokens`` tokens (``k``) after every step in which a request
samples; the next step verifies them with the request's last sampled token (``1 + k`` tokens)
and keeps ``a`` of them plus one token of its own. Drafters with a forward pass of their own
(EAGLE, MTP, a draft model) write KV for positions past the target's tokens, so the scheduler
reserves ``num_lookahead_tokens = k`` more slots at every allocation (vLLM 0.34.0
``vllm/v1/worker/gpu/spec_decode/eagle/config.py``, ``num_lookahead_tokens``, read by
``Scheduler.schedule`` into ``KVCacheManager.allocate_slots``); n-gram lookup drafts on the CPU
and reserves none (``SpeculatorConfig.num_lookahead_tokens`` is 0).

Acceptance is the model's, not the scheduler's, so kvsim draws it: ``acceptance_rates[i]`` is
vLLM's per-position acceptance rate, the share of drafts whose position ``i + 1`` was accepted
(``spec_decode_num_accepted_tokens_per_pos / spec_decode_num_drafts``), non-increasing since a
position is accepted only after every earlier one; ``acceptance_rate = alpha`` stands for
``alpha, alpha**2, ...`` (each draft accepted with probability ``alpha`` given the ones before:
the i.i.d. model of Leviathan et al., ICML 2023). vLLM's logged "Avg Draft acceptance rate"
(``spec_decode_num_accepted_tokens / spec_decode_num_draft_tokens``, the mean of the
per-position rates: ``vllm/v1/spec_decode/metrics.py``, ``SpecDecodingLogging``) is neither:
give it as ``draft_acceptance_rate``, and kvsim takes the ``alpha`` whose ``k`` rates have that
mean (0.7 at ``k = 3`` is ``alpha`` = 0.832, not 0.7). One uniform draw ``u`` per verification,
taken from the run's seeded generator, gives ``a = #{i : u < acceptance_rates[i]}``.

An EAGLE-style drafter whose size is not given reads one decoder layer of the target and its
fusion layer a pass (``eagle_head_params``).
"""

from __future__ import annotations

import itertools
from typing import Literal

from numpy.polynomial import Polynomial
from pydantic import Field, ValidationInfo, field_validator, model_validator

from kvsim.base.limits import MAX_MODEL_LAYERS, MAX_MODEL_PARAMS
from kvsim.config.hardware import Frozen, ModelSpec

MAX_SPECULATIVE_TOKENS = 32
# the ways to give acceptance, one at a time
ACCEPTANCE_FIELDS = ("acceptance_rate", "acceptance_rates", "draft_acceptance_rate")
# vLLM's --speculative-config method names that kvsim models as one of its two kinds: its
# EagleModelTypes (eagle3 and the MTP heads: "mtp", "deepseek_mtp", ... all "*_mtp") and a
# draft model run their own forward pass and write KV (num_lookahead_tokens = k), as "eagle";
# "ngram_gpu" is n-gram lookup (vllm/config/speculative.py, SpeculativeMethod)
VLLM_METHOD_KINDS = {
    "eagle3": "eagle",
    "mtp": "eagle",
    "draft_model": "eagle",
    "ngram_gpu": "ngram",
}


class SpeculativeConfig(Frozen):
    """Speculative decoding (vLLM ``SpeculativeConfig``; off while ``num_speculative_tokens``
    is 0).

    Attributes:
        method: ``"eagle"`` (a drafter with KV of its own: EAGLE, EAGLE-3, MTP, a draft model;
            ``num_lookahead_tokens = k``) or ``"ngram"`` (prompt lookup on the CPU: none).
        num_speculative_tokens: drafts proposed per step, ``k``.
        acceptance_rate: each draft's acceptance given the ones before it (``alpha``).
        acceptance_rates: vLLM's per-position acceptance rates, ``k`` non-increasing values.
        draft_acceptance_rate: vLLM's "Avg Draft acceptance rate" as a share (accepted / draft
            tokens; its log prints %); kvsim solves for the ``alpha`` that gives it at this
            ``k`` (measured at another ``k``, it stands for another drafter: one drafter's rate
            falls as ``k`` grows). Set one of the three.
        draft_num_params: weights the drafter reads in each of its ``k`` passes a step (0: a
            free drafter). ``None``: ``eagle_head_params`` of the target for ``"eagle"``
            (about 0.25 B for Llama-3.1-8B), 0 for ``"ngram"`` (SimConfig.draft_params).
        draft_num_kv_layers: attention layers of the drafter, each keeping KV of one target
            layer's shape in the same pool (default: 1 for ``"eagle"``, the one decoder layer of
            an EAGLE, EAGLE-3 or MTP head; 0 for ``"ngram"``). vLLM gives the drafter's layers
            KV cache beside the target's (vLLM 0.34.0 ``vllm/v1/worker/gpu/attn_utils.py``,
            ``get_kv_cache_spec``: every attention layer of the config, the drafter's marked
            ``is_draft``, which ``vllm/v1/kv_cache_interface.py`` leaves out of grouping), so
            each token slot holds ``num_kv_layers + draft_num_kv_layers`` layers. A draft model
            of another shape is out of scope: give the layer count its KV bytes equal.
    """

    method: Literal["eagle", "ngram"] = "eagle"
    num_speculative_tokens: int = Field(default=0, ge=0, le=MAX_SPECULATIVE_TOKENS)
    acceptance_rate: float | None = Field(default=None, ge=0, le=1)
    acceptance_rates: tuple[float, ...] | None = None
    draft_acceptance_rate: float | None = Field(default=None, ge=0, le=1)
    draft_num_params: int | None = Field(default=None, ge=0, le=MAX_MODEL_PARAMS)
    draft_num_kv_layers: int | None = Field(default=None, ge=0, le=MAX_MODEL_LAYERS)

    @field_validator("method", mode="before")
    @classmethod
    def _vllm_method(cls, value: object) -> object:
        """Name kvsim's kind for a vLLM method name it folds into one (``VLLM_METHOD_KINDS``)."""
        if not isinstance(value, str) or value in ("eagle", "ngram"):
            return value
        kind = VLLM_METHOD_KINDS.get(value, "eagle" if value.endswith("_mtp") else None)
        if kind is None:
            return value  # (the Literal's own message)
        what = (
            "a drafter with KV of its own (EAGLE, EAGLE-3, MTP, a draft model), reserving "
            "num_speculative_tokens lookahead slots"
            if kind == "eagle"
            else "n-gram lookup, reserving no lookahead slot"
        )
        raise ValueError(
            f"vLLM's {value!r} is kvsim's {kind!r}: {what}; expected 'eagle' or 'ngram', "
            f"got {value!r}"
        )

    @field_validator("acceptance_rate", "draft_acceptance_rate", mode="before")
    @classmethod
    def _share_not_percent(cls, value: object, info: ValidationInfo) -> object:
        """A rate written in % (vLLM's log prints "Avg Draft acceptance rate: 69.1%") is refused
        with the share it stands for."""
        if isinstance(value, (int, float)) and not isinstance(value, bool) and 1 < value <= 100:
            raise ValueError(
                f"expected a share in [0, 1], got {value}: a rate in % is {value / 100:g} "
                f"here ({info.field_name} = {value / 100:g})"
            )
        return value

    @model_validator(mode="after")
    def _rates(self) -> SpeculativeConfig:
        k = self.num_speculative_tokens
        if self.method == "ngram" and self.draft_num_params:
            raise ValueError(
                "draft_num_params: method 'ngram' proposes drafts by prompt lookup on the CPU "
                f"and reads no weights, got {self.draft_num_params:,}; a drafter with weights is "
                "method 'eagle'"
            )
        if self.method == "ngram" and self.draft_num_kv_layers:
            raise ValueError(
                "draft_num_kv_layers: method 'ngram' runs no drafter layers and keeps no KV, got "
                f"{self.draft_num_kv_layers}; a drafter with KV layers is method 'eagle'"
            )
        given = [n for n in ACCEPTANCE_FIELDS if getattr(self, n) is not None]
        if len(given) > 1:
            values = ", ".join(f"{n} = {getattr(self, n)}" for n in given)
            choices = ", ".join(ACCEPTANCE_FIELDS)
            raise ValueError(f"{given[-1]}: set one of {choices}, got {values}")
        if k and not given:
            raise ValueError(
                f"acceptance_rate: {k} speculative tokens need an acceptance rate "
                "(acceptance_rate given the drafts before, acceptance_rates per position, or "
                "vLLM's logged draft_acceptance_rate)"
            )
        rates = self.acceptance_rates
        if rates is not None:
            if k and len(rates) != k:  # (with k = 0 unread: "has no effect", as the scalars)
                raise ValueError(
                    f"acceptance_rates: expected one rate per speculative token ({k}), got "
                    f"{len(rates)}: {list(rates)}"
                )
            if any(not 0 <= r <= 1 for r in rates) or any(
                b > a for a, b in itertools.pairwise(rates)
            ):
                shares = [r / 100 for r in rates]
                percent = (
                    f": rates in % are {[round(r, 6) for r in shares]} here"
                    if all(0 <= r <= 100 for r in rates) and any(r > 1 for r in rates)
                    else ""
                )
                raise ValueError(
                    "acceptance_rates: expected non-increasing shares in [0, 1] (a position is "
                    f"accepted only after every earlier one), got {list(rates)}{percent}"
                )
        return self

    @property
    def enabled(self) -> bool:
        """Whether the run speculates (``num_speculative_tokens > 0``)."""
        return self.num_speculative_tokens > 0

    @property
    def num_lookahead_tokens(self) -> int:
        """KV slots reserved past the scheduled tokens at every allocation (vLLM's
        ``VllmConfig.num_lookahead_tokens``): ``k`` for a drafter with KV, 0 for n-gram."""
        return self.num_speculative_tokens if self.method == "eagle" else 0

    @property
    def hash_lookahead_tokens(self) -> int:
        """Tokens past a block that its prefix-cache key covers when the pool caches prefixes
        (vLLM 0.34.0 ``VllmConfig._resolve_num_hash_lookahead_tokens``: an EAGLE or MTP
        drafter's KV at a block's last position reads the next token, so vLLM hashes a block
        with it, ``num_prefill_lookahead_tokens = 1``; n-gram lookup: 0). vLLM's separate
        draft model (``draft_model``) and multi-module MTP differ; kvsim models EAGLE's."""
        return 1 if self.enabled and self.method == "eagle" else 0

    @property
    def num_draft_kv_layers(self) -> int:
        """Drafter attention layers keeping KV in the pool while the run speculates:
        ``draft_num_kv_layers``, by default 1 for ``"eagle"`` and 0 for ``"ngram"``; 0 when
        ``num_speculative_tokens`` is 0 (no drafter is loaded)."""
        if not self.enabled:
            return 0
        if self.draft_num_kv_layers is not None:
            return self.draft_num_kv_layers
        return 1 if self.method == "eagle" else 0

    @property
    def position_rates(self) -> tuple[float, ...]:
        """``P(a >= i)`` for ``i = 1..k``: the per-position acceptance rates."""
        k = self.num_speculative_tokens
        if self.acceptance_rates is not None:
            return self.acceptance_rates[:k]  # (k = 0: unread, none)
        alpha = self.acceptance_rate or 0.0
        if self.draft_acceptance_rate is not None:
            alpha = alpha_for_draft_rate(self.draft_acceptance_rate, k)
        return tuple(alpha**i for i in range(1, k + 1))

    @property
    def mean_accepted_tokens(self) -> float:
        """Expected accepted drafts per verification, ``sum_i P(a >= i)``."""
        return float(sum(self.position_rates))


def alpha_for_draft_rate(draft_rate: float, k: int) -> float:
    """The ``alpha`` whose ``k`` per-position rates ``alpha, ..., alpha**k`` have the mean
    ``draft_rate`` (vLLM's draft acceptance rate): the root in ``[0, 1]`` of ``alpha + ... +
    alpha**k - k draft_rate``, which rises from below 0 at 0 to at least 0 at 1, so the root is
    unique (``numpy.polynomial``, a core dependency: the field works on a base install).
    ``k = 1``: ``draft_rate``; ``k = 2``, 0.5: the golden ratio's 0.618. Raises ``ValueError``
    outside ``[0, 1]``."""
    if not 0 <= draft_rate <= 1:
        raise ValueError(f"draft_acceptance_rate: expected a share in [0, 1], got {draft_rate}")
    if k < 1 or draft_rate in (0, 1):
        return float(draft_rate)
    roots = [complex(r) for r in Polynomial([-k * draft_rate] + [1.0] * k).roots()]
    inside = [r.real for r in roots if abs(r.imag) < 1e-9 and -1e-9 <= r.real <= 1 + 1e-9]
    return min(max(inside[0], 0.0), 1.0)


def eagle_head_params(model: ModelSpec) -> int:
    """Parameters an EAGLE-style head reads a draft pass when its size is not given: one decoder
    layer of the target (its parameters less the embedding and LM head, over its layers) and the
    fusion layer that maps two residual vectors to one (``2 * width**2``; the LM head is the
    target's). For Llama-2-7B, (6.74 B - 2 x 32,000 x 4,096) / 32 + 2 x 4,096**2 = 0.236 B, the
    0.24 B of Li et al. (EAGLE, ICML 2024, §4); Llama-3.1-8B's is 0.252 B. A MoE target's head
    is a dense layer (EAGLE-3's heads for gpt-oss and Qwen3 MoE are): its layer counts the
    experts one token reads (``num_experts_per_tok``), not all of them."""
    body = model.num_params - model.lm_head_params - model.embedding_params
    layer = body // model.num_layers
    if model.moe is not None:
        moe = model.moe
        dense = (body - model.expert_params) // model.num_layers
        layer = dense + moe.num_experts_per_tok * moe.params_per_expert
    return layer + 2 * model.residual_width**2
