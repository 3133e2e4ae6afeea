"""The step cost measured on a GPU: the per-layer term, the shipped H200 values and where the
cost model takes them, and ``kvsim calibrate --fit-parts`` on steps worked out by hand."""

from __future__ import annotations

import csv
import importlib.util
import statistics
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kvsim.cli import app
from kvsim.config import CostSpec, GpuSpec, ModelSpec
from kvsim.config.cost_spec import resolve_cost
from kvsim.core.cost import StepCostModel

CALIBRATION = resources.files("kvsim.data").joinpath("calibration")
PINNED = {
    "hbm_efficiency": 0.8,
    "flops_efficiency": 0.7,
    "step_overhead_s": 1e-3,
    "per_seq_overhead_s": 0.0,
    "link_efficiency": 0.8,
    "allreduce_latency_s": 0.0,
    "allreduce_latency_per_peer_s": 0.0,
}


def test_layer_overhead_is_charged_once_per_layer() -> None:
    # Llama-2-7B has 32 layers: 50 us each adds 32 * 50 us = 1.6 ms to every step.
    model, gpu = ModelSpec.model_validate("llama-2-7b"), GpuSpec.model_validate("h100-80gb")
    plain = StepCostModel(model, gpu, CostSpec(**PINNED), paged=False)
    layered = StepCostModel(model, gpu, CostSpec(**PINNED, layer_overhead_s=50e-6), paged=False)
    for chunks in ([(1, 100)], [(512, 0), (1, 3000)]):
        extra = layered.step_duration_s(chunks) - plain.step_duration_s(chunks)
        assert extra == pytest.approx(1.6e-3, rel=1e-9)


def test_h200_keeps_the_vllm_fit_and_the_step_fit_is_opt_in() -> None:
    fitted = tomllib.loads(resources.files("kvsim.data").joinpath("cost_fit.toml").read_text())
    h100_fit = fitted["gpus"]["h100-80gb"]
    h200 = resolve_cost(CostSpec(), GpuSpec.model_validate("h200"))
    # the efficiencies stay the H100 fit's (a transfer), with no per-layer term
    assert h200.hbm_efficiency == h100_fit["hbm_efficiency"]
    assert h200.flops_efficiency == h100_fit["flops_efficiency"]
    assert (h200.layer_overhead_s, h200.step_overhead_s) == (0.0, fitted["cost"]["step_overhead_s"])
    assert "transferred from h100-80gb" in h200.source
    # the synthetic steps' fit runs when given (and the source says which values were given);
    # Llama-2-70B's 80 layers each add layer_overhead_s
    steps = tomllib.loads(CALIBRATION.joinpath("h200-steps.toml").read_text())["fitted"]
    model = ModelSpec.model_validate("llama-2-70b")
    opt_in = StepCostModel(model, GpuSpec.model_validate("h200"), CostSpec(**steps), paged=False)
    want = fitted["cost"]["step_overhead_s"] + 80 * steps["layer_overhead_s"]
    assert opt_in.overhead_s == pytest.approx(want, rel=1e-12)
    assert opt_in.cost_source.endswith("given: hbm_efficiency, flops_efficiency")


def test_h200_table_serves_the_costs_that_take_a_table() -> None:
    # The shipped H200 table's median paged/contiguous ratio at block size 16, read here with csv.
    with CALIBRATION.joinpath("h200.csv").open() as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    ratios = [
        float(r["paged_s"]) / float(r["contiguous_s"])
        for r in rows
        if r["block_size_tokens"] == "16"
    ]
    assert len(ratios) == 22  # 4 batch sizes x 6 contexts, less the 2 over 1M tokens
    model, h200 = ModelSpec.model_validate("llama-2-7b"), GpuSpec.model_validate("h200")
    paper_engine = CostSpec.model_validate("vllm-2023")  # takes its factor from a table
    measured = StepCostModel(model, h200, paper_engine, paged=True)
    assert measured.layout_factor == pytest.approx(statistics.median(ratios), rel=1e-12)
    assert "NVIDIA H200" in measured.layout_source
    # the H100 has no table: the analytic 1 + (0.23 - 1.5 / 16) + 1.5 / 16 = 1.23 at 16 tokens
    h100 = StepCostModel(model, GpuSpec.model_validate("h100-80gb"), paper_engine, paged=True)
    assert h100.layout_factor == pytest.approx(1.23)
    # the default cost keeps the factor fitted with its efficiencies on vLLM runs (1)
    assert StepCostModel(model, h200, CostSpec(), paged=True).layout_factor == 1.0


