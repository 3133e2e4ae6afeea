"""Paper results and reference studies, each an experiment of ``experiments/`` run by the sweep
engine and compared with published numbers kept as data (``kvsim/data/paper/``).

``kvsim reproduce NAME`` (``reproduce(NAME)``): ``fig2`` (the main job), ``fig12``, ``fig13``,
``fig15``, ``preemption`` (§7.3) of the PagedAttention paper (Kwon et al., SOSP 2023), and
``prefix-caching`` (Mooncake trace hit rates). Each writes its sweep to ``OUT/NAME`` and, beside
it, ``NAME.csv`` (kvsim next to the paper) and ``NAME.png``.
"""

from __future__ import annotations

from kvsim.study.paper.context import Reproduction
from kvsim.study.paper.run import REPRODUCTIONS, reproduce

__all__ = ["REPRODUCTIONS", "Reproduction", "reproduce"]
