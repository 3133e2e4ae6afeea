"""Which kvsim computed a result: a fingerprint of the installed package's source and data.

A sweep resumes a point whose results are already on disk (``kvsim.study.sweep``), keyed by its
config. The config alone cannot tell that the simulator changed since: a point finished by an
earlier kvsim would be reused as if this one had computed it. Each point therefore records the
fingerprint of the kvsim that ran it, and a point of another fingerprint is run again.

The fingerprint hashes the package's sources and data (model and GPU tables, presets), by path
relative to the package and content; compiled extension modules, byte code and Markdown notes
are left out, so the interpreted and the compiled install of one source tree agree.
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

_SKIPPED = (".so", ".pyd", ".pyc", ".dll", ".dylib", ".md")  # (binaries, notes)


@cache
def source_build() -> str:
    """The installed kvsim's ``package_fingerprint`` (computed once a process)."""
    return package_fingerprint(Path(__file__).resolve().parent.parent)


def package_fingerprint(root: Path) -> str:
    """16 hex digits of SHA-256 over the files under ``root`` (see the module docstring)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root)
        if "__pycache__" in rel.parts or path.suffix in _SKIPPED:
            continue
        digest.update(rel.as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]