# By hand from kvsim/data/models.toml, per tensor-parallel rank: (dense parameters, LM-head
# parameters, K+V bytes per token, attention FLOPs per (query, key) pair, layers).
# Llama-2-7B: 6.738e9 parameters less an LM head and an embedding of 32000 x 4096 = 131,072,000
# each = 6,475,856,000 dense; KV 2 x 32 layers x 32 heads x 128 x 2 bytes = 524,288; attention
# 2 x 32 layers x 4096 = 262,144 FLOPs a pair.
# Llama-2-70B over TP 4: (68.977e9 - 2 x 32000 x 8192) / 4 = 17,113,178,000 dense and 65,536,000
# of LM head a rank; KV 2 x 80 layers x (8 / 4) heads x 128 x 2 bytes = 81,920; attention
# 2 x 80 x 8192 / 4 = 327,680 FLOPs a pair.
RANKS = {
    "llama-2-7b tp1": (6_475_856_000, 131_072_000, 524_288, 262_144, 32),
    "llama-2-70b tp4": (17_113_178_000, 65_536_000, 81_920, 327_680, 80),
}


def _hand_step_s(
    rank: str, batch: int, new: int, ctx: int, hbm: float, flops: float, layer: float
) -> float:
    """A step by the operator roofline (kvsim.core.cost's docstring), by hand: each operator the
    longer of its bytes (2 a parameter) over 4.8 TB/s x hbm and its FLOPs over 989 TFLOP/s x
    flops; plus ``layer`` seconds per layer."""
    dense, head, kv, per_pair, layers = RANKS[rank]
    bw, fl = 4.8e12 * hbm, 989e12 * flops
    tokens = batch * new
    pairs = batch * (2 * new * (ctx - new) + new * new)
    linear = max(2 * dense / bw, 2 * dense * tokens / fl)
    lm_head = max(2 * head / bw, 2 * head * batch / fl)
    attention = max(batch * (ctx - new) * kv / bw, per_pair * pairs / fl)
    return linear + lm_head + attention + layers * layer


def _write_parts(
    folder: Path, steps: list[tuple[str, str, int, int, int]], truth: tuple[float, float, float]
) -> None:
    folder.mkdir()
    meta = "# source: measured\n# device_name: NVIDIA H200\n# driver_version: test\n"
    meta += "# torch_version: test\n# cuda_runtime: test\n# date_utc: 2026-12-04\n"
    (folder / "hbm.csv").write_text(
        meta + "op,bytes,seconds,bytes_per_s\nsum,1,1,4.56e12\ncopy,2,1,4.28e12\n"
    )
    head = "model,op,tokens,in_features,out_features,seconds,flops,bytes,flops_per_s,bytes_per_s\n"
    (folder / "gemm.csv").write_text(
        meta + head + "m,qkv,1,1,1,1,1,1,1e12,3e12\nm,qkv,4096,1,1,1,1,1,7e14,1e12\n"
        "square,square,8192,1,1,1,1,1,6.8e14,1e12\n"
    )
    (folder / "sdpa.csv").write_text(
        meta + "model,phase,batch,query_tokens,context_tokens,seconds,kv_bytes,flops,"
        "bytes_per_s,flops_per_s\nm,decode,1,1,1,1,1,1,4e12,1\nm,prefill,1,1,1,1,1,1,1,6e14\n"
    )
    lines = ["model,num_layers,phase,batch,query_tokens,context_tokens,cuda_graph,seconds"]
    for rank, phase, batch, new, ctx in steps:
        s = _hand_step_s(rank, batch, new, ctx, *truth)
        lines.append(f"{rank},{RANKS[rank][4]},{phase},{batch},{new},{ctx},1,{s!r}")
    (folder / "steps.csv").write_text(meta + "\n".join(lines) + "\n")


