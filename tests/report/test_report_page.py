"""The report page in headless Chromium: it runs cleanly offline, the slider and play button
move the map and the charts' cursor, the numbers shown are the runs' summary.json, and a
10,000-request run's page loads within seconds."""

from __future__ import annotations

import json
import math
import re
import time

import pandas as pd
import pytest

from kvsim.view.report import write_report
from tests.report.browser import open_report
from tests.report.conftest import CONTIGUOUS, kvsim_run

pytestmark = pytest.mark.full  # headless Chromium: make test-full

EMPTY_RGB = (92, 10, 10)  # report.js EMPTY, allocated but empty

COUNT_PIXELS = """([sel, rgb]) => {
  const c = document.querySelector(sel), d = c.getContext("2d")
    .getImageData(0, 0, c.width, c.height).data;
  let n = 0;
  for (let i = 0; i < d.length; i += 4)
    if (d[i] === rgb[0] && d[i + 1] === rgb[1] && d[i + 2] === rgb[2]) n++;
  return n;
}"""


def assert_clean(problems) -> None:
    assert problems.console_errors == []
    assert problems.page_errors == []
    assert problems.network == []  # self-contained: nothing fetched


def shown_equals(text: str, value) -> bool:
    """Whether a summary value printed by report.js (``fmt``) is ``value``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return text == "n/a"
    if isinstance(value, bool):
        return text == str(value).lower()
    if isinstance(value, int):
        return text == f"{value:,}"
    if isinstance(value, float):
        return float(text.replace(",", "")) == pytest.approx(value, rel=1e-3, abs=1e-12)
    if isinstance(value, list | dict):
        return json.loads(text) == value
    return text == str(value)


def test_comparison_page(browser, small_runs, tmp_path) -> None:
    html = write_report(small_runs, tmp_path / "report.html")
    summaries = [json.loads((d / "summary.json").read_text()) for d in small_runs]
    with open_report(browser, html) as (page, problems):
        assert page.locator("#error-banner").count() == 0
        assert_clean(problems)
        # the map: two canvases; first-fit Max slabs show allocated-but-empty (dark red) cells
        assert page.locator("#map-panels canvas").count() == 2
        assert page.evaluate(COUNT_PIXELS, ["#map-panel-0 canvas", EMPTY_RGB]) > 0

        # moving the slider changes the map, its status line and the charts' cursor
        slider = page.locator("#time-slider")
        canvas = page.locator("#map-panel-1 canvas")
        status = page.locator("#map-panel-1 .map-status")
        last = int(slider.get_attribute("max"))
        slider.fill(str(last // 4))
        before, before_status = canvas.screenshot(), status.inner_text()
        slider.fill(str(last // 2))
        after = canvas.screenshot()
        assert before != after
        assert status.inner_text() != before_status
        page.wait_for_timeout(100)  # the cursor moves on the next animation frame
        cursor = page.evaluate("document.getElementById('memory-chart-1').layout.shapes.at(-1).x0")
        label = page.locator("#time-label").inner_text()
        assert label == f"t = {cursor:.2f} s"

        # the waiting requests listed are the frame's queue, front first
        frames = pd.read_parquet(small_runs[0] / "frames.parquet")
        status0 = page.locator("#map-panel-0 .map-status").inner_text()
        frame = int(re.search(r"\(frame (\d+)\)", status0).group(1))
        chips = page.locator("#map-panel-0 .chip").all_inner_texts()
        queue = [int(r) for r in frames["waiting_req_ids"].iloc[frame]]
        assert len(queue) > 0
        assert [int(c) for c in chips] == queue[:48]
        assert f"{len(queue)} waiting" in status0
        assert page.evaluate("document.getElementById('ecdf').data.length") == 3 * 2

        # hovering the first cell of the paged pool: vLLM v1's null block, never handed out
        canvas.hover(position={"x": 2, "y": 2})
        hover = page.locator("#map-panel-1 .panel-hover").inner_text()
        assert hover == "slots 0-15: no owner; live 0%, allocated 0%, hole 100%"

        # play advances the slider; pause stops it
        page.locator("#play").click()
        page.wait_for_timeout(600)
        page.locator("#play").click()
        moved = int(slider.input_value())
        assert moved > last // 2
        page.wait_for_timeout(300)
        assert int(slider.input_value()) == moved

        # every summary.json value is on the page, in its run's column
        for table in ("#all-metrics", "#summary-table"):
            shown = page.locator(f"{table} tr[data-key]").evaluate_all(
                "rows => rows.map(r => [r.dataset.key, "
                "[...r.querySelectorAll('td[data-run]')].map(td => td.textContent)])"
            )
            if table == "#all-metrics":
                assert sorted(k for k, _ in shown) == sorted(set(summaries[0]) | set(summaries[1]))
            assert len(shown) >= 20
            for key, texts in shown:
                assert len(texts) == 2
                for text, summary in zip(texts, summaries, strict=True):
                    assert shown_equals(text, summary.get(key)), (table, key, texts)
        assert_clean(problems)


def test_run_without_map_says_why(browser, radix_run, tmp_path) -> None:
    html = write_report([radix_run], tmp_path / "radix.html")
    with open_report(browser, html) as (page, problems):
        assert_clean(problems)
        assert page.locator("#map-panels canvas").count() == 0
        reason = page.locator(".map-missing").inner_text()
        assert "radix allocator has no physical memory map" in reason
        assert page.locator("#memory-chart-0 .main-svg").count() > 0


@pytest.fixture(scope="module")
def run_10k(tmp_path_factory):
    """10,000 requests at 10/s, first-fit Max slabs, 12,675 engine events: 1,000 frames over
    the arrivals, at most 2,000 over the run (more than the page's 600)."""
    out = tmp_path_factory.mktemp("big") / "first_fit_10k"
    settings = ["workload.num_requests=10000", "workload.rate_per_s=10", *CONTIGUOUS]
    return kvsim_run(out, settings, "--map-frames", "1000")


def test_10k_request_page_loads_within_seconds(browser, run_10k, tmp_path) -> None:
    html = write_report([run_10k], tmp_path / "big.html")
    assert html.stat().st_size < 12 * 2**20
    start = time.perf_counter()
    with open_report(browser, html) as (page, problems):
        load_s = time.perf_counter() - start  # parse, decode, plots and first draw
        assert_clean(problems)
        assert load_s < 5.0
        note = page.locator("#map-panel-0 .map-note").inner_text()
        captured = len(pd.read_parquet(run_10k / "frames.parquet"))
        assert 600 < captured <= 2000
        assert re.search(rf"Downsampled: showing \d{{3}} of {captured:,} captured frames", note)
        # one slider step (map redraw, status, queue) takes well under a frame budget of 100 ms
        per_step_ms = page.evaluate(
            """() => {
              const s = document.getElementById("time-slider"), t0 = performance.now();
              for (let i = 0; i < 20; i++) {
                s.value = String(i * 10);
                s.dispatchEvent(new Event("input"));
              }
              return (performance.now() - t0) / 20;
            }"""
        )
        assert per_step_ms < 100
