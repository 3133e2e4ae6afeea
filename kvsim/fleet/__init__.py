"""A fleet: replicas of the one engine behind a router, in one simulated clock, with
disaggregated prefill/decode and closed-loop load (``simulate`` runs any config)."""

from kvsim.fleet.simulate import is_fleet, simulate, simulate_fleet

__all__ = ["is_fleet", "simulate", "simulate_fleet"]