def test_fit_recovers_hand_made_steps(tmp_path: Path) -> None:
    from kvsim.validate.gpu_steps import fit_parts

    truth = (0.9, 0.6, 40e-6)
    steps = []
    for rank in RANKS:  # 32 and 80 layers: a time per layer is not a time per step
        steps += [(rank, "decode", b, 1, c) for b in (1, 8, 32, 64, 128) for c in (128, 2048)]
        steps += [(rank, "prefill", 1, c, c) for c in (128, 512, 2048, 8192)]
    _write_parts(tmp_path / "h200", steps, truth)
    table = fit_parts(tmp_path / "h200", "h200")
    assert table["provenance"]["chosen"] == "per-layer overhead"
    got = table["fitted"]
    assert got["hbm_efficiency"] == pytest.approx(0.9, rel=1e-4)
    assert got["flops_efficiency"] == pytest.approx(0.6, rel=1e-4)
    assert got["layer_overhead_s"] == pytest.approx(40e-6, rel=1e-3)
    held = table["candidates"]["per-layer overhead"]["held_out"]
    # per rank: decode batches 8 and 64 at 2 contexts (4), chunks of 512 and 8192 (2)
    assert held["points"] == 12
    assert held["max_abs_pct"] < 0.01
    # the per-step form cannot fit 32 and 80 layers' times at once
    assert table["candidates"]["per-step overhead"]["train"]["max_abs_pct"] > 1
    assert table["attained"]["hbm_read"] == pytest.approx(4.56 / 4.8)


def test_fit_parts_names_a_missing_file(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["calibrate", "--fit-parts", str(tmp_path)])
    assert result.exit_code == 2
    assert "hbm.csv: missing" in result.output


def test_fit_parts_names_a_bad_line_and_a_missing_column(tmp_path: Path) -> None:
    rows = [("llama-2-7b tp1", "decode", b, 1, 128) for b in (1, 8)]
    _write_parts(tmp_path / "p", rows, (0.9, 0.6, 0.0))
    steps = tmp_path / "p" / "steps.csv"
    lines = steps.read_text().splitlines()
    lines[-1] = lines[-1].rsplit(",", 1)[0] + ",nan"  # line 9: 6 metadata lines, header, 2 rows
    steps.write_text("\n".join(lines) + "\n")
    result = CliRunner().invoke(app, ["calibrate", "--fit-parts", str(tmp_path / "p")])
    assert result.exit_code == 2
    assert "steps.csv, line 9, column seconds: nan is not a positive number" in result.output
    (tmp_path / "p" / "hbm.csv").write_text("# source: measured\nop,bytes\nsum,1\n")
    result = CliRunner().invoke(app, ["calibrate", "--fit-parts", str(tmp_path / "p")])
    assert result.exit_code == 2
    assert "hbm.csv: missing column(s) ['bytes_per_s']" in result.output


