"""Headless Chromium for the report's tests and screenshot: Debian's ``chromium`` driven by
playwright-python, never a downloaded browser, with every network request blocked and recorded.

``KVSIM_CHROMIUM`` names another Chromium binary; the default is ``/usr/bin/chromium``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from playwright.sync_api import Browser, Page, Route, sync_playwright

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
INSTALL_HINT = "install it with `apt-get install -y chromium` or set KVSIM_CHROMIUM"


def chromium_path() -> Path | None:
    """The Chromium binary to drive, or ``None`` when none is installed."""
    named = os.environ.get("KVSIM_CHROMIUM")
    if named:
        return Path(named) if Path(named).is_file() else None
    default = Path("/usr/bin/chromium")
    if default.is_file():
        return default
    found = shutil.which("chromium")
    return Path(found) if found else None


@dataclass
class Problems:
    """What went wrong while a page was open: console errors, uncaught exceptions, and requests
    that left the file (a self-contained page makes none)."""

    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    network: list[str] = field(default_factory=list)


@contextmanager
def chromium_browser() -> Iterator[Browser]:
    """Headless Chromium (``chromium_path``) with ``CHROMIUM_ARGS``.

    Raises:
        FileNotFoundError: no Chromium is installed.
    """
    exe = chromium_path()
    if exe is None:
        raise FileNotFoundError(f"no Chromium found; {INSTALL_HINT}")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(exe), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def open_report(
    browser: Browser, html: Path, *, width: int = 1400, height: int = 900, timeout_s: float = 30.0
) -> Iterator[tuple[Page, Problems]]:
    """Open ``html`` in a fresh browser context and wait until its script has finished drawing
    (``body[data-ready=true]``) or failed (``#error-banner``); yields the page and what went
    wrong so far (updated live). Viewport in CSS pixels."""
    problems = Problems()

    def block(route: Route) -> None:
        problems.network.append(route.request.url)
        route.abort()

    context = browser.new_context(viewport={"width": width, "height": height})
    try:
        page = context.new_page()
        page.on(
            "console",
            lambda m: problems.console_errors.append(m.text) if m.type == "error" else None,
        )
        page.on("pageerror", lambda e: problems.page_errors.append(str(e)))
        page.route(lambda url: not url.startswith("file:"), block)
        page.goto(html.resolve().as_uri())
        page.wait_for_selector("body[data-ready=true], #error-banner", timeout=timeout_s * 1000)
        yield page, problems
    finally:
        context.close()
