"""Every view of the demo fits a 1,366 x 768 window in Debian's chromium, headless: no page
scrolls sideways.

One browser, driven over the DevTools protocol (tests/support/browser.py): its viewport is set to
1366 x 768 (the most common laptop screen), then each view is loaded and the page's own
layout is asked whether its width exceeds the window's.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import aiohttp
import pytest
from browser import devtools
from helpers import eventually, running_demo

WIDTH, HEIGHT = 1366, 768
FITS = "document.documentElement.scrollWidth <= window.innerWidth"


@pytest.mark.timeout(300)
async def test_every_view_fits_a_1366_pixel_window(tmp_path: Path) -> None:
    (tmp_path / "demo").mkdir()
    async with (
        running_demo(tmp_path / "demo", 4, 2.0) as (base, _),
        aiohttp.ClientSession() as http,
    ):
        pods: list[dict[str, str]] = []

        async def reporting() -> bool:
            async with http.get(f"{base}/api/v1/pods") as resp:
                pods[:] = (await resp.json())["containers"]
            return len({p["node"] for p in pods}) >= 7

        await eventually(reporting, 120, "the demo's nodes reporting their pods")
        longest = max(pods, key=lambda p: len(p["namespace"] + p["pod"] + p["container"]))
        pod = f"/workloads/{quote(longest['namespace'])}/{quote(longest['pod'])}"
        views = [
            "/",
            "/nodes",
            "/nodes/gpu-node-001",  # oversubscribed: every card says why
            "/nodes/gpu-plugin-01",
            "/workloads",
            "/workloads?sort=-memory_used_bytes",
            pod,
            "/namespaces",
            "/status",
        ]
        (tmp_path / "profile").mkdir()
        async with devtools(tmp_path / "profile") as tab:
            await tab.call(
                "Emulation.setDeviceMetricsOverride",
                {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False},
            )
            widths = {}
            for view in views:
                separator = "&" if "?" in view else "?"
                await tab.go(f"{base}{view}{separator}refresh=0")
                assert await tab.evaluate("window.innerWidth") == WIDTH
                assert await tab.evaluate("document.querySelector('main') !== null"), view
                if not await tab.evaluate(FITS):
                    widths[view] = await tab.evaluate("document.documentElement.scrollWidth")
            assert widths == {}, f"wider than {WIDTH} px: {widths}"
