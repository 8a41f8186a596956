"""The nodes, workloads and namespaces views at the handler level: their rows against REST's,
pages, sorting, filters, refused parameters, unknown names, hostile label values, tenants.

Each test serves the real app (``build_app``) holding pushed batches, nothing
scraped; a test middleware sets the reader from ``X-Test-Tenant`` as the read
authorization middleware would from a token.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any, cast
from urllib.parse import quote

import aiohttp
from aiohttp import web
from helpers import eventually, holds, serving

from collector.app import STORE, build_app
from collector.auth.access import ACCESS, Access
from collector.normalise import labelsets, schema
from collector.normalise.batch import Batch, Source
from collector.normalise.schema import SourceKind
from collector.promql.engine import Engine
from collector.settings import CollectorSettings
from collector.store.latest import Store
from collector.tsdb.history import History
from collector.views.cache import NodeCache
from collector.views.chargeback import Chargeback, Window
from collector.views.models import UsageReport
from collector.web.ui import units
from collector.web.ui.kinds import Kinds
from collector.web.ui.namespaces import Reports
from collector.web.ui.workloads import WorkloadViews

HOSTILE = '<script>alert("x")</script>&amp;'
GIB = 1 << 30


class Rows(HTMLParser):
    """Each ``<tr>`` with a ``data-*`` attribute: those attributes and its cells' text; the
    links; each card's used memory (``<section data-device-uuid>``); the line charts."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.rows: list[tuple[dict[str, str], list[str]]] = []
        self.links: list[str] = []
        self.cards: dict[str, int | None] = {}
        self.charts = self.polylines = 0
        self._cell = False
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {k: v or "" for k, v in attrs}
        if tag == "section" and "data-device-uuid" in found:
            memory = found.get("data-memory-used-bytes", "")
            self.cards[found["data-device-uuid"]] = int(memory) if memory else None
        elif tag == "svg" and "line-chart" in found.get("class", "").split():
            self.charts += 1
        elif tag == "polyline" and found.get("points"):
            self.polylines += 1
        elif tag == "tr" and any(k.startswith("data-") for k in found):
            self.rows.append(({k.removeprefix("data-"): v for k, v in found.items()}, []))
        elif tag == "td" and self.rows:
            self.rows[-1][1].append("")
            self._cell = True
        elif tag == "a" and "href" in found:
            self.links.append(found["href"])

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "tr"):
            self._cell = False

    def handle_data(self, data: str) -> None:
        if self._cell:
            self.rows[-1][1][-1] += data

    def of(self, name: str) -> list[str]:
        return [attrs[name] for attrs, _ in self.rows if name in attrs]


@web.middleware
async def access_from_header(request: web.Request, handler: Any) -> web.StreamResponse:
    header = request.headers.get("X-Test-Tenant")
    if header is not None:
        request[ACCESS] = Access(f"tenant:{header}", frozenset(header.split(",")))
    response: web.StreamResponse = await handler(request)
    return response


@dataclass(frozen=True)
class Vgpu:
    namespace: str
    pod: str
    container: str = "main"
    used: int = GIB
    allocated: int = 4 * GIB
    cores: float = 0.25
    idle: float = 0.0
    kind: str = "vgpu"


def batch(node: int, vgpus: Sequence[Vgpu], used: int = 10 * GIB) -> Batch:
    """One card of 80 GiB with ``used`` bytes in use, and the container vGPUs on it."""
    uuid = f"GPU-{node:04d}"
    card = labelsets.card(0, "NVIDIA A100", uuid)
    series = {
        labelsets.key("hami_host_gpu_memory_used_bytes", card): float(used),
        labelsets.key("hami_host_gpu_memory_total_bytes", card): 80.0 * GIB,
        labelsets.key("hami_host_gpu_utilization_ratio", card): 40.0,
        labelsets.key("hami_host_gpu_temperature_celsius", card): 61.0,
        labelsets.key("hami_host_gpu_power_usage_watts", card): 215.0,
    }
    for v in vgpus:
        labels = labelsets.vgpu(v.namespace, v.pod, v.container, 0, uuid)
        info = labelsets.container_info(v.namespace, v.pod, v.container, v.kind)
        series |= {
            labelsets.key(schema.VGPU_MEMORY_USED, labels): float(v.used),
            labelsets.key(schema.VGPU_UTILIZATION, labels): 20.0,
            labelsets.key(schema.MEMORY_ALLOCATED, labels): float(v.allocated),
            labelsets.key(schema.CORE_ALLOCATED, labels): v.cores,
            labelsets.key(schema.IDLE, labels): v.idle,
            labelsets.key(schema.GPU_INFO, info): 1.0,
        }
    return Batch(series, samples=len(series))


