"""The engine compiled to C by mypyc: the same source files, run about twice as fast (issue 9).

``make`` builds it in place (``python -m kvsim.native_build``): mypyc compiles the modules in
``NATIVE_SOURCES`` (engine, schedulers, allocators, recorder, cost model) from their type
annotations into one extension library, ``kvsim/_native__mypyc*.so``, with one small extension
module beside each source file, which Python then imports instead of the ``.py``. Nothing else
changes: the results are identical to the Python sources' (``tests/test_native.py`` compares
them, dtypes included), and everything runs without the build.

Built files stay in step with the sources: the build records a fingerprint of every compiled
source (``kvsim/_native.json``), and ``import kvsim`` compares it (``use_sources_if_stale``). A
source edited since the build, or ``KVSIM_PURE_PYTHON=1`` in the environment, makes kvsim's
modules load from their ``.py`` files instead (an edited source with a warning).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import warnings
import zlib
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

PACKAGE_DIR = Path(__file__).resolve().parent
NATIVE_SOURCES: tuple[str, ...] = (
    "cost.py",
    "engine.py",
    "groups.py",
    "poolmap.py",
    "recorder.py",
    "request_log.py",
    "span.py",
    "swap.py",
    "timing.py",
    "tokens.py",
    "allocators/base.py",
    "allocators/block_pool.py",
    "allocators/buddy.py",
    "allocators/contiguous.py",
    "allocators/paged.py",
    "allocators/radix.py",
    "allocators/slab.py",
    "scheduler/cohort.py",
    "scheduler/core.py",
    "scheduler/lazy.py",
    "scheduler/plan.py",
    "scheduler/v0.py",
    "scheduler/v1.py",
)
GROUP = "kvsim._native"  # the library: kvsim/_native__mypyc<suffix>
MANIFEST = "_native.json"
PURE_PYTHON_ENV = "KVSIM_PURE_PYTHON"


def fingerprint(package_dir: Path = PACKAGE_DIR) -> str:
    """CRC-32 of every compiled source's path and bytes, in ``NATIVE_SOURCES`` order (hex)."""
    crc = 0
    for source in NATIVE_SOURCES:
        crc = zlib.crc32(source.encode(), crc)
        crc = zlib.crc32((package_dir / source).read_bytes(), crc)
    return f"{crc:08x}"


def built_files(package_dir: Path) -> list[Path]:
    """The files a build puts in ``package_dir``: the library, then one extension module per
    compiled source (in ``NATIVE_SOURCES`` order), named for this interpreter."""
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    library = package_dir / (GROUP.rsplit(".", 1)[1] + "__mypyc" + suffix)
    shims = [package_dir / source.replace(".py", suffix) for source in NATIVE_SOURCES]
    return [library, *shims]


def pure_python_asked() -> bool:
    """Whether ``KVSIM_PURE_PYTHON`` asks for the sources (any value but empty, 0, false, no
    or off, in any case)."""
    return os.environ.get(PURE_PYTHON_ENV, "").strip().lower() not in (
        "",
        "0",
        "false",
        "no",
        "off",
    )


def build_state(package_dir: Path = PACKAGE_DIR, *, honour_env: bool = True) -> str:
    """What ``import kvsim`` will load: ``"current"`` (the build, in step with the sources),
    ``"absent"`` (no build: the sources), ``"stale"`` (a build older than a source, or
    incomplete: the sources) or ``"disabled"`` (``KVSIM_PURE_PYTHON=1``, unless
    ``honour_env`` is false: the sources)."""
    if honour_env and pure_python_asked():
        return "disabled"
    built = [path.exists() for path in built_files(package_dir)]
    if not any(built):
        return "absent"
    if not all(built):
        return "stale"
    try:
        recorded = json.loads((package_dir / MANIFEST).read_text())["fingerprint"]
        return "current" if recorded == fingerprint(package_dir) else "stale"
    except (OSError, ValueError, KeyError, TypeError):  # (a source or the manifest unreadable)
        return "stale"


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Finds kvsim's modules' ``.py`` files ahead of any extension module beside them (those of
    a module no longer compiled included)."""

    def __init__(self, package_dir: Path) -> None:
        self._package_dir = package_dir

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> ModuleSpec | None:
        if not fullname.startswith("kvsim."):
            return None
        source = self._package_dir.joinpath(*fullname.split(".")[1:]).with_suffix(".py")
        if not source.is_file():  # a package, or no source: the usual finders
            return None
        return importlib.util.spec_from_file_location(fullname, source)


def use_sources_if_stale() -> str:
    """Make the compiled modules load from their sources unless the build is current; called by
    ``import kvsim``, before any of them is imported. Returns ``build_state()``."""
    state = build_state()
    if state in ("stale", "disabled") and not any(
        isinstance(f, _SourceFinder) for f in sys.meta_path
    ):
        sys.meta_path.insert(0, _SourceFinder(PACKAGE_DIR))
        if state == "stale" and "kvsim.native_build" not in sys.orig_argv:  # (it rebuilds)
            warnings.warn(
                "kvsim: the compiled engine is older than its sources (or incomplete); running "
                "the Python sources. `make native` (or `python -m kvsim.native_build`) "
                "rebuilds it.",
                stacklevel=2,
            )
    return state


def native_loaded() -> bool:
    """Whether this process runs the compiled engine (``kvsim.engine`` is an extension)."""
    import kvsim.engine

    return not str(kvsim.engine.__file__).endswith(".py")
