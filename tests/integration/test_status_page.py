"""The status page (``GET /status``): filters, pages, escaping, its place in the views' frame.

The demo's page in a real browser is tests/browser/test_status_page_browser.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from html.parser import HTMLParser
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from helpers import eventually, reserved_port, running_collector, scraping_collector, serving
from receivers import Recorder, prometheus_receiver

from collector.app import STORE
from collector.normalise.batch import Batch, Source
from collector.normalise.labelsets import series_key
from collector.normalise.schema import MEMORY_ALLOCATED, SourceKind
from collector.web.ui.layout import NAV, PAGE_ROWS
from collector.web.ui.panels import Panel
from collector.web.ui.status import PANELS
from simulator.cluster import build_cluster
from simulator.monitors import MonitorFarm
from testing.fakekube import FakeKube

HOSTILE = '<script>alert("x")</script>&amp;'


class Rows(HTMLParser):
    """A page's table rows: the text of each cell; for source rows, their data-* attributes."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.rows: list[dict[str, str]] = []
        self.cells: list[list[str]] = []
        self.every: list[list[str]] = []
        self._in_cell = False
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tr":
            self.every.append([])
            if dict(attrs).get("class") == "source":
                self.rows.append({k.removeprefix("data-"): v or "" for k, v in attrs})
                self.cells.append(self.every[-1])
        elif tag == "td":
            self.every[-1].append("")
            self._in_cell = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._in_cell = False

    def handle_data(self, data: str) -> None:
        if self._in_cell:
            self.every[-1][-1] += data

    def nodes(self) -> list[str]:
        return [row["node"] for row in self.rows]

    def row(self, node: str, kind: str) -> tuple[dict[str, str], list[str]]:
        for attrs, cells in zip(self.rows, self.cells, strict=True):
            if attrs["node"] == node and attrs["kind"] == kind:
                return attrs, cells
        raise AssertionError(f"no {kind} row for {node}: {self.nodes()}")

    def starting(self, text: str) -> list[list[str]]:
        """The cells of every row whose first cell starts with ``text``."""
        return [cells for cells in self.every if cells and cells[0].startswith(text)]


async def get(
    http: aiohttp.ClientSession, url: str, params: dict[str, str] | None = None
) -> tuple[int, str]:
    async with http.get(url, params=params) as resp:
        return resp.status, await resp.text()


def agent_source(node: str) -> Source:
    return Source(f"agent/{node}", f"agent {node}-id", node, SourceKind.AGENT, 0)


# A few series, so each agent's node has data to serve.
BATCH = Batch({b'hami_host_gpu_utilization_ratio{device_index="0"}': 0.5}, samples=1)


@asynccontextmanager
async def with_agents(nodes: list[str]) -> AsyncIterator[tuple[str, web.Application]]:
    """A collector holding one pushed batch per node of ``nodes``, nothing scraped."""
    async with running_collector(kubernetes=False) as (base, app):
        for node in nodes:
            app[STORE].put(agent_source(node), BATCH, time.monotonic())
        yield base, app


async def test_pages_are_bounded_and_link_onwards() -> None:
    nodes = [f"n-{i:03d}" for i in range(PAGE_ROWS * 2 + 50)]
    async with with_agents(nodes) as (base, _), aiohttp.ClientSession() as http:
        status, first = await get(http, f"{base}/status")
        assert status == 200
        assert Rows(first).nodes() == nodes[:PAGE_ROWS]
        assert 'href="/status?page=2"' in first
        assert "previous" not in first
        _, last = await get(http, f"{base}/status?page=3")
        assert Rows(last).nodes() == nodes[PAGE_ROWS * 2 :]
        assert 'href="/status?page=2"' in last
        assert "next" not in last
        _, past = await get(http, f"{base}/status?page=9")
        assert Rows(past).nodes() == []
        assert "No source matches." in past


async def test_filters_by_node_kind_and_state() -> None:
    nodes = [f"n-{i:03d}" for i in range(150)]
    async with with_agents(nodes) as (base, _), aiohttp.ClientSession() as http:
        _, some = await get(http, f"{base}/status?node=n-12")
        assert Rows(some).nodes() == [f"n-12{i}" for i in range(10)]
        _, agents = await get(http, f"{base}/status?kind=agent&state=up&node=n-0")
        assert Rows(agents).nodes() == nodes[:100]
        assert all(row["state"] == "up" for row in Rows(agents).rows)
        _, none = await get(http, f"{base}/status?kind=hami")
        assert Rows(none).nodes() == []
        _, failing = await get(http, f"{base}/status?state=failing")
        assert Rows(failing).nodes() == []