def name(i: int) -> str:
    return f"n-{i:03d}"


@asynccontextmanager
async def collector(
    nodes: dict[str, Batch], retention: float = 3600.0, kind: SourceKind = SourceKind.AGENT
) -> AsyncIterator[tuple[str, aiohttp.ClientSession]]:
    """The app holding ``nodes``, each from a source of ``kind`` twice, a minute apart (for
    the history)."""
    settings = CollectorSettings(
        listen="127.0.0.1:0", kubernetes=False, history_retention=retention
    )
    app = build_app(settings)
    app.middlewares.append(access_from_header)
    now = time.time()
    for node, held in nodes.items():
        source = Source(f"{kind}/{node}", f"{kind} {node}", node, kind, 0)
        for sampled in (now - 60, now):
            app[STORE].put(source, held, time.monotonic(), sampled)
    async with serving(app) as base, aiohttp.ClientSession(base) as http:
        yield base, http


async def page(
    http: aiohttp.ClientSession, path: str, tenant: str | None = None, status: int = 200
) -> str:
    headers = {} if tenant is None else {"X-Test-Tenant": tenant}
    async with http.get(path, headers=headers) as resp:
        text = await resp.text()
        assert resp.status == status, (path, resp.status, text[-800:])
        assert resp.content_type == "text/html"
        return text


async def rest(http: aiohttp.ClientSession, path: str, tenant: str | None = None) -> Any:
    headers = {} if tenant is None else {"X-Test-Tenant": tenant}
    async with http.get(path, headers=headers) as resp:
        assert resp.status == 200, await resp.text()
        return await resp.json()


def cluster(count: int) -> dict[str, Batch]:
    """``count`` nodes, node i with i GiB in use and two pods (namespaces ns-a and ns-<i % 3>)."""
    return {
        name(i): batch(
            i,
            [Vgpu("ns-a", f"a-{i}", used=i * GIB), Vgpu(f"ns-{i % 3}", f"b-{i}", idle=400.0 * i)],
            used=i * GIB,
        )
        for i in range(count)
    }


async def test_nodes_are_paged_sorted_and_filtered_as_rest() -> None:
    async with collector(cluster(250)) as (_, http):
        first = Rows(await page(http, "/nodes"))
        assert first.of("node") == [name(i) for i in range(100)]
        assert "/nodes?page=2" in first.links
        last = Rows(await page(http, "/nodes?page=3"))
        assert last.of("node") == [name(i) for i in range(200, 250)]
        for query in ("sort=-memory_used_bytes", "sort=name&namespace=ns-1", "namespace=ns-2"):
            shown = Rows(await page(http, f"/nodes?{query}")).of("node")
            listed = await rest(http, f"/api/v1/nodes?{query}&limit=100")
            assert shown == [n["name"] for n in listed["nodes"]], query
        top = Rows(await page(http, "/nodes?sort=-memory_used_bytes"))
        attrs, cells = top.rows[0]
        assert attrs["node"] == name(249)
        assert "249 GiB" in cells[3]
        assert "80 GiB" in cells[4]
        assert "/api/v1/nodes?sort=-memory_used_bytes" in top.links


async def test_node_detail_shows_each_card_with_its_pods_and_readings() -> None:
    held = {"n-1": batch(1, [Vgpu("ns-a", "p", kind="whole", cores=1.0), Vgpu("ns-b", "q")])}
    async with collector(held) as (_, http):
        html = await page(http, "/nodes/n-1")
        rows = Rows(html)
        assert sorted(rows.of("pod")) == ["p", "q"]
        kinds = {attrs["pod"]: cells[3] for attrs, cells in rows.rows if "pod" in attrs}
        assert kinds == {"p": "whole card", "q": "HAMi vGPU"}
        assert "used 10 GiB, allocated 8 GiB, total 80 GiB" in html
        assert "61 °C" in html
        assert "215 W" in html
        assert 'href="/workloads/ns-a/p"' in html
        assert 'href="/api/v1/nodes/n-1"' in html


