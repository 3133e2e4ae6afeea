"""A fleet in one SimPy environment: replicas (each the one ``Engine``), a router, and the
prefill-to-decode handoff of disaggregated serving.

Co-located: a request arrives, the router picks a replica among all of them, its engine serves
it (an ``n > 1`` request's samples all where the first went: vLLM's router sends the client
request once, and that server's engine fans it out). Disaggregated
(``fleet.prefill_replicas > 0``): the router picks a prefill replica, which serves a copy of
the request that stops after its first token (vLLM's disaggregated proxy sends the prefill
instance ``max_tokens = 1``); when that copy finishes the router picks a decode
replica, which takes blocks for the whole prompt (less its own prefix hits) at its next step,
then waits while the KV crosses the link (``LinkSpec``: latency + bytes per GPU / bandwidth);
once the KV is there the request joins its waiting queue with every prompt token but the last
computed, and its first step computes that token and samples the first output token (vLLM
0.34.0 ``Scheduler._update_waiting_for_remote_kv``: a request whose whole prompt arrived
recomputes its last token). So its TTFT is prefill + transfer + the decode replica's first step
(plus any queueing on either side). The prefill replica frees the copy's blocks as it finishes
(vLLM's NIXL connector keeps them until the decode side has read them: a difference of the
transfer's milliseconds of KV held, not modelled).
"""

from __future__ import annotations

from array import array
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from kvsim.base.units import cdiv
from kvsim.config import SimConfig, kv_bytes_per_token_per_gpu
from kvsim.config.fleet import FleetSpec
from kvsim.config.hardware import ParallelConfig
from kvsim.engine.loop import Engine
from kvsim.engine.request_log import RequestLog
from kvsim.fleet.clients import ClosedLoop
from kvsim.fleet.replica import Replica, Role
from kvsim.fleet.routers import Router, make_router
from kvsim.workload.request import Request

if TYPE_CHECKING:
    from collections.abc import Callable

    import simpy


def prefill_copy(request: Request) -> Request:
    """The request a prefill replica serves: the same prompt, one output token."""
    return replace(request.spec, output_tokens=1, max_tokens=1).new_request()


def transfer_bytes_per_gpu(config: SimConfig, tokens: int) -> int:
    """KV bytes one GPU of a replica of ``config`` sends the decode replica for a request's
    first ``tokens`` tokens: every attention layer's (a drafter's too) for every token; in
    hybrid KV cache groups, a sliding group's only for its last ``cdiv(W, B) + 1`` blocks and a
    state group's one state page a layer (vLLM 0.34.0's NIXL connector clips each group's
    block list so, ``nixl/base_scheduler.py``, ``get_exchange_clipped_blocks``)."""
    groups = config.kv_groups
    if groups is None:
        return tokens * config.bytes_per_token
    b = groups.block_size_tokens
    total = 0
    for group in groups.groups:
        layer_bytes = group.num_real_layers * groups.layer_bytes_per_token
        if group.kind == "state":
            total += b * layer_bytes
        elif group.sliding_window_tokens is not None:
            window_blocks = cdiv(group.sliding_window_tokens, b) + 1
            total += min(tokens, window_blocks * b) * layer_bytes
        else:
            total += tokens * layer_bytes
    return total


def transfer_s(
    config_p: SimConfig, config_d: SimConfig, link_spec: FleetSpec, tokens: int
) -> float:
    """Seconds to move ``tokens`` tokens of KV from a prefill to a decode replica: the link's
    latency plus the larger side's per-GPU share of the bytes (``transfer_bytes_per_gpu``)
    over one GPU's link (every GPU moves its own shard at once)."""
    link = link_spec.link
    per_gpu = max(transfer_bytes_per_gpu(c, tokens) for c in (config_p, config_d))
    return link.latency_s + per_gpu / link.bandwidth_bytes_per_s


def transfer_bytes_whole(config: SimConfig, tokens: int) -> int:
    """``transfer_bytes_per_gpu`` for the whole replica: every GPU's shard, heads that tensor
    parallelism replicates counted once (the per-GPU bytes scaled by the model's whole KV per
    token over one GPU's)."""
    model, dtype, draft = config.model, config.cache.kv_cache_dtype, config.draft_kv_layers
    whole = kv_bytes_per_token_per_gpu(model, ParallelConfig(), dtype, draft)
    one_gpu = kv_bytes_per_token_per_gpu(model, config.parallel, dtype, draft)
    return round(transfer_bytes_per_gpu(config, tokens) * whole / one_gpu)


