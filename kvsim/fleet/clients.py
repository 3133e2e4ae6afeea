"""The load: open-loop arrivals (each request at its time) or closed-loop users.

Closed loop follows ``vllm bench serve --max-concurrency``: at most ``max_concurrency`` requests
are in flight, one per user, each sent at the later of its arrival time and the moment its user
is free. A user takes a whole session (a conversation's turns, in workload order; a request
without a session is a session of its own) and is free ``think_time_s`` after its request
finished. A client request of ``n > 1`` (vLLM v1 fans it out into samples sharing a
``parent_id``) is one request of its user: its samples are sent together, and the user is free
once the last has finished. SimPy processes: one for open loop, one per user for closed loop.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING, Any

from kvsim.workload.request import Request

if TYPE_CHECKING:
    import simpy

Send = Callable[[int, Request], None]


def open_loop(
    env: simpy.Environment, requests: Sequence[Request], send: Send
) -> Generator[simpy.Event, Any, None]:
    """SimPy process: sends the ``row``-th request at its ``arrival_time_s``."""
    for row, req in enumerate(requests):
        delay = req.arrival_time_s - env.now
        if delay > 0:
            yield env.timeout(delay)
        send(row, req)


def sessions_of(requests: Sequence[Request]) -> list[list[list[int]]]:
    """The client requests, each as its rows (a fanned-out request's samples, those sharing its
    ``parent_id``; else one row), grouped by ``session_id`` in the order of each session's first
    request; a request without a session is one alone."""
    groups: dict[int, list[list[int]]] = {}
    clients: dict[int, list[int]] = {}  # parent_id -> its samples' rows
    out: list[list[list[int]]] = []
    for row, req in enumerate(requests):
        parent = req.parent_id
        if parent is not None and parent in clients:
            clients[parent].append(row)
            continue
        client = [row]
        if parent is not None:
            clients[parent] = client
        if req.session_id is None:
            out.append([client])
            continue
        group = groups.get(req.session_id)
        if group is None:
            group = groups[req.session_id] = []
            out.append(group)
        group.append(client)
    return out


class ClosedLoop:
    """``max_concurrency`` users sending the workload's sessions (see the module docstring).

    Args:
        env: the SimPy environment.
        requests: the workload, in order.
        users: how many users (``workload.max_concurrency``).
        think_time_s: a user's pause between a finish and its next request, seconds.
        send: hands a request to the fleet; ``finished(row)`` must be called when it finishes.
    """

    def __init__(
        self,
        env: simpy.Environment,
        requests: Sequence[Request],
        users: int,
        think_time_s: float,
        send: Send,
    ) -> None:
        self.env = env
        self.requests = requests
        self.think_time_s = think_time_s
        self.send = send
        self._sessions = deque(sessions_of(requests))
        self._done: dict[int, simpy.Event] = {}
        self.processes = [env.process(self._user()) for _ in range(min(users, len(self._sessions)))]

    def finished(self, row: int) -> None:
        """The ``row``-th request finished: its user may go on."""
        event = self._done.pop(row, None)
        if event is not None:
            event.succeed()

    def _user(self) -> Generator[simpy.Event, Any, None]:
        """SimPy process: one user, taking sessions until none is left."""
        env = self.env
        free_s = 0.0
        while self._sessions:
            for rows in self._sessions.popleft():
                delay = max(self.requests[rows[0]].arrival_time_s, free_s) - env.now
                if delay > 0:
                    yield env.timeout(delay)
                done = []
                for row in rows:  # (a fanned-out request's samples, sent together)
                    done.append(env.event())
                    self._done[row] = done[-1]
                for row in rows:
                    req = self.requests[row]
                    req.arrival_time_s = env.now  # sent now: its latencies count from here
                    self.send(row, req)
                yield env.all_of(done)
                free_s = env.now + self.think_time_s