@pytest.mark.skipif(
    importlib.util.find_spec("torch") is not None, reason="checks the message without PyTorch"
)
def test_parts_says_pytorch_is_missing(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["calibrate", "--parts", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "needs PyTorch" in result.output
    assert not (tmp_path / "out").exists()


def test_h200_host_link_is_the_measured_one() -> None:
    # The shipped host.csv: the smaller direction of the 1 GiB copies, to 0.1 GB/s, is the preset's
    # PCIe bandwidth; a 32 KiB copy's time beyond its bytes is the 5.0-5.2 us docs/calibration.md
    # states (the 5 us swap_copy_overhead_s assumed).
    path = CALIBRATION.joinpath("parts").joinpath("h200").joinpath("host.csv")
    with path.open() as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    largest = {
        r["direction"]: float(r["bytes_per_s"]) for r in rows if r["bytes_per_copy"] == str(1 << 30)
    }
    assert set(largest) == {"host_to_gpu", "gpu_to_host"}
    preset = GpuSpec.model_validate("h200").pcie_bandwidth_bytes_per_s
    assert preset == pytest.approx(round(min(largest.values()) / 1e8) * 1e8, rel=1e-12)
    for r in rows:
        if r["copies"] == "2048":
            fixed = float(r["seconds_per_copy"]) - 32768 / largest[r["direction"]]
            assert 5.0e-6 <= round(fixed, 8) <= 5.2e-6
    assert CostSpec().swap_copy_overhead_s == 5e-6


@pytest.mark.parametrize(
    ("name", "edit", "message"),
    [
        (
            "steps",
            lambda t: t.replace("llama-2-7b tp1,32", "foo tp1,32", 1),
            "line 8, column model: 'foo tp1': unknown model preset 'foo'; choose from [",
        ),
        (
            "steps",
            lambda t: t.replace("llama-2-7b tp1,32", "llama-2-7b tp3,32", 1),
            "not divisible",
        ),
        ("steps", lambda t: t.replace("llama-2-7b tp1,32", "llama-2-7b tpX,32", 1), "tp<N>"),
        ("steps", lambda t: t.replace(",32,decode,1,", ",40,decode,1,", 1), "has 32 layers"),
        (  # the second row's: the line named is the row's, not the model's first
            "steps",
            lambda t: t.replace(",32,decode,8,", ",40,decode,8,", 1),
            "line 9, column num_layers: 40: llama-2-7b has 32 layers",
        ),
        ("steps", lambda t: t.replace(",decode,8,1,", ",warmup,8,1,", 1), "line 9, column phase"),
        ("steps", lambda t: t.replace(",decode,8,1,128", ",decode,8.5,1,128", 1), "whole number"),
        (
            "steps",
            lambda t: t.replace(",decode,8,1,128", ",prefill,8,256,128", 1),
            "256 new tokens",
        ),
        ("gemm", lambda t: t.replace("square,square", "m,qkv", 1), "no row with op ['square']"),
        ("hbm", lambda t: t.replace("source: measured", "source: dry run", 1), "not a GPU"),
        ("sdpa", lambda t: "\x00\xff\xfe binary", "not a text file"),
    ],
)
def test_fit_parts_refuses_bad_files(tmp_path: Path, name: str, edit: Any, message: str) -> None:
    rows = [("llama-2-7b tp1", "decode", b, 1, 128) for b in (1, 8)]
    _write_parts(tmp_path / "p", rows, (0.9, 0.6, 0.0))
    path = tmp_path / "p" / f"{name}.csv"
    text = edit(path.read_text())
    if text.startswith("\x00"):
        path.write_bytes(text.encode("latin-1"))
    else:
        path.write_text(text)
    result = CliRunner().invoke(app, ["calibrate", "--fit-parts", str(tmp_path / "p")])
    assert result.exit_code == 2
    assert f"{name}.csv" in result.output
    assert message in result.output


def test_fit_parts_warns_about_a_step_it_misses_by_half(tmp_path: Path, caplog) -> None:
    """Hand-made steps the per-layer form fits exactly, one of them then mistyped as 1e9 s: the
    fit (least squares of relative errors) still fits the rest, and the warning names that row's
    line (6 metadata lines and the header come first: the fifth row is line 12)."""
    import logging

    from kvsim.validate.gpu_steps import fit_parts

    rank = "llama-2-7b tp1"
    steps = [(rank, "decode", b, 1, c) for b in (1, 8, 32, 64, 128) for c in (128, 2048)]
    steps += [(rank, "prefill", 1, c, c) for c in (128, 512, 2048, 8192)]
    _write_parts(tmp_path / "p", steps, (0.9, 0.6, 40e-6))
    with caplog.at_level(logging.WARNING, logger="kvsim.validate"):
        fit_parts(tmp_path / "p", "h200")
    assert not caplog.records  # an exact fit: nothing to say
    path = tmp_path / "p" / "steps.csv"
    lines = path.read_text().splitlines()
    lines[11] = lines[11].rsplit(",", 1)[0] + ",1e9"
    path.write_text("\n".join(lines) + "\n")
    with caplog.at_level(logging.WARNING, logger="kvsim.validate"):
        fit_parts(tmp_path / "p", "h200")
    (said,) = [r.getMessage() for r in caplog.records]
    assert said.startswith(
        f"{path}: 1 step(s) the fit misses by more than 50 %; the worst, line 12"
    )
    assert "measured 1e+09 s" in said


def test_fit_parts_refuses_parts_of_two_devices(tmp_path: Path) -> None:
    """hbm.csv of an H100 beside H200 gemm, sdpa and steps files: each file named with the device
    its metadata says (written by _write_parts, hbm.csv's edited here)."""
    rows = [("llama-2-7b tp1", "decode", b, 1, 128) for b in (1, 8)]
    _write_parts(tmp_path / "p", rows, (0.9, 0.6, 0.0))
    hbm = tmp_path / "p" / "hbm.csv"
    hbm.write_text(hbm.read_text().replace("NVIDIA H200", "NVIDIA H100 80GB HBM3"))
    result = CliRunner().invoke(app, ["calibrate", "--fit-parts", str(tmp_path / "p")])
    assert result.exit_code == 2
    assert "parts measured on different devices" in result.output
    assert f"{hbm} says 'NVIDIA H100 80GB HBM3'" in result.output
    for name in ("gemm", "sdpa", "steps"):
        assert f"{tmp_path / 'p' / name}.csv says 'NVIDIA H200'" in result.output


def test_fit_parts_names_a_column_given_twice(tmp_path: Path) -> None:
    """hbm.csv's header with bytes_per_s twice (where seconds was): named with the header's line,
    7 (the 6 metadata lines _write_parts writes come first)."""
    rows = [("llama-2-7b tp1", "decode", b, 1, 128) for b in (1, 8)]
    _write_parts(tmp_path / "p", rows, (0.9, 0.6, 0.0))
    hbm = tmp_path / "p" / "hbm.csv"
    old = hbm.read_text()
    hbm.write_text(old.replace("op,bytes,seconds,bytes_per_s", "op,bytes,bytes_per_s,bytes_per_s"))
    result = CliRunner().invoke(app, ["calibrate", "--fit-parts", str(tmp_path / "p")])
    assert result.exit_code == 2
    assert f"{hbm}, line 7: column(s) ['bytes_per_s'] named more than once" in result.output


def test_fit_parts_names_a_missing_metadata_line(tmp_path: Path) -> None:
    """steps.csv without its driver_version line (recorded in the fit's provenance): an error
    naming the file and the key, status 2 (not an internal error)."""
    rows = [("llama-2-7b tp1", "decode", b, 1, 128) for b in (1, 8)]
    _write_parts(tmp_path / "p", rows, (0.9, 0.6, 0.0))
    steps = tmp_path / "p" / "steps.csv"
    steps.write_text(steps.read_text().replace("# driver_version: test\n", ""))
    result = CliRunner().invoke(app, ["calibrate", "--fit-parts", str(tmp_path / "p")])
    assert result.exit_code == 2
    assert f"{steps}: no metadata line for ['driver_version']" in result.output


@pytest.mark.parametrize("kind", ["file", "nothing"])
def test_fit_parts_wants_a_folder(tmp_path: Path, kind: str) -> None:
    given = tmp_path / "base.toml"
    if kind == "file":
        given.write_text("[cost]\n")
    result = CliRunner().invoke(app, ["calibrate", "--fit-parts", str(given)])
    assert result.exit_code == 2
    said = "is a file" if kind == "file" else "does not exist"
    assert f"--fit-parts: '{given}' {said}; expected a folder of parts files" in result.output
    assert "base.toml/hbm.csv" not in result.output


def test_fit_parts_refuses_a_repeat_of_another_device(tmp_path: Path) -> None:
    """A repeat run whose files all say H100 beside an H200 run: its spread is no repeatability."""
    from kvsim.validate.gpu_steps import fit_parts

    steps = [("llama-2-7b tp1", "decode", b, 1, c) for b in (1, 8, 32, 128) for c in (128, 2048)]
    steps += [("llama-2-7b tp1", "prefill", 1, c, c) for c in (128, 2048)]
    _write_parts(tmp_path / "p", steps, (0.9, 0.6, 40e-6))
    _write_parts(tmp_path / "p-repeat", steps, (0.9, 0.6, 40e-6))
    for path in (tmp_path / "p-repeat").iterdir():
        path.write_text(path.read_text().replace("NVIDIA H200", "NVIDIA H100"))
    with pytest.raises(ValueError, match="repeat run was measured on 'NVIDIA H100'"):
        fit_parts(tmp_path / "p", "h200", repeat=tmp_path / "p-repeat")


@pytest.mark.parametrize("kind", ["folder", "link", "no toml"])
def test_fit_parts_refuses_an_out_it_cannot_write_before_fitting(tmp_path: Path, kind: str) -> None:
    """An --out that is a folder named like a table, a link (written through to its target), or
    not .toml: exit 2 naming it, and nothing written (the figure beside it included)."""
    rows = [("llama-2-7b tp1", "decode", b, 1, 128) for b in (1, 8)]
    _write_parts(tmp_path / "p", rows, (0.9, 0.6, 0.0))
    out, target = tmp_path / "fit.toml", tmp_path / "mine.toml"
    target.write_text("kept = true\n")
    if kind == "folder":
        out.mkdir()
    elif kind == "link":
        out.symlink_to(target)
    else:
        out = tmp_path / "fit.png"
    args = ["calibrate", "--fit-parts", str(tmp_path / "p"), "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: --out: ")
    assert repr(str(out)) in result.output
    assert target.read_text() == "kept = true\n"
    assert not (tmp_path / "fit.png").exists()
    assert "wrote" not in result.output
