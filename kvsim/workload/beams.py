"""Beam search's candidates: which continues which, a seeded one-parameter branching model.

Beam search keeps ``k`` candidates. ``BeamModel`` is a one-parameter branching model of which
candidate continues which: a candidate keeps its slot while its own best continuation stays in
the top ``k``; it is displaced when another candidate's runner-up continuation outscores it. At
each decode step each candidate branches (its runner-up enters the beam) with a probability that
falls with the context: ``min(0.5, branch_tokens / n)`` when the sequences hold ``n`` tokens
(prompt and output so far). Each branching candidate displaces one candidate that did not
branch, chosen uniformly, whose slot becomes a fork of the brancher (a neutral Moran process, so
lineages merge at a per-pair rate that falls as the beam widens: wider beams keep longer private
branches). A rate falling as ``1 / n`` has no length scale of its own: a reshuffle of the beam is
as likely between ``n`` and ``2 n`` tokens at any ``n``, so the candidates' private tails grow
with the sequence (a constant rate merges them after a fixed number of tokens, which shares far
too much of long outputs). The ``1 / n`` form is an assumption chosen among the forms tried
(README, Figure 15), not a measured fact about language models. The workload draws each
request's tree (``Request.beam_parents``) from a generator seeded by ``(run seed, req_id)``, so a
group's tree is the same on every replay, under any allocator. The parameter is FITTED on one
beam width of one dataset (``kvsim.study.paper.fig15``); the other widths are predictions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True, slots=True)
class BeamModel:
    """Seeded one-parameter branching model of beam candidates (see the module docstring).

    Attributes:
        branch_tokens: at a step where the sequences hold ``n`` tokens, a candidate branches
            (its runner-up continuation displacing another candidate) with probability
            ``min(0.5, branch_tokens / n)``; tokens, >= 0.
        seed: base seed; a group's draws come from ``default_rng((seed, req_id))``.

    Raises:
        ValueError: ``branch_tokens`` negative or not finite.
    """

    branch_tokens: float
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.branch_tokens < float("inf"):
            raise ValueError(
                f"beam branch_tokens: must be a finite number >= 0, got {self.branch_tokens}"
            )

    def branch_probs(self, prompt_tokens: int, num_steps: int) -> npt.NDArray[np.float64]:
        """Branching probability of each candidate at each row of ``parents``: float64[num_steps].

        Row ``j`` moves the candidates before step ``j + 1`` writes token ``prompt_tokens + j + 1``
        (0-based), when they hold ``prompt_tokens + j + 1`` tokens.
        """
        context = prompt_tokens + 1 + np.arange(num_steps, dtype=np.float64)
        # past 0.5, branchers outnumber the candidates they can displace and sharing falls again
        # (at 1 nobody is displaced, as at 0): the model's useful range ends there
        return np.minimum(0.5, self.branch_tokens / context)

    def parents(
        self, req_id: int, width: int, num_steps: int, prompt_tokens: int
    ) -> npt.NDArray[np.int64]:
        """Parent candidate of each candidate after each step: int64[num_steps, width].

        Row ``j`` maps the candidates entering step ``j + 1`` to those that left step ``j``:
        a candidate that was not displaced keeps its own index; a displaced slot holds the
        index of the candidate that branched into it.

        Args:
            prompt_tokens: the request's prompt (the context before its first output token).
        """
        rng = np.random.default_rng((self.seed, req_id))
        probs = self.branch_probs(prompt_tokens, num_steps)
        branches = rng.random((num_steps, width)) < probs[:, None]
        order = rng.random((num_steps, width))  # which non-branchers are displaced first
        out = np.tile(np.arange(width, dtype=np.int64), (num_steps, 1))
        # per step: stayers in displacement order, then branchers by index; the c-th brancher
        # takes the c-th stayer's slot, for c below min(branchers, stayers)
        victims = np.argsort(np.where(branches, np.inf, order), axis=1, kind="stable")
        branchers = np.argsort(np.where(branches, out, width), axis=1, kind="stable")
        num_branch = branches.sum(axis=1)
        pairs = np.arange(width) < np.minimum(num_branch, width - num_branch)[:, None]
        rows = np.broadcast_to(np.arange(num_steps)[:, None], pairs.shape)
        out[rows[pairs], victims[pairs]] = branchers[pairs]
        return out
