"""Builds the compiled engine (``kvsim.native``) in place: ``python -m kvsim.native_build``
(``make native``; ``make test``, ``make bench`` and ``make reproduce`` run it first). Needs mypy
(which carries mypyc), setuptools and a C compiler; without them kvsim runs its Python sources.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path

from kvsim.native import (
    GROUP,
    MANIFEST,
    NATIVE_SOURCES,
    PACKAGE_DIR,
    build_state,
    built_files,
    fingerprint,
)

logger = logging.getLogger(__name__)


def build(package_dir: Path = PACKAGE_DIR) -> bool:
    """Compile ``NATIVE_SOURCES`` with mypyc, in place, and record their fingerprint; nothing to
    do when the build is current. Takes about 1.5 minutes of one core (one large C file).

    Returns:
        Whether a current build is in place. Without mypy, setuptools or a C compiler, or on a
        failed compilation, ``False`` and a logged reason: kvsim then runs its Python sources.
    """
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    for path in set(package_dir.rglob(f"*{suffix}")) - set(built_files(package_dir)):
        path.unlink()  # a module no longer compiled: its stale extension would shadow it
    state = build_state(package_dir, honour_env=False)
    if state == "current":
        return True
    try:
        from mypyc.build import mypycify
        from setuptools import setup
    except ImportError as exc:
        logger.warning("kvsim.native_build: cannot compile (%s); the Python sources run", exc)
        if state == "stale":  # nothing will rebuild it here: no warning at every import
            _remove_build(package_dir, suffix)
        return False
    _remove_build(package_dir, suffix)
    before = fingerprint(package_dir)
    cwd = Path.cwd()
    os.chdir(package_dir.parent)  # mypyc names modules by their paths from here
    try:
        setup(
            name="kvsim-native",
            ext_modules=mypycify(
                [f"{package_dir.name}/{source}" for source in NATIVE_SOURCES],
                group_name=GROUP,
                target_dir="build/native",
            ),
            script_args=["--quiet", "build_ext", "--inplace", "--build-temp", "build/native"],
        )
    except (SystemExit, Exception) as exc:  # setuptools exits on a compiler error
        logger.warning("kvsim.native_build: the build failed (%s); the Python sources run", exc)
        return False
    finally:
        os.chdir(cwd)
    if fingerprint(package_dir) != before:
        logger.warning("kvsim.native_build: a source changed during the build; run it again")
        return False
    (package_dir / MANIFEST).write_text(json.dumps({"fingerprint": before}) + "\n")
    return True


def _remove_build(package_dir: Path, suffix: str) -> None:
    for path in package_dir.rglob(f"*{suffix}"):
        path.unlink()
    (package_dir / MANIFEST).unlink(missing_ok=True)


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m kvsim.native_build [--state]``: build (exit 0 even where it cannot, as the
    Python sources run), or print ``build_state()``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state", action="store_true", help="print what import kvsim loads")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logger.setLevel(logging.INFO)  # setuptools lowers the root logger's level while it builds
    if args.state:
        logger.info("%s", build_state())
        return
    ready = build()
    logger.info(
        "kvsim.native_build: %s", "compiled engine ready" if ready else "the Python sources run"
    )


if __name__ == "__main__":
    main()
