"""The hostile-input harness: run one ``kvsim`` command line in-process (typer's CliRunner) from
a fresh working folder and check what a user must see for a bad input:

- the exit status (2 for a user error),
- exactly one ``error:`` line, naming the culprit (each expected fragment appears in it),
- no traceback anywhere in the output,
- no file written outside the command's output folder: every file under the test's temporary
  folder (the working folder and its siblings, where ``../x`` or an absolute path would land) is
  listed before and after, output folders excepted.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvsim.cli import app


def _listing(root: Path, skip: Iterable[Path]) -> dict[str, int]:
    """Every file below ``root`` (path -> size), output folders left out."""
    skipped = [s.resolve() for s in skip]
    found: dict[str, int] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath).resolve()
        if any(here == s or s in here.parents for s in skipped):
            dirnames[:] = []
            continue
        for name in filenames:
            path = here / name
            found[str(path)] = path.stat().st_size if path.exists() else -1
    return found


@dataclass
class Outcome:
    """What one invocation printed and returned."""

    exit_code: int
    output: str
    error_lines: list[str] = field(default_factory=list)

    @property
    def error(self) -> str:
        """The one ``error:`` line."""
        return self.error_lines[0] if self.error_lines else ""


class Hostile:
    """A working folder (``cwd``, the process's current folder during the test) with an output
    folder ``out`` beside the files a case writes (``write``); ``run`` checks a command line."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.cwd = root / "cwd"
        self.cwd.mkdir()
        self.out = self.cwd / "out"

    def write(self, name: str, content: str | bytes) -> Path:
        """Write ``content`` to ``cwd/name`` (folders created) and return the path."""
        path = self.cwd / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        return path

    def invoke(self, args: list[str]) -> Outcome:
        """Run ``kvsim ARGS`` in-process; no checks."""
        result = CliRunner().invoke(app, [str(a) for a in args], prog_name="kvsim")
        output = result.output
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            output += f"\nTraceback (escaped exception): {result.exception!r}"
        lines = [line for line in output.splitlines() if line.startswith("error:")]
        return Outcome(result.exit_code, output, lines)

    def run(
        self,
        args: list[str],
        *expected: str,
        code: int = 2,
        allowed: Iterable[Path] = (),
    ) -> Outcome:
        """Run ``kvsim ARGS`` and check the outcome (see the module docstring).

        Args:
            args: the command line after ``kvsim``.
            *expected: fragments the one error line must contain (file, field, line, value).
            code: the exit status expected.
            allowed: folders besides ``out`` and ``cwd/results`` the command may write into.
        """
        skip = [self.out, self.cwd / "results", *allowed]
        before = _listing(self.root, skip)
        outcome = self.invoke(args)
        assert outcome.exit_code == code, outcome.output
        assert "Traceback" not in outcome.output, outcome.output
        if code == 2:
            assert len(outcome.error_lines) == 1, outcome.output
            for fragment in expected:
                assert fragment in outcome.error, f"{fragment!r} not in {outcome.error!r}"
        after = _listing(self.root, skip)
        assert after == before, f"files written outside the output folder: {after.keys() - before}"
        return outcome


@pytest.fixture
def hostile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Hostile:
    """A fresh working folder, made the current folder for the test."""
    h = Hostile(tmp_path)
    monkeypatch.chdir(h.cwd)
    monkeypatch.delenv("KVSIM_DATA", raising=False)
    return h
