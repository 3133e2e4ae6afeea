"""The --fit-parts figure: every step drawn once in each panel, at its own coordinates."""

from __future__ import annotations

import numpy as np

from kvsim.view.calibration_plots import steps_figure


def test_every_step_is_drawn_at_its_times() -> None:
    points = [
        {
            "model": "a tp1",
            "phase": "decode",
            "split": "train",
            "measured_ms": 4.0,
            "predicted_ms": 4.2,
            "error_pct": 5.0,
        },
        {
            "model": "a tp1",
            "phase": "prefill",
            "split": "held out",
            "measured_ms": 100.0,
            "predicted_ms": 90.0,
            "error_pct": -10.0,
        },
        {
            "model": "b tp4",
            "phase": "decode",
            "split": "held out",
            "measured_ms": 12.0,
            "predicted_ms": 12.0,
            "error_pct": 0.0,
        },
    ]
    scatter, errors = steps_figure(points, title="t").axes
    drawn = np.concatenate([c.get_offsets() for c in scatter.collections])
    assert sorted(map(tuple, drawn)) == [(4.0, 4.2), (12.0, 12.0), (100.0, 90.0)]
    drawn = np.concatenate([c.get_offsets() for c in errors.collections])
    assert sorted(map(tuple, drawn)) == [(4.0, 5.0), (12.0, 0.0), (100.0, -10.0)]
