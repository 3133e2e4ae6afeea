"""Speculative decoding in the scheduler: how many of a step's drafts the target model accepts,
and vLLM's counters of them.

A request that samples proposes ``k`` drafts for its next step (vLLM's ``spec_token_ids``,
``Request.num_draft_tokens`` here); the running pass schedules them with its last sampled token
(``num_tokens_with_spec - num_computed_tokens``) and every allocation reserves
``num_lookahead_tokens`` slots more (``kvsim.config.speculative``). When the step completes,
``accept`` draws how many of the ``d`` scheduled drafts were accepted; the request keeps
``a + 1`` sampled tokens and its computed tokens roll back by the ``d - a`` rejected ones (vLLM
0.34.0 ``Scheduler.update_from_output``: ``num_computed_tokens -= num_rejected``); its blocks
stay with it (vLLM frees none of a running request's blocks on a rejection: the next step's
tokens overwrite those slots), so the rejected slots go back to its reservation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import numpy as np
from librt.vecs import vec
from mypy_extensions import i64

SPEC_STREAM: Final = 0x5BEC  # the acceptance draws' own stream of the run's seed
_BATCH: Final = 4096


def acceptance_rates(drafts: int, draft_tokens: int, accepted: int) -> dict[str, float]:
    """vLLM's two rates read from its speculative-decoding counters (``vllm:spec_decode_*``):
    ``spec_decode_draft_acceptance_rate`` = accepted / draft tokens and
    ``spec_decode_mean_acceptance_length`` = 1 + accepted / drafts (tokens a verification
    step emits, its bonus token included), each NaN when its denominator is 0."""
    nan = float("nan")
    return {
        "spec_decode_draft_acceptance_rate": accepted / draft_tokens if draft_tokens else nan,
        "spec_decode_mean_acceptance_length": 1 + accepted / drafts if drafts else nan,
    }


class SpecDecoder:
    """Acceptance draws and vLLM's speculative-decoding counters (``SpecDecodingStats``).

    Args:
        num_speculative_tokens: drafts proposed per step, ``k``.
        num_lookahead_tokens: slots reserved past the scheduled tokens at every allocation.
        position_rates: ``P(a >= i)`` for ``i = 1..k`` (non-increasing).
        seed: the run's seed; draws come from ``default_rng((seed, SPEC_STREAM))``.
    """

    def __init__(
        self,
        num_speculative_tokens: int,
        num_lookahead_tokens: int,
        position_rates: Sequence[float],
        seed: int,
    ) -> None:
        if len(position_rates) != num_speculative_tokens:
            raise ValueError(
                f"position_rates: expected {num_speculative_tokens} rates, got "
                f"{len(position_rates)}"
            )
        self.num_speculative_tokens = num_speculative_tokens
        self.num_lookahead_tokens = num_lookahead_tokens
        self.position_rates = tuple(float(r) for r in position_rates)
        self.rng = np.random.default_rng((seed, SPEC_STREAM))
        self._rates = vec[float](self.position_rates)  # (packed: read without unboxing)
        self._uniforms = vec[float]()  # drawn in batches, used in order from _next
        self._next = 0
        self.num_drafts = 0
        self.num_draft_tokens = 0
        self.num_accepted_tokens = 0
        # verifications by accepted drafts (index a, 0..k): one count a verification, where
        # vLLM's per-position counters take a; they are its suffix sums (packed: a list's
        # counts past 256 are int objects, added through Python)
        self._num_accepting = vec[i64]([0] * (num_speculative_tokens + 1))

    @property
    def num_accepted_tokens_per_pos(self) -> list[int]:
        """vLLM's ``num_accepted_tokens_per_pos``: verifications that accepted position ``i``
        (every verification accepting ``a`` drafts accepts positions ``0..a-1``)."""
        per_pos = [0] * self.num_speculative_tokens
        total = 0
        for i in range(self.num_speculative_tokens - 1, -1, -1):
            total += self._num_accepting[i + 1]
            per_pos[i] = total
        return per_pos

    def accept(self, num_drafts: int) -> int:
        """Accepted drafts of a verification of ``num_drafts`` drafts (the first
        ``num_drafts`` positions): ``#{i < num_drafts : u < P(a >= i + 1)}`` for one uniform
        ``u``, counted as vLLM's ``SpecDecodingStats.observe_draft`` counts it."""
        uniforms = self._uniforms
        i = self._next
        if i == len(uniforms):  # the same stream as one draw a call, in batches
            uniforms = self._uniforms = vec[float](self.rng.random(_BATCH))  # (its buffer)
            i = 0
        u = uniforms[i]
        self._next = i + 1
        accepted = 0
        rates = self._rates
        while accepted < num_drafts and u < rates[accepted]:
            accepted += 1
        self.num_drafts += 1
        self.num_draft_tokens += num_drafts
        self.num_accepted_tokens += accepted
        self._num_accepting[accepted] += 1
        return accepted

    def reject_placeholders(self, num_drafts: int) -> int:
        """A verification of ``num_drafts`` placeholder drafts (a request admitted with one token
        left, vLLM's ``pad_spec_decode``: ``[-1] * k``), all rejected: counted as vLLM counts it
        (``update_from_output`` passes the scheduled spec tokens to ``observe_draft`` with 0
        accepted, vLLM 0.34.0 ``vllm/v1/core/sched/scheduler.py``); no draw. Returns 0."""
        self.num_drafts += 1
        self.num_draft_tokens += num_drafts
        self._num_accepting[0] += 1
        return 0

    def summary(self) -> dict[str, Any]:
        """vLLM's counters (``vllm:spec_decode_*``) and the two rates read from them."""
        drafts, tokens = self.num_drafts, self.num_draft_tokens
        accepted = self.num_accepted_tokens
        out: dict[str, Any] = {
            "spec_decode_num_drafts": drafts,
            "spec_decode_num_draft_tokens": tokens,
            "spec_decode_num_accepted_tokens": accepted,
            **acceptance_rates(drafts, tokens, accepted),
            "num_speculative_tokens": self.num_speculative_tokens,
            "num_lookahead_tokens": self.num_lookahead_tokens,
        }
        for i, count in enumerate(self.num_accepted_tokens_per_pos):  # (a scalar a column)
            out[f"spec_decode_num_accepted_tokens_pos{i}"] = count
        return out
