"""A real browser for the report page: Debian's Chromium, driven by Playwright.

The browser is the system's (``/usr/bin/chromium``, or ``LLMSIM_CHROMIUM``),
never one Playwright downloads, and it starts with an empty profile and
with every background fetch off: on a machine without a network, a
browser that tries to reach its update or sync servers waits instead of
drawing. The README's test command installs it when it is missing.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]


def chromium() -> str:
    exe = os.environ.get("LLMSIM_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(exe).is_file():
        raise RuntimeError(f"no Chromium at {exe}: install it (apt-get install -y chromium chromium-driver), "
                           f"as the README's test command does")
    return exe


@contextmanager
def browser_page(width: int = 1280, height: int = 900) -> Iterator[tuple[object, list[str]]]:
    """A fresh page and the list its console errors and page errors are appended to."""
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="llmsim-chromium-")
    try:
        with sync_playwright() as pw:
            ctx = pw.chromium.launch_persistent_context(profile, executable_path=chromium(), headless=True,
                                                        args=FLAGS, viewport={"width": width, "height": height},
                                                        offline=True)
            try:
                page = ctx.new_page()
                errors: list[str] = []
                page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
                page.on("pageerror", lambda e: errors.append(str(e)))
                yield page, errors
            finally:
                ctx.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)