async def test_a_volcano_nodes_slices_are_named_so() -> None:
    held = {"v-1": batch(1, [Vgpu("ns-a", "p"), Vgpu("ns-a", "q", kind="mig")])}
    async with collector(held, kind=SourceKind.VOLCANO) as (_, http):
        rows = Rows(await page(http, "/workloads?node=v-1"))
        assert {a["pod"]: cells[4] for a, cells in rows.rows} == {
            "p": "Volcano vGPU",
            "q": "MIG instance",
        }


async def test_workloads_pages_and_sorts_are_rests() -> None:
    # 900 rows: the first pages of a sort are taken from a heap, the last ones sorted whole
    queries = (
        "",
        "page=2",
        "page=9",
        "sort=-idle_seconds",
        "sort=memory_used_bytes&page=2",
        "sort=cores_allocated",  # all equal: REST's order
        "sort=-cores_allocated&page=3",
        "sort=-node&page=8",
        "sort=namespace&page=9",
        "namespace=ns-a&page=3",
        "namespace=ns-1&sort=-memory_used_bytes&page=2",
    )
    async with collector(cluster(450)) as (_, http):
        for query in queries:
            shown = Rows(await page(http, f"/workloads?{query}"))
            number = int(query.partition("page=")[2] or 1)
            same = "&".join(q for q in query.split("&") if q and not q.startswith("page="))
            listed = await rest(http, f"/api/v1/pods?{same}")
            expected = listed["containers"][(number - 1) * 100 : number * 100]
            got = [(a["node"], a["namespace"], a["pod"]) for a, _ in shown.rows]
            assert got == [(c["node"], c["namespace"], c["pod"]) for c in expected], query
        listed = await rest(http, "/api/v1/pods")
        assert listed["total"] == 900
        filtered = Rows(await page(http, "/workloads?namespace=ns-1&node=n-004"))
        assert [(a["namespace"], a["pod"]) for a, _ in filtered.rows] == [("ns-1", "b-4")]
        _attrs, cells = filtered.rows[0]
        assert cells[4] == "HAMi vGPU"
        assert cells[5] == "4 GiB"
        assert cells[6] == "1 GiB 25%"  # used, and its share of the allocation
        assert cells[7] == "25%"
        assert cells[8] == "20% 80%"  # SM utilisation, and its share of the 25 % given
        assert "26.7 min" in cells[9]
        assert "idle" in cells[9]


async def test_a_pods_detail_charts_its_last_hour() -> None:
    held = {"n-1": batch(1, [Vgpu("ns-a", "p", "one"), Vgpu("ns-a", "p", "two", used=3 * GIB)])}
    async with collector(held) as (_, http):
        html = await page(http, "/workloads/ns-a/p")
        assert Rows(html).of("container") == ["one", "two"]
        assert html.count('class="chart line-chart"') == 4
        assert "history is filling" not in html
        assert "GPU-0001: latest 3 GiB" in html  # the chart's text alternative
        assert "ns-a/p container two: memory used" in html
        assert 'href="/api/v1/namespaces/ns-a/pods/p"' in html
        detail = await rest(http, "/api/v1/namespaces/ns-a/pods/p")
        assert detail["memory_used_bytes"] == 4 * GIB
        assert '<span class="pod-memory-used">4 GiB</span>' in html


async def test_a_pods_page_presents_again_only_the_nodes_that_hold_the_pod() -> None:
    """Other nodes of its namespace that changed keep their earlier form (warming's work)."""
    store = Store(120.0, History(3600.0, 1000))
    cache = NodeCache()
    app = web.Application()
    app[STORE] = store
    views = WorkloadViews(STORE, cache, Kinds(), Engine(store.history), 3600.0, 1.0, 300.0)
    app.router.add_routes(views.routes())

    def put(used: int) -> None:
        for i, pod in ((1, "p"), (2, "q")):
            source = Source(f"agent/{name(i)}", "agent", name(i), SourceKind.AGENT, 0)
            held = batch(i, [Vgpu("ns-a", pod, "c", used=used)])
            store.put(source, held, time.monotonic(), time.time())

    put(1 * GIB)
    async with serving(app) as base, aiohttp.ClientSession(base) as http:
        assert "1 GiB" in await page(http, "/workloads/ns-a/p")
        assert cache.stale(store) == 0  # never presented: both presented whatever the bound
        put(2 * GIB)
        html = await page(http, "/workloads/ns-a/p")
        assert '<span class="pod-memory-used">2 GiB</span>' in html
        assert cache.stale(store) == 1  # n-002 holds ns-a but not the pod: left to warming