class Fleet:
    """Replicas and a router in one environment (see the module docstring).

    Args:
        env: the SimPy environment.
        config: the fleet's config (``fleet`` may be ``None``: one replica, closed loop).
        requests: the runnable workload, in arrival order (row = index).
        on_finish: progress callback, called with 1 per finished request.
    """

    def __init__(
        self,
        env: simpy.Environment,
        config: SimConfig,
        requests: list[Request],
        on_finish: Callable[[int], None] | None = None,
    ) -> None:
        self.env = env
        self.config = config
        self.spec = spec = config.fleet or FleetSpec()
        self.replicas: list[Replica] = []
        for i, cfg in enumerate(config.replica_configs):
            role: Role = "both"
            if spec.disaggregated:
                role = "prefill" if i < spec.prefill_replicas else "decode"
            engine = Engine(env, cfg, [], workload=requests, on_done=self._done_on(i))
            if role == "decode":
                engine.on_receive = self._receive_on(i)
            self.replicas.append(Replica(i, role, cfg, engine))
        self.front = [r for r in self.replicas if r.role != "decode"]
        self.back = [r for r in self.replicas if r.role == "decode"]
        self.router = make_router(spec)
        num = len(requests)
        self.sent_s = np.array([r.arrival_time_s for r in requests], dtype=np.float64)
        self.served = RequestLog(self.sent_s)
        self.prefilled = RequestLog(self.sent_s) if spec.disaggregated else None
        self.replica_of = np.full(num, -1, dtype=np.int64)
        self.prefill_of = np.full(num, -1, dtype=np.int64)
        # disaggregated, by row: when the proxy sent the request to its decode replica (its
        # prefill copy's end), and the tokens that replica pulled
        self.handoff_s = np.full(num, np.nan)
        self.pulled_tokens = np.zeros(num, dtype=np.int64)
        self.transfer_s = array("d")
        self.transfer_bytes = 0
        self.on_finish = on_finish
        self.closed: ClosedLoop | None = None
        self._waiting_decode: dict[int, Request] = {}  # row -> request while it prefills
        # where each n > 1 client request went, before and after a disaggregated handoff
        self._front_routes = ClientRoutes()
        self._back_routes = ClientRoutes()

    def start(self) -> None:
        """Start every replica's engine loop (SimPy processes)."""
        for r in self.replicas:
            self.env.process(r.engine.engine_loop())

    @property
    def num_finished(self) -> int:
        return len(self.served)

    # -- requests in ----------------------------------------------------------------------------
    def send(self, row: int, req: Request) -> None:
        """A client sends the ``row``-th request now: the router picks its (prefill) replica."""
        self.sent_s[row] = req.arrival_time_s
        served = req
        if self.spec.disaggregated:
            self._waiting_decode[row] = req
            served = prefill_copy(req)
        index, new = self._front_routes.route(self.router, served, self.front)
        target = self.front[index]
        target.num_outstanding += new
        target.num_routed += 1
        target.engine.submit(served, row)

    def _done_on(self, index: int) -> Callable[[int, Request], None]:
        def done(row: int, req: Request) -> None:
            self._done(index, row, req)

        return done

    def _done(self, index: int, row: int, req: Request) -> None:
        replica = self.replicas[index]
        routes = self._back_routes if replica.role == "decode" else self._front_routes
        replica.num_outstanding -= routes.ended(req)
        if replica.role == "prefill":
            assert self.prefilled is not None
            self.prefilled.add(row, req)
            self.prefill_of[row] = index
            self._hand_off(row, req)
            return
        self.served.add(row, req)
        self.replica_of[row] = index
        if self.closed is not None:
            self.closed.finished(row)
        if self.on_finish is not None:
            self.on_finish(1)

    # -- disaggregated prefill ------------------------------------------------------------------
    def _hand_off(self, row: int, copy: Request) -> None:
        """The prefill copy finished: the router picks a decode replica for the request."""
        req = self._waiting_decode.pop(row)
        self.handoff_s[row] = self.env.now  # (a fresh request there: scheduled, preempted anew)
        index, new = self._back_routes.route(self.router, req, self.back)
        target = self.back[index]
        target.num_outstanding += new
        target.num_routed += 1
        target.engine.expect(req, row)

    def _receive_on(self, index: int) -> Callable[[Request, int, int], None]:
        def receive(req: Request, row: int, tokens: int) -> None:
            self._receive(index, req, row, tokens)

        return receive

    def _receive(self, index: int, req: Request, row: int, tokens: int) -> None:
        """Decode replica ``index`` holds blocks for ``req``: its ``tokens`` of KV cross the
        link, then it joins the replica's waiting queue."""
        source = self.replicas[int(self.prefill_of[row])]
        replica = self.replicas[index]
        self.pulled_tokens[row] = tokens
        seconds = transfer_s(source.config, replica.config, self.spec, tokens)
        self.transfer_s.append(seconds)
        self.transfer_bytes += transfer_bytes_whole(replica.config, tokens)
        arrived = self.env.timeout(seconds)
        arrived.callbacks.append(lambda _event: self._arrived(replica.engine, req, row))

    @staticmethod
    def _arrived(engine: Engine, req: Request, row: int) -> None:
        req.num_computed_tokens = req.prompt_tokens - 1  # the last prompt token is recomputed
        engine.submit(req, row)


class ClientRoutes:
    """Where each client request of ``n > 1`` went on one side of the router, and how many of
    its samples are outstanding there: vLLM's router sends the client request once, the
    server's engine fans it out into samples (``AsyncLLM.add_request``), and the router counts
    one request outstanding until its last sample ends."""

    def __init__(self) -> None:
        self._open: dict[int, list[int]] = {}  # parent id -> [replica index, samples out]

    def route(self, router: Router, req: Request, candidates: list[Replica]) -> tuple[int, bool]:
        """``(index into candidates, new)``: the router's pick for ``req``, or where its
        request's first sample went (``new`` False: it adds no request outstanding)."""
        parent = req.parent_id
        if parent is None:
            return router.pick(req, candidates), True
        entry = self._open.get(parent)
        new = entry is None
        if entry is None:
            entry = self._open[parent] = [router.pick(req, candidates), 0]
        entry[1] += 1
        return entry[0], new

    def ended(self, req: Request) -> bool:
        """Whether ``req`` ending (routed by ``route``) ends its client request: its last
        sample outstanding."""
        parent = req.parent_id
        if parent is None:
            return True
        entry = self._open[parent]
        entry[1] -= 1
        if entry[1]:
            return False
        del self._open[parent]
        return True