def allocation(node: str, *pods: tuple[str, str]) -> tuple[Source, Batch]:
    """The pod watch's source of ``node`` and a batch allocating a vGPU to each of ``pods``."""
    source = Source(f"allocation/{node}", "pod watch", node, SourceKind.ALLOCATION, 9)
    series = {
        series_key(
            MEMORY_ALLOCATED,
            [("namespace", namespace), ("pod", pod), ("container", "main"), ("vdevice_index", "0")],
        ): float(1 << 30)
        for namespace, pod in pods
    }
    return source, Batch(series, samples=len(series))


async def test_nodes_with_allocations_but_no_usage_source_are_listed() -> None:
    """Only the pod watch feeds gpu-lost: it is listed with its pods; gpu-fed has an agent too."""
    async with with_agents(["gpu-fed"]) as (base, app), aiohttp.ClientSession() as http:
        store = app[STORE]
        store.put(
            *allocation("gpu-lost", ("team-a", "train-0"), ("team-b", "infer-1")), time.monotonic()
        )
        store.put(*allocation("gpu-fed", ("team-c", "seen-2")), time.monotonic())
        store.put(*allocation("gpu-gone-9", ("team-d", "eval-3")), time.monotonic())
        status, html = await get(http, f"{base}/status")
        assert status == 200
        section = Unreported(html)
        assert section.rows == {
            "gpu-lost": ["team-a/train-0", "team-b/infer-1"],
            "gpu-gone-9": ["team-d/eval-3"],
        }
        assert 'href="docs/runbook.md#haminodewithoutusagesource"' in html
        assert "HamiNodeWithoutUsageSource" in html
        assert "seen-2" not in html
        # The node filter of the page narrows this section too.
        _, narrowed = await get(http, f"{base}/status", {"node": "gone"})
        assert Unreported(narrowed).rows == {"gpu-gone-9": ["team-d/eval-3"]}
        # A node that gains an agent leaves the section.
        store.put(agent_source("gpu-lost"), BATCH, time.monotonic())
        _, later = await get(http, f"{base}/status")
        assert Unreported(later).rows == {"gpu-gone-9": ["team-d/eval-3"]}
        _, none = await get(http, f"{base}/status", {"node": "fed"})
        assert Unreported(none).rows == {}
        assert "Every node with allocations has a usage source." in none


class Unreported(HTMLParser):
    """The unreported-nodes section: each row's node and its pods (namespace/pod)."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.rows: dict[str, list[str]] = {}
        self._node = ""
        self._pod = False
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "tr" and values.get("class") == "unreported":
            self._node = values.get("data-node") or ""
            self.rows[self._node] = []
        elif tag == "span" and values.get("class") == "pod":
            self._pod = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "span":
            self._pod = False

    def handle_data(self, data: str) -> None:
        if self._pod:
            self.rows[self._node].append(data)


class ErrorPage(HTMLParser):
    """An error page of the frame: its title (``<h1>``) and what it says (``p.error``)."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.title = self.said = ""
        self._into = ""
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "h1" or (tag == "p" and dict(attrs).get("class") == "error"):
            self._into = tag

    def handle_endtag(self, tag: str) -> None:
        self._into = ""

    def handle_data(self, data: str) -> None:
        if self._into == "h1":
            self.title += data
        elif self._into == "p":
            self.said += data


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ("state=down", "state must be"),
        ("kind=gpu", "kind must be"),
        ("page=0", "page must be"),
        ("page=x", "page must be"),
        ("page=%C2%B2", "page must be"),
        ("colour=red", "unknown query parameter 'colour'"),
        ("node=a&node=b", "query parameter 'node' is given more than once"),
    ],
)
async def test_a_bad_parameter_is_refused_by_name(query: str, said: str) -> None:
    """A 400 is the frame's error page, as every view's is, naming the parameter."""
    async with with_agents(["n-1"]) as (base, _), aiohttp.ClientSession() as http:
        async with http.get(f"{base}/status?{query}") as resp:
            status, kind, html = resp.status, resp.content_type, await resp.text()
        assert (status, kind) == (400, "text/html")
        page = ErrorPage(html)
        assert page.title == "Bad request"
        assert page.said.startswith(said), page.said
        assert '<a href="/status" aria-current="page">Status</a>' in html  # the frame's nav