async def test_namespaces_is_the_chargeback_report() -> None:
    async with collector(cluster(6)) as (_, http):
        html = await page(http, "/namespaces?window=1h")
        rows = Rows(html)
        csv_links = [link for link in rows.links if "format=csv" in link]
        assert len(csv_links) == 1
        report = await rest(http, csv_links[0].replace("format=csv", "format=json"))
        shown = {a["namespace"]: float(a["memory-allocated-byte-hours"]) for a, _ in rows.rows}
        assert shown == {
            g["labels"]["namespace"]: g["memory_allocated_byte_hours"] for g in report["groups"]
        }
        assert set(shown) == {"ns-a", "ns-0", "ns-1", "ns-2"}
        async with http.get(csv_links[0]) as resp:
            assert resp.status == 200
            assert resp.content_type == "text/csv"


async def test_bad_parameters_are_named_in_a_400() -> None:
    async with collector(cluster(2)) as (_, http):
        for path, said in (
            ("/nodes?sort=bogus", "unknown field &#39;bogus&#39;"),
            ("/nodes?page=0", "&#39;page&#39; must be a positive integer"),
            ("/nodes?colour=red", "unknown query parameter &#39;colour&#39;"),
            ("/workloads?page=x", "&#39;page&#39; must be a positive integer"),
            ("/workloads?node=a&node=b", "&#39;node&#39; is given more than once"),
            ("/workloads?sort=-health", "unknown field &#39;-health&#39;"),
            ("/namespaces?window=2h", "&#39;window&#39; must be one of 15m, 1h, 6h, 24h, all"),
            ("/nodes/n-000?x=1", "unknown query parameter &#39;x&#39;; allowed: refresh"),
            ("/workloads/ns-a/a-0?page=2", "unknown query parameter &#39;page&#39;"),
        ):
            html = await page(http, path, status=400)
            assert said in html, path


async def test_unknown_nodes_and_pods_are_404() -> None:
    async with collector(cluster(2)) as (_, http):
        assert "no node &#39;nope&#39; has data" in await page(http, "/nodes/nope", status=404)
        said = await page(http, "/workloads/ns-a/nope", status=404)
        assert "no pod ns-a/nope has vGPU data" in said


async def test_hostile_label_values_are_escaped_everywhere() -> None:
    held = {HOSTILE: batch(1, [Vgpu(HOSTILE, HOSTILE, HOSTILE)])}
    async with collector(held) as (_, http):
        quoted = quote(HOSTILE, safe="")
        for path in (
            "/nodes",
            f"/nodes/{quoted}",
            "/workloads",
            f"/workloads/{quoted}/{quoted}",
            "/namespaces",
        ):
            html = await page(http, path)
            assert HOSTILE not in html, path
            assert "<script>alert" not in html, path
            assert "&lt;script&gt;" in html, path
        assert Rows(await page(http, "/workloads")).of("pod") == [HOSTILE]


async def test_a_tenant_sees_only_its_namespaces() -> None:
    async with collector(cluster(9)) as (_, http):
        nodes = Rows(await page(http, "/nodes", tenant="ns-1")).of("node")
        listed = await rest(http, "/api/v1/nodes", tenant="ns-1")
        assert nodes == [n["name"] for n in listed["nodes"]] == [name(i) for i in (1, 4, 7)]
        shown = Rows(await page(http, "/workloads", tenant="ns-1"))
        assert {a["namespace"] for a, _ in shown.rows} == {"ns-1"}
        assert len(shown.rows) == 3
        sorted_rows = Rows(await page(http, "/workloads?sort=pod", tenant="ns-1"))
        assert sorted_rows.of("pod") == ["b-1", "b-4", "b-7"]
        detail = await page(http, "/nodes/n-001", tenant="ns-1")
        assert Rows(detail).of("pod") == ["b-1"]
        assert "80 GiB" not in detail  # the card's readings are the cluster's
        assert "memory used by your vGPUs 1 GiB" in detail
        await page(http, "/nodes/n-002", tenant="ns-1", status=404)
        await page(http, "/workloads/ns-a/a-1", tenant="ns-1", status=404)
        groups = Rows(await page(http, "/namespaces", tenant="ns-1")).of("namespace")
        assert groups == ["ns-1"]


