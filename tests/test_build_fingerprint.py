"""The fingerprint a sweep point records of the kvsim that ran it (``kvsim.base.build``)."""

from __future__ import annotations

import re

from kvsim.base.build import package_fingerprint, source_build


def _package(root):
    (root / "core").mkdir(parents=True)
    (root / "core" / "engine.py").write_text("STEP = 1\n")
    (root / "models.toml").write_text("[m]\nlayers = 2\n")
    (root / "NOTES.md").write_text("notes\n")
    (root / "core" / "engine.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\x7fELF1")
    (root / "core" / "__pycache__").mkdir()
    (root / "core" / "__pycache__" / "engine.cpython-311.pyc").write_bytes(b"pyc1")


def test_a_source_or_data_change_changes_it(tmp_path) -> None:
    _package(tmp_path)
    before = package_fingerprint(tmp_path)
    assert re.fullmatch(r"[0-9a-f]{16}", before)
    (tmp_path / "core" / "engine.py").write_text("STEP = 2\n")
    after_source = package_fingerprint(tmp_path)
    assert after_source != before
    (tmp_path / "models.toml").write_text("[m]\nlayers = 3\n")
    assert package_fingerprint(tmp_path) not in (before, after_source)


def test_a_renamed_file_changes_it(tmp_path) -> None:
    _package(tmp_path)
    before = package_fingerprint(tmp_path)
    (tmp_path / "core" / "engine.py").rename(tmp_path / "core" / "engine2.py")
    assert package_fingerprint(tmp_path) != before


def test_binaries_byte_code_and_notes_do_not(tmp_path) -> None:
    """The compiled and the interpreted install of one source tree agree."""
    _package(tmp_path)
    before = package_fingerprint(tmp_path)
    (tmp_path / "core" / "engine.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\x7fELF2")
    (tmp_path / "core" / "__pycache__" / "engine.cpython-311.pyc").write_bytes(b"pyc2")
    (tmp_path / "NOTES.md").write_text("other notes\n")
    assert package_fingerprint(tmp_path) == before


def test_the_installed_kvsim_has_one() -> None:
    assert re.fullmatch(r"[0-9a-f]{16}", source_build())
    assert source_build() == source_build()
