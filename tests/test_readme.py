"""The command tables of the README and of docs/commands.md are `kvsim --help`'s command list:
same commands, same order, same one-line descriptions."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer

from kvsim.cli import app

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
COMMANDS_DOC = ROOT / "docs" / "commands.md"


def _table_commands(path: Path) -> list[tuple[str, str]]:
    """The ``| `kvsim NAME` | help |`` rows of ``path`` (of its ``## Commands`` section, if any)."""
    section = path.read_text(encoding="utf-8")
    if "## Commands" in section:
        section = section.split("## Commands", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `kvsim (\S+)` \| (.+?) \|$", section, flags=re.MULTILINE)
    return [(name, help_.strip()) for name, help_ in rows]


def _help_commands() -> list[tuple[str, str]]:
    group = typer.main.get_command(app)
    ctx = typer.Context(group)
    out = []
    for name in group.list_commands(ctx):  # type: ignore[attr-defined]
        command = group.get_command(ctx, name)  # type: ignore[attr-defined]
        first = (command.help or "").strip().splitlines()[0].strip()
        out.append((name, first))
    return out


@pytest.mark.parametrize("path", [README, COMMANDS_DOC], ids=["README", "docs-commands"])
def test_command_table_matches_kvsim_help(path: Path) -> None:
    if path == README and "## Commands" not in path.read_text(encoding="utf-8"):
        pytest.skip("the README has no command table; docs/commands.md holds it")
    assert _table_commands(path) == _help_commands()


def test_readme_makes_its_two_commands_first() -> None:
    text = README.read_text(encoding="utf-8")
    first_block = text.split("```bash", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in first_block.strip().splitlines()]
    assert commands == ["make reproduce", "make test"]


def test_readme_counts_what_the_code_holds() -> None:
    # the README said 9 trace formats and 18 reference workloads after a tenth and two more
    # were added: each count is the one its code names beside it
    from kvsim.workload import TRACE_FORMATS
    from tests.test_engine_reference import CASES

    text = " ".join(README.read_text(encoding="utf-8").split())
    assert f"{len(TRACE_FORMATS)} trace formats (`kvsim.workload.TRACE_FORMATS`" in text
    assert f"checks it on {len(CASES)} workloads (`tests/test_engine_reference.py`'s" in text


def test_readme_names_every_paper_target_it_counts() -> None:
    # "Thirteen more of the paper's results" named only the first and last target ("make fig12
    # ... make preemption"): a new user could not count them. The Makefile's PAPER list less
    # Figure 2 and kvsim's own prefix-caching study is the thirteen, each named
    makefile = (README.parent / "Makefile").read_text(encoding="utf-8")
    paper = re.search(r"^PAPER := (.*)$", makefile, re.MULTILINE)
    assert paper is not None
    more = [t for t in paper.group(1).split() if t not in ("fig2", "prefix-caching")]
    assert len(more) == 13
    text = " ".join(README.read_text(encoding="utf-8").split())
    assert f"`make {' '.join(more)}`" in text
    assert "Thirteen more of the paper's results" in text
