"""The README's command table is `kvsim --help`'s command list: same commands, same order, same
one-line descriptions."""

from __future__ import annotations

import re
from pathlib import Path

import typer

from kvsim.cli import app

README = Path(__file__).resolve().parents[1] / "README.md"


def _readme_commands() -> list[tuple[str, str]]:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Commands", 1)[1].split("\n## ", 1)[0]
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


def test_readme_command_table_matches_kvsim_help() -> None:
    assert _readme_commands() == _help_commands()


def test_readme_makes_its_two_commands_first() -> None:
    text = README.read_text(encoding="utf-8")
    first_block = text.split("```bash", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in first_block.strip().splitlines()]
    assert commands == ["make reproduce", "make test"]
