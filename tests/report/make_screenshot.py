"""Screenshot of the README's contiguous-vs-paged report (the Azure conversation example).

    KVSIM_DATA=../shared/data/traces .venv/bin/python -m tests.report.make_screenshot
    .venv/bin/python -m tests.report.make_screenshot --runs A_DIR B_DIR --out docs/report.png

Without ``--runs`` it runs the README's two commands (``workloads/scenarios/
azure_conv_llama31_8b.toml``, paged and first-fit slabs sized prompt + max_tokens) into
``results/report/`` (reused when already there, about a minute otherwise), writes
``results/report/report.html``, and shoots the map and memory charts in headless Chromium as a
palette PNG of at most ``--max-kib`` KiB.
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
from pathlib import Path

from PIL import Image

from kvsim.view.report import write_report
from tests.report.browser import chromium_browser, open_report

SCENARIO = "workloads/scenarios/azure_conv_llama31_8b.toml"
CONTIGUOUS = ["--set", "cache.allocator=first_fit", "--set", "cache.reservation=prompt_max_tokens"]


def readme_runs(work: Path) -> list[Path]:
    """The README's contiguous and paged runs under ``work`` (run when missing)."""
    runs = []
    for name, extra in (("contiguous", CONTIGUOUS), ("paged", [])):
        out = work / name
        if not (out / "summary.json").is_file():
            cmd = [sys.executable, "-m", "kvsim", "run", SCENARIO, "--no-progress"]
            subprocess.run([*cmd, "--out", str(out), *extra], check=True)
        runs.append(out)
    return runs


def shoot(html: Path, png: Path, *, width_px: int, max_kib: int, slider_share: float) -> Path:
    """Screenshot of the page from its top to the end of the memory charts, with the time
    slider at ``slider_share`` (0-1) of its range; quantised until it fits ``max_kib``."""
    with chromium_browser() as browser, open_report(browser, html, width=width_px) as (page, _):
        slider = page.locator("#time-slider")
        slider.fill(str(round(int(slider.get_attribute("max") or 0) * slider_share)))
        page.wait_for_timeout(300)
        bottom = page.locator("#memory-section").bounding_box()
        assert bottom is not None, "the page has no #memory-section"
        shot = page.screenshot(
            full_page=True,
            clip={"x": 0, "y": 0, "width": width_px, "height": bottom["y"] + bottom["height"]},
        )
    image = Image.open(io.BytesIO(shot)).convert("RGB")
    for colors in (128, 64, 32):
        buf = io.BytesIO()
        image.quantize(colors=colors).save(buf, "PNG", optimize=True)
        if buf.tell() <= max_kib * 1024:
            break
    png.parent.mkdir(parents=True, exist_ok=True)
    png.write_bytes(buf.getvalue())
    return png


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", nargs="+", type=Path, help="run folders (default: README's)")
    parser.add_argument("--work", type=Path, default=Path("results/report"))
    parser.add_argument("--out", type=Path, default=Path("docs/report.png"))
    parser.add_argument("--width-px", type=int, default=1400)
    parser.add_argument("--max-kib", type=int, default=300)
    parser.add_argument("--slider-share", type=float, default=0.5)
    args = parser.parse_args()
    runs = args.runs or readme_runs(args.work)
    html = write_report(runs, args.work / "report.html")
    png = shoot(
        html,
        args.out,
        width_px=args.width_px,
        max_kib=args.max_kib,
        slider_share=args.slider_share,
    )
    print(f"wrote {html} and {png} ({png.stat().st_size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