class SlowReports:
    """A chargeback whose every report waits for the test's go, each step 0.05 s long."""

    def __init__(self) -> None:
        self.go = asyncio.Event()
        self.made = 0

    def window(self, start: str | None, end: str | None) -> Window:
        return Window(0.0, 0.0, 0.05, (0.0, 0.0))

    async def report(
        self, by: str, window: Window, identity: str, namespaces: object
    ) -> UsageReport:
        await self.go.wait()
        self.made += 1
        return UsageReport(
            by="namespace",
            start=0.0,
            end=float(self.made),
            requested_start=0.0,
            requested_end=0.0,
            step_seconds=0.05,
            groups=[],
        )


async def test_a_stale_report_answers_while_the_next_is_made() -> None:
    slow = SlowReports()
    reports = Reports(cast(Chargeback, slow))
    first = asyncio.create_task(reports.get(3600.0, None))
    await asyncio.sleep(0.01)
    assert not first.done()  # the first request waits for its report
    slow.go.set()
    assert (await first).end == 1
    slow.go.clear()
    await asyncio.sleep(0.06)  # past the report's step
    assert (await reports.get(3600.0, None)).end == 1  # at once, the report before
    assert (await reports.get(3600.0, None)).end == 1  # one refresh at a time
    slow.go.set()
    await eventually(lambda: holds(slow.made == 2), what="the refresh")
    assert (await reports.get(3600.0, None)).end == 2
    await reports.stop()


def bare_node(uuid: str, device_type: str | None, total: float | None) -> dict[bytes, float]:
    """A card with its used memory, its total only where given, under ``device_type``."""
    labels = [("device_index", "0"), ("device_uuid", uuid), ("zone", "vGPU")]
    if device_type is not None:
        labels.insert(1, ("device_type", device_type))
    card = tuple(labels)
    series = {labelsets.key("hami_host_gpu_memory_used_bytes", card): 10.0 * GIB}
    if total is not None:
        series[labelsets.key("hami_host_gpu_memory_total_bytes", card)] = total
    return series


def vgpu_series(
    v: Vgpu, uuid: str, allocated: float | None, sm: float | None = 20.0
) -> dict[bytes, float]:
    """One vGPU's usage and allocation; ``allocated`` None: the pod holds no memory figure
    (a whole card)."""
    labels = labelsets.vgpu(v.namespace, v.pod, v.container, 0, uuid)
    info = labelsets.container_info(v.namespace, v.pod, v.container, v.kind)
    series = {
        labelsets.key(schema.CONTAINER_MEMORY, labels): float(v.used),
        labelsets.key(schema.CORE_ALLOCATED, labels): v.cores,
        labelsets.key(schema.GPU_INFO, info): 1.0,
    }
    if sm is not None:
        series[labelsets.key(schema.VGPU_UTILIZATION, labels)] = sm
    if allocated is not None:
        series[labelsets.key(schema.MEMORY_ALLOCATED, labels)] = allocated
    return series


async def test_unknown_values_read_as_a_dash_and_draw_no_bar() -> None:
    """A card without a total, and a namespace of whole cards (no memory allocated): a dash,
    no full bar; the totals say what they cover."""
    whole = Vgpu("team-train", "llm", "trainer", used=96 * GIB, cores=1.0, kind="whole")
    held = {
        "known": batch(1, [Vgpu("ns-a", "p")]),
        "unknown": Batch(
            bare_node("GPU-U", "NVIDIA-NVIDIA H200", None) | vgpu_series(whole, "GPU-U", None),
            samples=5,
        ),
    }
    async with collector(held) as (_, http):
        nodes = Rows(await page(http, "/nodes"))
        row = {a["node"]: (a, cells) for a, cells in nodes.rows}
        attrs, cells = row["unknown"]
        assert attrs["memory-total-bytes"] == ""
        assert cells[4] == units.MISSING  # of total
        table = await page(http, "/nodes")
        assert "<svg" not in table.split('data-node="unknown"', 1)[1].split("</tr>", 1)[0]
        assert "<svg" in table.split('data-node="known"', 1)[1].split("</tr>", 1)[0]
        listed = await rest(http, "/api/v1/nodes")
        summary = next(n for n in listed["nodes"] if n["name"] == "unknown")
        assert (summary["memory_total_bytes"], summary["memory_compared"]) == (None, None)

        overview = await page(http, "/")
        top = Rows(overview)
        train = next(cells for a, cells in top.rows if a.get("namespace") == "team-train")
        assert train[1] == units.MISSING  # allocated: none, not 0 B
        assert train[3] == units.MISSING  # used of allocated: no bar
        assert "used 10 GiB of 80 GiB on 1 of 2 cards; 1 card reports no total" in overview
        assert "(they use 10 GiB)" in overview
        assert "1 of 2 vGPUs with a memory allocation" in overview

        detail = await page(http, "/nodes/unknown")
        assert "total " + units.MISSING in detail
        assert "memory used 10 GiB on the card; no card reports its memory total" in detail


