"""The status page of the demo in a real browser.

The browser is Debian's chromium, headless, fetched into .tools by ``make tools``:
it loads the page the demo serves, the test reads the DOM it built and keeps a
screenshot in the test's temporary folder.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from aiohttp import web
from browser import page_and_shot, png_size
from helpers import eventually, reserved_port
from test_status_page import Rows

from simulator.run import demo_app


@pytest.mark.timeout(240)  # up to 90 s of page loads, each a browser start, on a busy machine
async def test_the_demo_page_in_a_real_browser(tmp_path: Path) -> None:
    folder = tmp_path / "demo"
    folder.mkdir()
    with reserved_port() as port:
        app, lines = demo_app(f"127.0.0.1:{port}", 4, 2.0, folder)
        base = f"http://127.0.0.1:{port}"
        assert lines[:2] == [f"Overview: {base}/", f"Status page: {base}/status"]
        flaky = lines[2].rpartition("flaky: ")[2]
        runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        try:
            await web.TCPSite(runner, "127.0.0.1", port, reuse_address=True).start()
            dom = ""
            shot = tmp_path / "status.png"

            # The flaky monitor fails about every other scrape, and an agent whose
            # push is late under load goes stale: load the page until both show.
            # Each load dumps the DOM and takes the screenshot of that same page.
            async def failing_in_browser() -> bool:
                nonlocal dom
                dom = await page_and_shot(
                    tmp_path / "profile", shot, f"{base}/status", (1400, 1000)
                )
                rows = Rows(dom).rows
                agents = [row["node"] for row in rows if row["kind"] == "agent"]
                failing = {"class": "source", "node": flaky, "state": "failing", "kind": "kai"}
                return failing in rows and agents == [
                    "gpu-node-001",
                    "gpu-node-005",
                    "gpu-node-006",
                    "gpu-plugin-01",
                ]

            await eventually(failing_in_browser, 90, f"chromium showing {flaky} failing, 4 agents")
            _, cells = Rows(dom).row(flaky, "kai")
            assert cells[3].strip() == "failing"
            assert cells[-1].startswith(("http: HTTP 500", "timeout: no complete answer"))
            assert png_size(shot) == (1400, 1000)
            assert shot.stat().st_size > 30_000  # text, tables and badges, not a blank page
        finally:
            await runner.cleanup()
