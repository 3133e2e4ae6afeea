"""``kvsim validate``'s options refused before any replay: ``--docs`` / ``--readme`` without
``--table`` or naming no Markdown file, and a ``--cost`` that is no preset; each one ``error:``
line, status 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvsim.cli import app


@pytest.fixture(autouse=True)
def _no_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No measured runs: a check that came too late would fail on the missing data instead."""
    monkeypatch.setenv("KVSIM_REAL_VLLM", str(tmp_path / "none"))
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("option", ["--docs", "--readme"])
def test_a_markdown_target_needs_table(tmp_path: Path, option: str) -> None:
    result = CliRunner().invoke(app, ["validate", "some-run", option, "x.md"])
    assert result.exit_code == 2
    assert f"{option} 'x.md' needs --table" in result.output


@pytest.mark.parametrize("option", ["--docs", "--readme"])
def test_a_markdown_target_must_be_markdown(tmp_path: Path, option: str) -> None:
    """A TOML file given: refused, and left as it was (no table block appended)."""
    (tmp_path / "x.toml").write_text("[cost]\n")
    result = CliRunner().invoke(app, ["validate", "--table", option, "x.toml"])
    assert result.exit_code == 2
    expected = f"{option}: expected a Markdown file, a name ending in .md; got 'x.toml'"
    assert expected in result.output
    assert (tmp_path / "x.toml").read_text() == "[cost]\n"


@pytest.mark.parametrize("option", ["--docs", "--readme"])
def test_a_markdown_target_in_no_folder_is_refused_before_the_replays(
    tmp_path: Path, option: str
) -> None:
    """The missing folder was a raw '[Errno 2]' after every run was replayed."""
    result = CliRunner().invoke(app, ["validate", "--table", option, "nodir/x.md"])
    assert result.exit_code == 2
    assert f"{option}: the folder 'nodir' of 'nodir/x.md' does not exist" in result.output


def test_an_empty_runs_folder_is_said_to_hold_none(tmp_path: Path, monkeypatch) -> None:
    """An empty KVSIM_REAL_VLLM folder refused the group 'all' while listing it as a choice."""
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("KVSIM_REAL_VLLM", str(tmp_path / "empty"))
    result = CliRunner().invoke(app, ["validate", "all"])
    assert result.exit_code == 2
    assert "no measured run in" in result.output
    assert "h100/split.txt" in result.output


def test_an_unknown_cost_names_the_option_value_and_choices() -> None:
    # the presets are the tables of kvsim/data/costs.toml: [vllm-2023] and [lean]
    result = CliRunner().invoke(app, ["validate", "some-run", "--cost", "nope"])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1
    assert (
        "error: --cost: unknown cost preset 'nope'; choose from ['lean', 'vllm-2023']"
        in result.output
    )
    assert "pydantic" not in result.output


def test_table_with_run_names_is_refused() -> None:
    # --table replays every run: the names were ignored without a word
    result = CliRunner().invoke(app, ["validate", "--table", "rtx4090", "codellama"])
    assert result.exit_code == 2
    assert "--table replays every run; give run names (rtx4090 codellama) without" in " ".join(
        result.output.split()
    )


def test_a_runs_notes_print_their_brackets(capsys) -> None:
    # the H100 runs' first note names the config table "[offload]", which Rich read as a
    # style tag and dropped ("kvsim's  tier off")
    from kvsim.cli.validate import print_notes
    from kvsim.validate.h100 import NOTES

    print_notes(NOTES[:1])
    assert "(kvsim's [offload] tier off)" in " ".join(capsys.readouterr().out.split())


def test_out_never_overwrites_a_folder_of_the_users_files(tmp_path: Path, monkeypatch) -> None:
    # a user's requests.csv in OUT/RUN was overwritten; --out "" meant the current folder
    from .synthetic import TRAIN, write_h100

    write_h100(tmp_path / "data")
    monkeypatch.setenv("KVSIM_REAL_VLLM", str(tmp_path / "data"))
    runner = CliRunner()
    theirs = tmp_path / "mine" / TRAIN
    theirs.mkdir(parents=True)
    (theirs / "requests.csv").write_text("notes\n")
    refused = runner.invoke(app, ["validate", TRAIN, "--out", "mine"])
    assert refused.exit_code == 2
    assert "holds files of its own (requests.csv) and no earlier replay" in refused.output
    assert (theirs / "requests.csv").read_text() == "notes\n"
    first = runner.invoke(app, ["validate", TRAIN, "--out", "ours"])
    assert first.exit_code == 0, first.output
    again = runner.invoke(app, ["validate", TRAIN, "--out", "ours"])  # (its own earlier replay)
    assert again.exit_code == 0, again.output
    assert runner.invoke(app, ["validate", TRAIN, "--out", ""]).exit_code == 2


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        # end before begin: an IndexError (exit 1) after every replay had run
        (
            "<!-- make validate: end -->\ntext\n<!-- make validate: begin (generated; edit "
            "kvsim/validate/markdown.py instead) -->\n",
            "holds the table's markers at lines [3] (begin) and [1] (end)",
        ),
        # not UTF-8: "'utf-8' codec can't decode", naming no option nor file
        (b"\xff\xfe notes\n", "--docs: x.md"),
    ],
    ids=["markers-swapped", "not-utf-8"],
)
def test_a_docs_file_the_table_cannot_go_in_is_refused_before_the_replays(
    tmp_path: Path, content: str | bytes, expected: str
) -> None:
    path = tmp_path / "x.md"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    result = CliRunner().invoke(app, ["validate", "--table", "--docs", "x.md"])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert expected in result.output
