"""The overview (``GET /``): the demo in a real browser, its numbers against REST's, a tenant's
share, pages of tiles at size, and the last hour from the history.

The browser is Debian's chromium, headless (tests/support/browser.py): it loads the
overview the demo serves, the test reads the DOM it built and keeps a
screenshot in the test's temporary folder.
"""

from __future__ import annotations

import asyncio
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from browser import page_and_shot, png_size
from helpers import eventually, running_demo
from test_read_auth import TENANT, Reads, collector
from test_status_page import with_agents

from collector.normalise.batch import Batch, Source
from collector.normalise.schema import SourceKind
from collector.promql.engine import Engine
from collector.store.latest import Store
from collector.tsdb.history import History
from collector.views.chargeback import IDLE_AFTER
from collector.web.ui.layout import PAGE_ROWS
from collector.web.ui.trend import Trend
from testing.fakekube import FakeKube

GIB = 1 << 30


class Overview(HTMLParser):
    """What a person reads on the overview: the totals' cards, the tiles, the namespace rows."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.totals: dict[str, float | None] = {}
        self.generation = -1
        self.tiles: dict[str, dict[str, str]] = {}
        self.namespaces: set[str] = set()
        self._tile: str | None = None
        self._depth = 0
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if "data-generation" in a:
            self.generation = int(a["data-generation"])
        if tag == "div" and "data-total" in a:  # a total's card; unknown: ""
            value = a["data-value"]
            self.totals[a["data-total"]] = float(value) if value else None
        if tag == "tr" and "data-namespace" in a:
            self.namespaces.add(a["data-namespace"])
        if tag == "a" and "tile" in a.get("class", "").split():
            self._tile = a["data-node"]
            self.tiles[self._tile] = {"state": a["data-state"], "text": ""}
        elif self._tile is not None and tag == "div":
            self._depth += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "a":
            self._tile = None

    def handle_data(self, data: str) -> None:
        if self._tile is not None:
            self.tiles[self._tile]["text"] += data


async def rest_totals(http: aiohttp.ClientSession, base: str, **headers: str) -> dict[str, Any]:
    """The same totals from REST: nodes and pods, with the generation each answer had."""
    async with http.get(f"{base}/api/v1/nodes", headers=headers) as resp:
        nodes = await resp.json()
    async with http.get(f"{base}/api/v1/pods", headers=headers) as resp:
        pods = await resp.json()
    rows = pods["containers"]
    allocated = [r for r in rows if r["memory_allocated_bytes"] or r["cores_allocated"]]
    return {
        "generations": {nodes["generation"], pods["generation"]},
        "names": {n["name"] for n in nodes["nodes"]},
        "nodes": nodes["total"],
        "cards": sum(n["card_count"] for n in nodes["nodes"]),
        "memory_used": sum(n["memory_used_bytes"] or 0 for n in nodes["nodes"]),
        "memory_allocated": sum(r["memory_allocated_bytes"] or 0 for r in rows)
        if any(r["memory_allocated_bytes"] is not None for r in rows)
        else None,
        "idle": sum(1 for r in allocated if (r["idle_seconds"] or 0) > IDLE_AFTER),
        "unreported": sum(1 for n in nodes["nodes"] if n["health"] == "unreported"),
        "namespaces": {r["namespace"] for r in rows},
    }


async def overview_and_rest(
    http: aiohttp.ClientSession, base: str, **headers: str
) -> tuple[Overview, dict[str, Any]]:
    """The overview and REST read back to back, again until they saw one store generation."""
    found: tuple[Overview, dict[str, Any]] | None = None

    async def same_generation() -> bool:
        nonlocal found
        async with http.get(f"{base}/", headers=headers) as resp:
            assert resp.status == 200, await resp.text()
            page = Overview(await resp.text())
        rest = await rest_totals(http, base, **headers)
        found = page, rest
        return bool(rest["generations"] == {page.generation})

    await eventually(same_generation, 30, "the overview and REST at one store generation")
    assert found is not None
    return found


@pytest.mark.timeout(240)  # up to 90 s of page loads, each a browser start, on a busy machine
async def test_the_demo_overview_in_a_real_browser(tmp_path: Path) -> None:
    folder = tmp_path / "demo"
    folder.mkdir()
    async with running_demo(folder, 4, 2.0) as (base, lines), aiohttp.ClientSession() as http:
        assert lines[0] == f"Overview: {base}/"
        flaky = lines[2].rpartition("flaky: ")[2]
        dom = ""
        shot = tmp_path / "overview.png"

        # The flaky monitor fails about every other scrape: load the page until it shows
        # failing. Each load dumps the DOM and takes the screenshot of that same page.
        async def failing_in_browser() -> bool:
            nonlocal dom
            dom = await page_and_shot(
                tmp_path / "profile", shot, f"{base}/?refresh=0", (1400, 1000)
            )
            tiles = Overview(dom).tiles
            return tiles.get(flaky, {}).get("state") == "failing"

        await eventually(failing_in_browser, 90, f"chromium showing {flaky} failing")
        page = Overview(dom)
        rest = await rest_totals(http, base)
        assert set(page.tiles) == rest["names"]
        assert "failing" in page.tiles[flaky]["text"]  # said in words, not by colour alone
        assert page.totals["nodes"] == rest["nodes"] == 7
        assert page.totals["cards"] == rest["cards"]
        assert page.namespaces <= rest["namespaces"]
        assert "<svg" in dom
        assert 'role="img"' in dom
        assert png_size(shot) == (1400, 1000)
        assert shot.stat().st_size > 30_000  # text, tiles and charts, not a blank page

        # The changing numbers, read back to back with REST at one store generation.
        page, rest = await overview_and_rest(http, base)
        for name in ("nodes", "cards", "memory_used", "memory_allocated", "idle", "unreported"):
            assert page.totals[name] == rest[name], name
        assert (page.totals["memory_used"] or 0) > 0


async def test_a_tenant_sees_only_its_namespaces(fake: FakeKube, kubeconfig: Path) -> None:
    async with collector(fake, kubeconfig) as reads:
        reader = {"Authorization": f"Bearer {reads.reader}"}
        tenant = {"Authorization": f"Bearer {reads.tenant}"}
        page, rest = await overview_and_rest(reads.http, reads.url, **tenant)
        assert page.totals["memory_used"] == rest["memory_used"] == 1 << 30  # its own, not 9 GiB
        assert page.totals["nodes"] == 1
        assert "cards" not in page.totals  # a card's readings are the cluster's
        assert page.namespaces == rest["namespaces"] == {"team-a"}
        assert list(page.tiles) == ["node-a"]
        whole, rest = await overview_and_rest(reads.http, reads.url, **reader)
        assert whole.totals["memory_used"] == rest["memory_used"] == 9 << 30
        assert whole.namespaces == {"team-a", "team-b"}
        await _refused_status(reads)


async def _refused_status(reads: Reads) -> None:
    status, text = await reads.get("/status", reads.tenant)
    assert status == 403
    assert "team" not in str(text)
    status, _ = await reads.get("/status", reads.reader)
    assert status == 200
    status, html = await reads.get("/", reads.tenant)
    assert status == 200
    assert TENANT in html  # the page says whose view it is


async def test_tiles_come_a_page_at_a_time_and_bad_parameters_are_named() -> None:
    nodes = [f"n-{i:03d}" for i in range(PAGE_ROWS * 2 + 50)]
    async with with_agents(nodes) as (base, _), aiohttp.ClientSession() as http:
        async with http.get(f"{base}/?refresh=0") as resp:
            first = await resp.text()
        page = Overview(first)
        assert list(page.tiles) == nodes[:PAGE_ROWS]
        assert page.totals["nodes"] == len(nodes)
        assert 'rel="next" href="/?refresh=0&amp;page=2"' in first
        assert "<script>" not in first  # ?refresh=0: no reload
        async with http.get(f"{base}/?page=3") as resp:
            last = await resp.text()
        assert list(Overview(last).tiles) == nodes[PAGE_ROWS * 2 :]
        assert "setTimeout" in last
        for query, named in (
            ("page=0", "page"),
            ("page=x", "page"),
            ("nodes=1", "unknown parameter &#39;nodes&#39;"),
        ):
            async with http.get(f"{base}/?{query}") as resp:
                assert resp.status == 400, query
                assert named in await resp.text()


async def test_the_last_hour_is_read_from_the_history_and_topped_up() -> None:
    step = 30.0  # an interval of 1 s charts a step of SPAN / POINTS = 30 s
    # a second into the present step, so that "a second into the next step" below is one
    # whatever the wall clock reads
    now = time.time() // step * step + 1.0
    start = (now // step - 10) * step  # ten whole steps ago
    store = Store(120.0, History(3600.0, 1000))

    def put(t: float, used: float) -> None:
        for n in (1, 2):
            source = Source(f"agent/n{n}", "agent", f"n{n}", SourceKind.AGENT, 0)
            key = b'hami_host_gpu_memory_used_bytes{device_index="0"}'
            store.put(source, Batch({key: n * used}, samples=1), 0.0, t)

    for i in range(11):
        put(start + i * step, float(i * GIB))
    clock = [now]
    trend = Trend(Engine(store.history), 1.0, clock=lambda: clock[0])
    kept: dict[str, Any] = {}

    async def charted(t: float, value: float) -> bool:
        kept.update(await trend.series(None, {}))
        await asyncio.sleep(0)
        return (t, value) in kept["memory used"].points

    await eventually(lambda: charted(start + 10 * step, 30.0 * GIB), 10, "ten steps charted")
    used = kept["memory used"].points
    assert used[:11] == [(start + i * step, 3.0 * i * GIB) for i in range(11)]
    assert used[11:] == []  # the steps to the last whole one
    assert kept["memory allocated"].points == []  # no allocation series: nothing drawn
    ended = await trend.series(None, {"memory used": 7.0 * GIB, "utilisation": None})
    assert ended["memory used"].points == [*used, (now, 7.0 * GIB)]  # now, from the page
    assert ended["utilisation"].points == []

    # the next step's page records its point of now as the step's: the history's 300 GiB
    # there is not read
    put(start + 11 * step, 100.0 * GIB)
    clock[0] = now + step
    page = {"memory used": 9.0 * GIB, "utilisation": 40.0}
    recorded = await trend.series(None, page)
    assert recorded["memory used"].points == [*used, (now + step, 9.0 * GIB)]
    assert recorded["utilisation"].points == [(now + step, 40.0)]
    assert recorded["memory allocated"].points == []
    clock[0] = now + step + 1.0  # later in the same step: a point of now, not recorded
    later = await trend.series(None, {"memory used": 8.0 * GIB})
    assert later["memory used"].points[-2:] == [
        (now + step, 9.0 * GIB),
        (now + step + 1, 8.0 * GIB),
    ]
    assert (await trend.series(None, {}))["memory used"].points[-1] == (now + step, 9.0 * GIB)

    # after a pause of whole steps, the history tops them up
    for k in (12, 13, 14):
        put(start + k * step, float(k * GIB))
    clock[0] = now + 4 * step
    await eventually(lambda: charted(start + 14 * step, 42.0 * GIB), 10, "the paused steps")
    assert kept["memory used"].points[11:] == [
        (now + step, 9.0 * GIB),
        *[(start + k * step, 3.0 * k * GIB) for k in (12, 13, 14)],
    ]
