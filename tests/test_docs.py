"""The reference pages in docs/: their links resolve, the names they use exist, and they read as
reference, not as a diary."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md"))
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
# words of the project's own history that say nothing to a reader
DIARY = re.compile(
    r"that morning|\bUTC\b|\bmission-\d|Book Store|bookstore|the seed\b|seed's|seed lab",
    re.IGNORECASE,
)
PLAN_OR_EXPERIMENT = re.compile(r"`(?:kvsim plan|make) ([a-z0-9][a-z0-9-]+)`")


def test_there_are_docs() -> None:
    names = {p.name for p in DOCS}
    assert {"engine.md", "formats.md", "paper.md", "speed.md", "plans.md", "install.md"} <= names


@pytest.mark.parametrize("page", DOCS, ids=[p.stem for p in DOCS])
def test_links_resolve(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    broken = [
        target
        for target in LINK.findall(text)
        if "://" not in target and not (page.parent / target).exists()
    ]
    assert not broken, broken


@pytest.mark.parametrize("page", DOCS, ids=[p.stem for p in DOCS])
def test_reads_as_reference(page: Path) -> None:
    found = DIARY.findall(page.read_text(encoding="utf-8"))
    assert not found, found


@pytest.mark.parametrize("page", DOCS, ids=[p.stem for p in DOCS])
def test_named_plans_and_make_targets_exist(page: Path) -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    plans = {p.stem for p in (ROOT / "kvsim" / "presets" / "plans").glob("*.toml")}
    missing = []
    for match in PLAN_OR_EXPERIMENT.finditer(page.read_text(encoding="utf-8")):
        name = match.group(1)
        if match.group(0).startswith("`kvsim plan"):
            if name not in plans:
                missing.append(match.group(0))
        elif not re.search(rf"(^|[\s:]){re.escape(name)}([\s:]|$)", makefile, re.MULTILINE):
            missing.append(match.group(0))
    assert not missing, missing


@pytest.mark.parametrize("flags", ["", "--quick"])
def test_experiment_targets_draw_their_figures(flags: str) -> None:
    # `make vattention` (and spec-decode, hybrid-groups, every experiment) used to stop after
    # the sweep: the figures docs/kv2026.md shows come from `kvsim plot` of the results folder
    import shutil
    import subprocess

    if shutil.which("make") is None:
        pytest.skip("no make")
    root = "results/quick" if flags else "results"
    for name in ("vattention", "spec-decode", "hybrid-groups", "block-size"):
        dry = subprocess.run(
            ["make", "-n", name, f"SWEEP_FLAGS={flags}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        lines = dry.splitlines()
        sweep = next(i for i, line in enumerate(lines) if f"sweep experiments/{name}.toml" in line)
        assert lines[sweep + 1].endswith(f"kvsim plot {root}/{name}"), dry


def test_formats_hybrid_off_example_loads() -> None:
    # docs/formats.md's example: a key beside the model preset changes that field only, so
    # Gemma-3-27B keeps its 52 sliding-window layers, counted as full attention (no groups)
    import tomllib

    from kvsim.config import config_from_dict

    text = (ROOT / "docs" / "formats.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```toml\n(.*?)```", text, re.DOTALL)
    example = next(b for b in blocks if "gemma-3-27b" in b)
    config = config_from_dict(tomllib.loads(example))
    assert config.model.attention is not None
    assert config.model.attention.num_sliding_layers == 52
    assert config.kv_groups is None
    # every layer full: 62 layers x 2 (K, V) x 16 KV heads x 128 x 2 B = 507,904 B a token
    assert config.bytes_per_token == 62 * 2 * 16 * 128 * 2


def test_commands_page_lists_every_make_target() -> None:
    """docs/commands.md names every target the Makefile defines (a rule's name, or a name in
    the variables that list experiments, paper figures and fleets), as ``make NAME``, alone
    or among others in one backquoted ``make`` command."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([a-z][a-z0-9-]*):", makefile, re.MULTILINE))
    for variable in ("EXPERIMENTS", "PAPER", "FLEET_EXPERIMENTS"):
        listed = re.search(rf"^{variable} :=((?:.*\\\n)*.*)$", makefile, re.MULTILINE)
        assert listed, variable
        targets |= set(listed.group(1).replace("\\", " ").split())
    page = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    named = {name for command in re.findall(r"`make ([^`]+)`", page) for name in command.split()}
    assert targets - named == set(), sorted(targets - named)
