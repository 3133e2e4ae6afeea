"""Build hook: with ``KVSIM_COMPILE=1`` the engine's modules are compiled to C by mypyc when
the package is built (as black and mypy ship themselves); otherwise the wheel holds the Python
sources, which run unchanged. ``make native`` builds the compiled package into ``.venv-native``.

The compiled modules are the engine's hot path: the KV policies, the scheduler, the cost
model, the engine loop and its recorder, and the request records they read.
"""

from __future__ import annotations

import os
from pathlib import Path

from setuptools import setup

COMPILED = [
    "kvsim/base/units.py",  # (cdiv, called by the engine per allocation)
    "kvsim/core/cost.py",
    *sorted(str(p) for p in Path("kvsim/core/kv").glob("*.py") if p.name != "__init__.py"),
    *sorted(str(p) for p in Path("kvsim/core/scheduler").glob("*.py") if p.name != "__init__.py"),
    "kvsim/engine/frames.py",
    "kvsim/engine/group_recorder.py",
    "kvsim/engine/loop.py",
    "kvsim/engine/recorder.py",
    "kvsim/engine/request_log.py",
    "kvsim/engine/span.py",
    "kvsim/engine/timing.py",
    "kvsim/workload/request.py",
    "kvsim/workload/tokens.py",
]

ext_modules = []
if os.environ.get("KVSIM_COMPILE", "").strip().lower() in ("1", "true", "yes", "on"):
    from mypyc.build import mypycify

    ext_modules = mypycify(COMPILED, group_name="kvsim._engine", opt_level="3")

setup(ext_modules=ext_modules)
