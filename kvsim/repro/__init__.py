"""Reproductions of the PagedAttention paper's serving results (Kwon et al., SOSP 2023).

``fig13`` (average batched requests), ``fig12`` (sustainable request rates) and ``preemption``
(§7.3, recompute vs swap against block size), all on the paper's setup: OPT-13B on one
A100-40GB with 12 GiB of KV, max_model_len 2048, Orca baselines as contiguous buddy allocation
with Max/Pow2/Oracle reservation, vLLM as paged allocation at 16 tokens per block, and the
``vllm-2023`` cost preset. ``python -m kvsim.repro --help`` runs them.
"""