async def test_card_models_read_as_the_product_name_whatever_the_prefix() -> None:
    """HAMi up to 2.7 doubles the vendor prefix, 2.8 and later write the NVML name, Volcano
    prefixes ``NVIDIA-`` to it: every page shows the NVML name."""
    held = {
        "old": Batch(bare_node("GPU-O", "NVIDIA-NVIDIA H100 80GB HBM3", 80.0 * GIB), samples=2),
        "new": Batch(bare_node("GPU-N", "NVIDIA H100 80GB HBM3", 80.0 * GIB), samples=2),
        "volcano": Batch(bare_node("GPU-V", "NVIDIA-Tesla V100-PCIE-32GB", 32.0 * GIB), samples=2),
    }
    async with collector(held) as (_, http):
        listed = {n["name"]: n for n in (await rest(http, "/api/v1/nodes"))["nodes"]}
        assert listed["old"]["card_models"] == listed["new"]["card_models"]
        assert listed["new"]["card_models"] == ["NVIDIA H100 80GB HBM3"]
        assert listed["volcano"]["card_models"] == ["Tesla V100-PCIE-32GB"]
        assert listed["old"]["card_types"] == ["NVIDIA-NVIDIA H100 80GB HBM3"]  # the label kept
        table = await page(http, "/nodes")
        assert "NVIDIA-NVIDIA" not in table
        assert "NVIDIA-Tesla" not in table
        for node, model in (("old", "NVIDIA H100 80GB HBM3"), ("volcano", "Tesla V100-PCIE-32GB")):
            html = await page(http, f"/nodes/{node}")
            assert f'<span class="muted">{model}</span>' in html
            assert "NVIDIA-" not in html.split("<h2>", 1)[1].split("</h2>", 1)[0]


async def test_a_card_allocated_past_its_size_says_why() -> None:
    """Memory past the card (a scaled card), several whole-card grants (time-slicing), shares
    past the whole card: each is what REST says and the page writes out."""
    big = Vgpu("ns-a", "big", used=GIB, cores=0.6)
    also = Vgpu("ns-a", "also", used=GIB, cores=0.6)
    shared = [Vgpu("ns-b", f"replica-{i}", used=GIB, cores=1.0, kind="whole") for i in (1, 2)]
    held = {
        "over": Batch(
            bare_node("GPU-A", "NVIDIA A100", 80.0 * GIB)
            | vgpu_series(big, "GPU-A", 50.0 * GIB)
            | vgpu_series(also, "GPU-A", 50.0 * GIB),
            samples=7,
        ),
        "sliced": Batch(
            bare_node("GPU-S", "NVIDIA A100", 80.0 * GIB)
            | vgpu_series(shared[0], "GPU-S", None)
            | vgpu_series(shared[1], "GPU-S", None),
            samples=7,
        ),
    }
    async with collector(held) as (_, http):
        over = (await rest(http, "/api/v1/nodes/over"))["cards"][0]
        assert over["memory_allocated_bytes"] == 100 * GIB
        assert over["cores_allocated"] == 1.2
        assert over["over_allocated"] == ["memory_oversubscribed", "cores_oversubscribed"]
        sliced = (await rest(http, "/api/v1/nodes/sliced"))["cards"][0]
        assert (sliced["memory_allocated_bytes"], sliced["cores_allocated"]) == (None, 2.0)
        assert sliced["over_allocated"] == ["cores_time_shared"]
        html = await page(http, "/nodes/over")
        assert "125% of the card: oversubscribed" in html
        assert "the core shares sum past the whole card" in html
        assert "time-shared: several containers each given the whole card" in await page(
            http, "/nodes/sliced"
        )
        # a container past its share says so; one within it does not
        rows = Rows(await page(http, "/workloads?node=sliced"))
        assert all(cells[8] == "20% 20%" for _, cells in rows.rows)
        burst = {"b": batch(2, [Vgpu("ns-c", "hot", cores=0.1)])}
    async with collector(burst) as (_, http):
        ((_, cells),) = Rows(await page(http, "/workloads")).rows
        assert cells[8] == "20% 200% burst past its share"