async def test_the_page_is_in_the_views_frame() -> None:
    """The nav of every view with Status current, the frame's one stylesheet and its footer;
    no reload (it would lose a node filter being typed), so no script at all."""
    async with with_agents(["n-1", "n-2"]) as (base, _), aiohttp.ClientSession() as http:
        _, html = await get(http, f"{base}/status", {"kind": "agent"})
        for label, path in NAV:
            current = ' aria-current="page"' if path == "/status" else ""
            assert f'<a href="{path}"{current}>{label}</a>' in html
        assert html.count("<style>") == 1
        assert "<h1>Status</h1>" in html
        assert '<p class="links">The same numbers:' in html
        assert "<script" not in html
        assert Rows(html).nodes() == ["n-1", "n-2"]
        assert 'href="/status?state=up&amp;kind=agent"' in html  # a filter keeps the others
        # the frame's refresh=0 (its "stop" link on other pages) is taken and changes nothing
        _, still = await get(http, f"{base}/status", {"kind": "agent", "refresh": "0"})
        assert Rows(still).nodes() == ["n-1", "n-2"]


async def test_every_value_from_the_cluster_is_escaped() -> None:
    async with with_agents([HOSTILE]) as (base, app), aiohttp.ClientSession() as http:
        app[PANELS].append(
            lambda: Panel("Remote <b>write</b>", ("Name", "State"), [(HOSTILE, "up")])
        )
        _, html = await get(http, f"{base}/status", {"node": HOSTILE})
        assert "<script>" not in html
        assert "<b>write" not in html
        assert html.count("&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&amp;amp;") >= 3
        assert Rows(html).nodes() == [HOSTILE]  # a parser gets the name back, unchanged
        assert "Remote &lt;b&gt;write&lt;/b&gt;" in html


async def test_remote_write_destinations_show_their_state(tmp_path: Path) -> None:
    """A receiver that accepts, one that refused a batch, one that is down: each as it is."""
    refusing = Recorder(400)
    receiver = web.Application()
    receiver.router.add_post("/api/v1/write", refusing.handle)
    with prometheus_receiver(tmp_path) as prometheus, reserved_port() as dead:
        async with serving(receiver) as refuser:
            down = f"http://127.0.0.1:{dead}/api/v1/write"
            urls = [
                f"{prometheus}/api/v1/write",
                f"{refuser}/api/v1/write",
                f"http://collector:hunter2@127.0.0.1:{dead}/api/v1/write?token=hunter2",
            ]
            async with (
                running_collector(
                    kubernetes=False,
                    interval=0.5,
                    remote_write_url=urls,
                    remote_write_flush_timeout=0,
                ) as (base, app),
                aiohttp.ClientSession() as http,
            ):
                app[STORE].put(agent_source("n-1"), BATCH, time.monotonic())
                rows: dict[str, list[str]] = {}
                html = ""

                async def shown() -> bool:
                    nonlocal html
                    _, html = await get(http, f"{base}/status")
                    rows.clear()
                    rows.update((cells[0], cells) for cells in Rows(html).starting("http://"))
                    return (
                        rows.keys() == {urls[0], urls[1], down}
                        and rows[urls[0]][1] == "up"
                        and rows[urls[1]][1] == "up"
                        and rows[urls[1]][5] != "0"
                        and rows[down][1] == "failing"
                    )

                await eventually(shown, 30, "every destination in its state")
    assert "<h2>Remote write</h2>" in html
    assert "hunter2" not in html
    # Destination, State, Pending, Sent, Dropped, Failed, Last success, Last error
    accepted = rows[urls[0]]
    assert int(accepted[3]) > 0
    assert (accepted[4], accepted[5], accepted[7]) == ("0", "0", "")
    assert "ago" in accepted[6]
    refused = rows[urls[1]]
    assert int(refused[3]) > 0
    assert refused[7].endswith("samples refused (HTTP 400: refused (400))")
    unreachable = rows[down]
    assert (unreachable[3], unreachable[6]) == ("0", "never")
    assert int(unreachable[2]) > 0
    assert "Cannot connect to host 127.0.0.1" in unreachable[7]


