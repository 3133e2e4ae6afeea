"""Whole synthetic steps of one tensor-parallel rank, timed on a GPU (``steps.csv`` of
``kvsim calibrate --parts``).

A forward of every layer of the rank, each layer with its own random bf16 weights: RMSNorm, QKV,
attention over a contiguous KV cache (decode: the new K/V row written, grouped-query heads folded
into the query length; prefill: a causal chunk), O, RMSNorm, gate/up, SiLU, down; the LM head on
each sequence's last token. Replayed from a CUDA graph when capture works (no launch overhead).
PyTorch is passed in (imported by ``measure_parts``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kvsim.calibrate.parts_setup import PartModel, PartsGrid, Timer, decode_points


class SyntheticRank:
    """Every layer of one rank with its own random bf16 weights, and a contiguous KV cache."""

    def __init__(
        self, torch: Any, model: PartModel, device: str, layers: int | None = None
    ) -> None:
        self.torch, self.model, self.device = torch, model, device
        self.num_layers = layers or model.num_layers
        shapes = model.linear_shapes()
        self.weights = [
            {
                op: torch.randn(k, n, dtype=torch.bfloat16, device=device) * 0.02
                for op, (k, n) in shapes.items()
            }
            for _ in range(self.num_layers)
        ]
        self.head = (
            torch.randn(model.hidden, model.vocab, dtype=torch.bfloat16, device=device) * 0.02
        )

    def step(self, batch: int, q_len: int, ctx: int) -> Callable[[], object]:
        """A launch of one forward: ``batch`` sequences of ``q_len`` new tokens over ``ctx``
        tokens in all (decode: ``q_len = 1``; prefill: ``q_len = ctx``, causal)."""
        torch, m, dev = self.torch, self.model, self.device
        fn = torch.nn.functional
        d, group = m.head_dim, m.heads // m.kv_heads
        x = torch.randn(batch * q_len, m.hidden, dtype=torch.bfloat16, device=dev)
        caches = [
            (
                torch.randn(batch, m.kv_heads, ctx, d, dtype=torch.bfloat16, device=dev),
                torch.randn(batch, m.kv_heads, ctx, d, dtype=torch.bfloat16, device=dev),
            )
            for _ in range(self.num_layers)
        ]
        q_width, kv_width = m.heads * d, m.kv_heads * d
        gqa = {"enable_gqa": True} if group > 1 else {}

        def forward() -> object:
            h = x
            for w, (k_cache, v_cache) in zip(self.weights, caches, strict=True):
                a = fn.rms_norm(h, (m.hidden,))
                qkv = a @ w["qkv"]
                q = qkv[:, :q_width]
                if q_len == 1:  # decode: the new K/V row is written, the group folded
                    k_new = qkv[:, q_width : q_width + kv_width]
                    v_new = qkv[:, q_width + kv_width :]
                    k_cache[:, :, ctx - 1] = k_new.reshape(batch, m.kv_heads, d)
                    v_cache[:, :, ctx - 1] = v_new.reshape(batch, m.kv_heads, d)
                    q4 = q.view(batch, m.kv_heads, group, d)
                    o = fn.scaled_dot_product_attention(q4, k_cache, v_cache)
                else:
                    q4 = q.view(batch, q_len, m.heads, d).transpose(1, 2)
                    o = fn.scaled_dot_product_attention(
                        q4, k_cache, v_cache, is_causal=True, **gqa
                    ).transpose(1, 2)
                h = h + o.reshape(batch * q_len, q_width) @ w["o"]
                a = fn.rms_norm(h, (m.hidden,))
                gate, up = (a @ w["gate_up"]).chunk(2, dim=-1)
                h = h + (fn.silu(gate) * up) @ w["down"]
            last = h.view(batch, q_len, m.hidden)[:, -1]
            return fn.rms_norm(last, (m.hidden,)) @ self.head

        return forward


def captured(
    torch: Any, launch: Callable[[], object], device: str
) -> tuple[Callable[[], object], bool]:
    """``launch`` replayed from a CUDA graph when capture works (no launch overhead), else as is."""
    if device != "cuda":
        return launch, False
    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                launch()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            launch()
        return graph.replay, True
    except Exception:  # a kernel that cannot be captured: time it eagerly and say so
        torch.cuda.synchronize()
        return launch, False


def time_steps(
    torch: Any,
    timer: Timer,
    models: Sequence[PartModel],
    grid: PartsGrid,
    layers: int | None = None,
) -> list[dict[str, object]]:
    """Whole synthetic forwards of each rank: every decode point and every prefill chunk."""
    rows = []
    for model in models:
        rank = SyntheticRank(torch, model, timer.device, layers)
        points = [("decode", b, 1, c) for b, c in decode_points(grid)]
        points += [("prefill", 1, c, c) for c in grid.prefill_chunks]
        for phase, batch, q_len, ctx in points:
            launch, graph = captured(torch, rank.step(batch, q_len, ctx), timer.device)
            s = timer(launch)
            rows.append(
                {
                    "model": model.name,
                    "num_layers": rank.num_layers,
                    "phase": phase,
                    "batch": batch,
                    "query_tokens": q_len,
                    "context_tokens": ctx,
                    "cuda_graph": int(graph),
                    "seconds": s,
                }
            )
            del launch
            if timer.cuda:
                torch.cuda.empty_cache()
        del rank
    return rows
