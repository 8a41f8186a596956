"""The nodes, workloads and namespaces views of the demo in Debian's chromium, headless.

One browser start per view: it dumps the DOM it built and takes a screenshot
of that same page (kept in the test's temporary folder). Each view's numbers
are compared with REST's, read just before and just after the load: the demo
changes its readings every interval, so the page must equal one of the two.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from browser import page_and_shot, png_size
from helpers import eventually, running_demo
from test_ui_views import Rows

WIDTH, HEIGHT = 1400, 1000
INTERVAL = 5.0
"""The demo's interval: long enough that most loads fall within one set of readings."""


class Browser:
    """Loads one view of the demo at ``base`` in chromium: its DOM, and its screenshot."""

    def __init__(self, base: str, folder: Path, http: aiohttp.ClientSession) -> None:
        self.base, self.folder, self.http = base, folder, http

    async def rest(self, path: str) -> Any:
        async with self.http.get(self.base + path) as resp:
            assert resp.status == 200, await resp.text()
            return await resp.json()

    async def shows(
        self, name: str, path: str, rest: str | None, same: Callable[[Rows, Any], bool]
    ) -> Rows:
        """Load ``path`` until its DOM agrees with ``rest``'s answer (by ``same``) read just
        before or just after; return the DOM's rows. Without ``rest``: with the JSON of the
        page's own CSV link, read after."""
        shot = self.folder / f"{name}.png"
        found: list[Rows] = []

        async def agrees() -> bool:
            before = None if rest is None else await self.rest(rest)
            url = f"{self.base}{path}{'&' if '?' in path else '?'}refresh=0"
            dom = await page_and_shot(self.folder / "profile", shot, url, (WIDTH, HEIGHT))
            rows = Rows(dom)
            found[:] = [rows]
            if rest is None:
                csv = next(link for link in rows.links if "format=csv" in link)
                return same(rows, await self.rest(csv.replace("format=csv", "format=json")))
            return same(rows, before) or same(rows, await self.rest(rest))

        await eventually(agrees, 100, f"{path} showing what {rest} says")
        assert png_size(shot) == (WIDTH, HEIGHT)
        assert shot.stat().st_size > 20_000, name  # tables and bars, not a blank page
        return found[0]


def used(attrs: dict[str, str]) -> int | None:
    text = attrs.get("memory-used-bytes", "")
    return int(text) if text else None


@pytest.mark.timeout(420)  # five browser starts, each some seconds on a busy machine
async def test_each_view_of_the_demo_in_a_real_browser(tmp_path: Path) -> None:
    folder = tmp_path / "demo"
    folder.mkdir()
    async with running_demo(folder, 4, INTERVAL) as (base, _), aiohttp.ClientSession() as http:
        browser = Browser(base, tmp_path, http)

        async def ready() -> bool:
            listed = await browser.rest("/api/v1/nodes")
            reported = [n for n in listed["nodes"] if n["memory_used_bytes"]]
            return len(reported) >= 6

        await eventually(ready, 60, "the demo's nodes reporting memory")

        def nodes_agree(rows: Rows, listed: Any) -> bool:
            shown = {a["node"]: used(a) for a, _ in rows.rows}
            return shown == {n["name"]: n["memory_used_bytes"] for n in listed["nodes"]}

        nodes = await browser.shows("nodes", "/nodes", "/api/v1/nodes", nodes_agree)
        assert "gpu-plugin-01" in nodes.of("node")
        assert "/nodes/gpu-plugin-01" in nodes.links

        def cards_agree(rows: Rows, detail: Any) -> bool:
            return rows.cards == {c["device_uuid"]: c["memory_used_bytes"] for c in detail["cards"]}

        plugin = await browser.shows(
            "node", "/nodes/gpu-plugin-01", "/api/v1/nodes/gpu-plugin-01", cards_agree
        )
        kinds = {attrs["pod"]: cells[3] for attrs, cells in plugin.rows if "pod" in attrs}
        assert kinds["llm-train"] == "whole card"
        assert kinds["embed"] == "MIG instance"

        def allocations_agree(rows: Rows, listed: Any) -> bool:
            rest = {
                (c["node"], c["namespace"], c["pod"], c["container"]): c["memory_allocated_bytes"]
                for c in listed["containers"]
            }
            shown = {
                (a["node"], a["namespace"], a["pod"], a["container"]): a["memory-allocated-bytes"]
                for a, _ in rows.rows
            }
            return bool(shown) and all(
                str(rest[key]) == value if rest.get(key) is not None else value == ""
                for key, value in shown.items()
            )

        workloads = await browser.shows(
            "workloads", "/workloads", "/api/v1/pods", allocations_agree
        )
        assert len(workloads.rows) == 100
        listed = await browser.rest("/api/v1/pods")
        pod = next(c for c in listed["containers"] if c["memory_allocated_bytes"])
        namespace, name = pod["namespace"], pod["pod"]

        def pod_agrees(rows: Rows, detail: Any) -> bool:
            shown = sorted(a["memory-allocated-bytes"] for a, _ in rows.rows)
            return shown == sorted(str(c["memory_allocated_bytes"]) for c in detail["containers"])

        detail = await browser.shows(
            "pod",
            f"/workloads/{namespace}/{name}",
            f"/api/v1/namespaces/{namespace}/pods/{name}",
            pod_agrees,
        )
        assert detail.charts >= 2
        assert detail.polylines >= 2  # each chart has its line: the history holds the pod

        def report_agrees(rows: Rows, report: Any) -> bool:
            shown = {
                # a namespace without a memory allocation reads unknown (empty), as REST's null
                a["namespace"]: float(a["memory-allocated-byte-hours"])
                if a["memory-allocated-byte-hours"]
                else None
                for a, _ in rows.rows
            }
            return bool(shown) and shown == {
                g["labels"]["namespace"]: g["memory_allocated_byte_hours"] for g in report["groups"]
            }

        # the page's CSV link names its window: REST over that window is the page's report
        shown = await browser.shows("namespaces", "/namespaces?window=1h", None, report_agrees)
        assert {"team-a", "team-serve"} <= set(shown.of("namespace"))
