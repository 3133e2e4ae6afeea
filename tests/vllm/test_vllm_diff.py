"""``make test-vllm``: kvsim's ``vllm-v1`` profile against vLLM's own v1 Scheduler, step by step.

Skipped unless ``.venv-vllm`` exists (``scripts/vllm_venv.sh`` builds it; ``make test-vllm``
does both); ``make test`` leaves it out (marker ``vllm``). ``KVSIM_VLLM_WORKLOADS`` sets the
number of workloads of each family (default 1000): ``base`` (``random_workload``), ``spec``
(speculative decoding, ``random_spec_workload``), ``hybrid`` (a full and a sliding-window KV
cache group over one pool) and ``hybrid-spec`` (the two together). ``compare.py`` documents the
records compared.
"""

from __future__ import annotations

import os

import pytest

from tests.vllm.compare import compare, describe, summary, vllm_python
from tests.vllm.workloads import FAMILIES

pytestmark = pytest.mark.vllm


@pytest.mark.parametrize("family", FAMILIES)
def test_vllm_v1_steps_match_vllm_scheduler(family):
    python = vllm_python()
    if python is None:
        pytest.skip(".venv-vllm is not built (scripts/vllm_venv.sh, or make test-vllm)")
    num = int(os.environ.get("KVSIM_VLLM_WORKLOADS", "1000"))
    found = compare(num, python=python, family=family)
    told = summary(found, num, family)
    print("\n" + told)
    shown = [f"[{path}] {describe(m)}" for path, missed in found.items() for m in missed[:2]]
    assert not shown, told + "; the first differences:\n" + "\n\n".join(shown)
