"""Reservation rules of contiguous allocators: how many slots a slab holds for a request.

The rules follow the PagedAttention paper's Orca baselines (Kwon et al., SOSP 2023, §6.1):
Max reserves max_model_len; Pow2 over-reserves the output by at most 2x ("if the true output
length is 25, it reserves 32 positions"); Oracle knows the true output length and reserves exactly
the KV the request writes, ``prompt + output - 1`` slots (the last sampled token is never
computed, ``kvsim.workload.request``), so it has no internal fragmentation. Two serving defaults
complete the set: prompt + max_tokens, and the model's full trained context.
"""

from __future__ import annotations

from kvsim.base.units import next_power_of_2
from kvsim.workload.request import Request

RESERVATION_RULES = ("max", "pow2", "oracle", "prompt_max_tokens", "full_context")


def reserved_slots(
    request: Request, rule: str, *, max_model_len: int, full_context_tokens: int
) -> int:
    """Slab size in token slots for ``request`` under ``rule``.

    Args:
        rule: one of ``RESERVATION_RULES``.
        max_model_len: serving cap on prompt + output, tokens.
        full_context_tokens: the model's trained context, tokens (``full_context`` rule).

    Raises:
        ValueError: unknown rule.
    """
    prompt, output = request.prompt_tokens, request.output_tokens
    if rule == "max":
        return max_model_len
    if rule == "pow2":
        return min(max_model_len, prompt + next_power_of_2(output))
    if rule == "oracle":
        return request.final_kv_tokens
    if rule == "prompt_max_tokens":
        return min(max_model_len, prompt + request.max_tokens)
    if rule == "full_context":
        return full_context_tokens
    raise ValueError(f"reservation: unknown rule {rule!r}; choose from {list(RESERVATION_RULES)}")
