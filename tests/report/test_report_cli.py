"""`kvsim report`: one HTML file; user errors are one red line with exit status 2."""

from __future__ import annotations

from typer.testing import CliRunner

from kvsim.cli import app

runner = CliRunner()


def test_report_writes_one_html_file(small_runs, tmp_path) -> None:
    out = tmp_path / "sub" / "cmp.html"
    result = runner.invoke(app, ["report", *map(str, small_runs), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert f"wrote {out}" in result.output
    assert out.read_text().startswith("<!DOCTYPE html>")


def test_missing_folder_is_one_line_exit_2(tmp_path) -> None:
    out = tmp_path / "r.html"  # (a name not ending in .html is refused first)
    result = runner.invoke(app, ["report", str(tmp_path / "nope"), "--out", str(out)])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"error: RUN_DIR '{tmp_path / 'nope'}': no such folder"
    ]
    assert not out.exists()


def test_folder_without_summary_is_one_line_exit_2(tmp_path) -> None:
    result = runner.invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1
    assert "holds no summary.json" in result.output
    assert "Traceback" not in result.output


def test_out_must_not_be_a_folder(small_runs, tmp_path) -> None:
    result = runner.invoke(app, ["report", str(small_runs[1]), "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "expected an HTML file" in result.output
