"""The requests table of a run, written as requests finish, so the run forgets finished requests.

A ``Request`` with its numbers costs a few hundred bytes of Python objects (more with a prompt's
token segments); a million-request run that kept them all to build its table at the end held
them for the whole run. ``RequestLog`` keeps a finished request's row as 8 bytes a value in typed
columns instead, and the engine lets go of the request.
"""

from __future__ import annotations

from array import array
from typing import Any

import numpy as np
import numpy.typing as npt

from kvsim.results.columns import REQUEST_COLUMNS
from kvsim.workload.request import Request

_INT_FIELDS = (
    "req_id",
    "prompt_tokens",
    "output_tokens",
    "max_tokens",
    "n",
    "beam_width",
    "num_preemptions",
    "num_cached_tokens",
    "num_draft_outputs",
)
_FLOAT_FIELDS = ("first_scheduled_time_s", "first_token_time_s", "finish_time_s")


class RequestLog:
    """Rows of finished requests (``results.REQUEST_COLUMNS``), kept in finish order with each
    request's row in the workload.

    Args:
        arrival_time_s: every request's arrival time in workload order (seconds), typed as
            pandas types the column: int64 when every time is an int, else float64.
    """

    def __init__(self, arrival_time_s: npt.NDArray[Any]) -> None:
        self.arrival_time_s = arrival_time_s
        self._rows = array("q")
        self._ints: dict[str, array[Any]] = {name: array("q") for name in _INT_FIELDS}
        self._floats: dict[str, array[Any]] = {name: array("d") for name in _FLOAT_FIELDS}
        self._parent_id = array("q")
        self._no_parent = array("b")
        # bound appends, in _INT_FIELDS then _FLOAT_FIELDS order (``add`` writes them in it)
        self._appends = (
            self._rows.append,
            *(c.append for c in (*self._ints.values(), *self._floats.values())),
            self._parent_id.append,
            self._no_parent.append,
        )

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, row: int, req: Request) -> None:
        """Log finished ``req``, the workload's ``row``-th request."""
        (
            rows,
            ids,
            prompts,
            outputs,
            max_tokens,
            samples,
            widths,
            preemptions,
            cached,
            drafted,
            scheduled,
            first,
            finish,
            parents,
            orphans,
        ) = self._appends
        rows(row)
        ids(req.req_id)
        prompts(req.prompt_tokens)
        outputs(req.output_tokens)
        max_tokens(req.max_tokens)
        samples(req.n)
        widths(req.beam_width)
        preemptions(req.num_preemptions)
        cached(req.num_cached_tokens)
        drafted(req.num_draft_outputs)
        scheduled(req.first_scheduled_time_s)
        first(req.first_token_time_s)
        finish(req.finish_time_s)
        parent = req.parent_id
        parents(0 if parent is None else parent)
        orphans(parent is None)

    def columns(self) -> dict[str, npt.NDArray[Any]]:
        """``REQUEST_COLUMNS`` in workload order as numpy arrays, once every request finished.

        ``parent_id`` is a masked int64 array (masked: no parent); the others are int64 or
        float64, as pandas types ``results.request_frame`` of the same requests.
        """
        num_rows = len(self.arrival_time_s)
        if len(self._rows) != num_rows:
            raise ValueError(f"{len(self._rows)} of {num_rows} requests finished")
        rows = np.frombuffer(self._rows, np.int64)

        def in_order(values: array[Any], dtype: npt.DTypeLike) -> npt.NDArray[Any]:
            out = np.empty(num_rows, dtype)
            out[rows] = np.frombuffer(values, dtype)
            return out

        columns: dict[str, npt.NDArray[Any]] = {
            "parent_id": np.ma.MaskedArray(
                in_order(self._parent_id, np.int64), in_order(self._no_parent, np.bool_)
            ),
            "arrival_time_s": self.arrival_time_s,
            **{name: in_order(v, np.int64) for name, v in self._ints.items()},
            **{name: in_order(v, np.float64) for name, v in self._floats.items()},
        }
        return {name: columns[name] for name in REQUEST_COLUMNS}