async def test_a_failing_target_shows_its_error_and_the_file_discovery(tmp_path: Path) -> None:
    simulated = build_cluster(3, seed=2, flavours=("hami", "volcano", "kai"))
    async with (
        MonitorFarm(simulated) as farm,
        scraping_collector(farm, tmp_path, interval=1.0, timeout=1.0) as (base, _),
        aiohttp.ClientSession() as http,
    ):
        broken = simulated[2].name
        farm.set_fault(broken, "500")

        async def shown() -> bool:
            _, failing = await get(http, f"{base}/status?state=failing")
            _, up = await get(http, f"{base}/status?state=up")
            healthy = [simulated[0].name, simulated[1].name]
            return Rows(failing).nodes() == [broken] and Rows(up).nodes() == healthy

        await eventually(shown, 20, "the broken target failing, the others up")
        _, html = await get(http, f"{base}/status?state=failing")
        _, cells = Rows(html).row(broken, "kai")
        assert "http: HTTP 500 Internal Server Error" in cells[-1]
        assert "synced" in html
        assert str(tmp_path / "targets.json") in html


async def test_a_hostile_node_name_from_a_targets_file_is_escaped(tmp_path: Path) -> None:
    async with MonitorFarm(build_cluster(1, seed=3, flavours=("hami",))) as farm:
        (_, _, address) = farm.targets()[0]
        targets = tmp_path / "hostile.json"
        targets.write_text(json.dumps([{"targets": [address], "labels": {"node": HOSTILE}}]))
        async with (
            running_collector(kubernetes=False, targets_file=targets, interval=1, timeout=1) as (
                base,
                _,
            ),
            aiohttp.ClientSession() as http,
        ):

            async def scraped() -> bool:
                _, html = await get(http, f"{base}/status?state=up")
                return Rows(html).nodes() == [HOSTILE]

            await eventually(scraped, 15, "the target scraped")
            _, html = await get(http, f"{base}/status")
            assert "<script>" not in html


async def test_discovery_shows_a_failing_watch_then_its_sync(
    fake: FakeKube, kubeconfig: Path
) -> None:
    fake.set_down(True)
    async with (
        running_collector(kubernetes=True, kubeconfig=kubeconfig, flavours="hami") as (base, _),
        aiohttp.ClientSession() as http,
    ):
        watch = "hami pods 'app.kubernetes.io/component=hami-device-plugin' in all namespaces"

        async def shown(state: str) -> list[str] | None:
            found = Rows((await get(http, f"{base}/status"))[1]).starting(watch)
            return found[0] if found and found[0][1] == state else None

        await eventually(lambda: _is_row(shown("error")), 10, "the watch failing")
        failing = await shown("error")
        assert failing is not None
        assert failing[3] == "API error 503 Service Unavailable"
        _, html = await get(http, f"{base}/status")
        assert "discovery has not synced" in html
        fake.set_down(False)
        await eventually(lambda: _is_row(shown("synced")), 30, "the watch synced")
        assert await shown("synced") == [watch, "synced", "0", ""]


async def test_discovery_shows_a_bad_targets_file(tmp_path: Path) -> None:
    # A bad file at start stops the collector; one that turns bad later is shown.
    targets = tmp_path / "targets.yaml"
    targets.write_text("[]\n")
    async with (
        running_collector(kubernetes=False, targets_file=targets) as (base, _),
        aiohttp.ClientSession() as http,
    ):
        targets.write_text("- targets: [127.0.0.1:9]\n  labels: {flavour: hami}\n")  # no node

        async def shown() -> list[str] | None:
            found = Rows((await get(http, f"{base}/status"))[1]).starting(f"targets file {targets}")
            return found[0] if found and found[0][1] == "error" else None

        await eventually(lambda: _is_row(shown()), 10, "the targets file's error")
        row = await shown()
        assert row is not None
        assert row[2] == "0"
        assert "labels.node" in row[3]
        assert row[3].endswith("the last good targets are kept")


async def _is_row(found: Awaitable[list[str] | None]) -> bool:
    return await found is not None
