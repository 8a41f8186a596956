"""The REST API (/api/v1): values checked against the simulator's own numbers."""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from helpers import eventually

from collector.app import STORE, build_app
from collector.normalise.batch import Source
from collector.normalise.bodies import Normaliser
from collector.normalise.schema import SourceKind
from collector.settings import CollectorSettings
from collector.sources.pods import StaticDirectory
from collector.sources.push import to_batch
from collector.store.latest import Store
from collector.views.listing import CONTAINER_SORT_FIELDS, NODE_SORT_FIELDS
from collector.views.models import ContainerList, NodeDetail, NodeList, PodDetail
from collector.web.rest.handlers import RestApi
from core.payload import Card as AgentCard
from core.payload import Payload
from simulator.cluster import build_cluster
from simulator.devices import Allocation
from simulator.families import MONITORS
from simulator.monitors import MonitorFarm
from simulator.node import WEIRD_SUFFIX, SimulatedNode
from simulator.run import collector_flavour, write_targets

NOW = float(math.floor(time.time()))
Client = TestClient[web.Request, web.Application]


def simulated(count: int = 4, seed: int = 7) -> list[SimulatedNode]:
    """One node per flavour (hami, hami-legacy, volcano, kai), readings at NOW."""
    nodes = build_cluster(count, seed=seed, flavours=MONITORS, start_time=NOW - 600)
    for node in nodes:
        node.step(NOW)
    return nodes


def source(node: SimulatedNode | str, kind: str | None = None, priority: int = 1) -> Source:
    name = node if isinstance(node, str) else node.name
    if kind is None:
        assert not isinstance(node, str)
        kind = collector_flavour(node.flavour)
    return Source(
        f"uid-{name}-{kind}", f"kube-system/{kind}-monitor-{name}", name, SourceKind(kind), priority
    )


def fill(store: Store, nodes: list[SimulatedNode], at: float | None = None) -> None:
    for node in nodes:
        batch = Normaliser(node.name).normalise(node.exposition(NOW))
        store.put(source(node), batch, time.monotonic() if at is None else at)


@asynccontextmanager
async def serving(store: Store, interval: float = 15.0) -> AsyncIterator[tuple[Client, RestApi]]:
    app = web.Application()
    app[STORE] = store
    api = RestApi(STORE, interval)
    app.router.add_routes(api.routes())
    async with TestClient(TestServer(app)) as client:
        yield client, api


async def get(client: Client, path: str, status: int = 200) -> Any:
    resp = await client.get(path)
    assert resp.status == status, await resp.text()
    assert resp.content_type == "application/json"
    return await resp.json()


def containers_of(node: SimulatedNode) -> list[Allocation]:
    return node.visible_allocations()


def expect_container(row: dict[str, Any], a: Allocation, node: SimulatedNode) -> None:
    card = node.cards[a.card]
    assert row["device_uuid"] == card.device_uuid
    assert row["vdevice_index"] == a.vdevice_index
    assert row["memory_used_bytes"] == a.used
    assert row["memory_limit_bytes"] == a.limit
    assert row["sm_utilization_percent"] == a.sm_util
    assert a.last_kernel_time is not None
    assert row["last_kernel_seconds"] == max(NOW - a.last_kernel_time, 0)
    assert row["memory_context_bytes"] == a.context
    assert row["memory_module_bytes"] == a.module
    assert row["memory_buffer_bytes"] == a.buffer


def by_identity(rows: list[dict[str, Any]]) -> dict[tuple[str, str, str, int], dict[str, Any]]:
    out = {(r["namespace"], r["pod"], r["container"], r["vdevice_index"]): r for r in rows}
    assert len(out) == len(rows), "each vGPU of each container once"
    return out


def identity(a: Allocation) -> tuple[str, str, str, int]:
    return (a.namespace, a.pod, a.container, a.vdevice_index)


# --------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------


async def test_nodes_summarise_every_node_as_the_simulator_does() -> None:
    nodes = simulated()
    store = Store(60)
    fill(store, nodes)
    async with serving(store) as (client, _):
        body = await get(client, "/api/v1/nodes")
    NodeList.model_validate(body)
    assert body["status"] == "success"
    assert body["generation"] == store.generation
    assert body["total"] == len(nodes)
    summaries = {s["name"]: s for s in body["nodes"]}
    assert list(summaries) == sorted(n.name for n in nodes), "default order: by name"
    for node in nodes:
        s = summaries[node.name]
        assert s["card_count"] == len(node.cards)
        types = [] if node.flavour == "volcano" else sorted({c.device_type for c in node.cards})
        assert s["card_types"] == types
        assert s["memory_used_bytes"] == sum(c.memory_used for c in node.cards)
        assert s["memory_total_bytes"] is None, "monitors do not report totals"
        assert [
            (u["index"], u["device_uuid"], u["utilization_percent"]) for u in s["utilization"]
        ] == [(c.index, c.device_uuid, c.utilization) for c in node.cards]
        average = sum(c.utilization for c in node.cards) / len(node.cards)
        assert s["utilization_average_percent"] == pytest.approx(average)
        expected = {(a.namespace, a.pod, a.container) for a in containers_of(node)}
        assert s["container_count"] == len(expected)
        assert s["sources"] == [
            {"kind": collector_flavour(node.flavour), "name": source(node).name}
        ]
        assert 0 <= s["data_age_seconds"] < 5
        assert s["health"] == "ok"


async def test_node_detail_puts_each_container_on_its_card() -> None:
    nodes = simulated()
    store = Store(60)
    fill(store, nodes)
    async with serving(store) as (client, _):
        for node in nodes:
            body = await get(client, f"/api/v1/nodes/{node.name}")
            NodeDetail.model_validate(body)
            assert body["node"]["name"] == node.name
            assert body["unmatched_containers"] == []
            assert [c["index"] for c in body["cards"]] == [c.index for c in node.cards]
            for card, shown in zip(node.cards, body["cards"], strict=True):
                assert shown["device_uuid"] == card.device_uuid
                assert shown["device_type"] == (
                    None if node.flavour == "volcano" else card.device_type
                )
                assert shown["model"] == (None if node.flavour == "volcano" else card.name)
                assert shown["memory_used_bytes"] == card.memory_used
                assert shown["memory_total_bytes"] is None
                assert shown["utilization_percent"] == card.utilization
                assert shown["memory_controller_utilization_percent"] == (
                    card.memory_controller_utilization if node.flavour == "hami" else None
                )
                assert shown["temperature_celsius"] is None
                assert shown["power_watts"] is None
                on_card = [a for a in containers_of(node) if a.card == card.index]
                rows = by_identity(shown["containers"])
                assert set(rows) == {identity(a) for a in on_card}
                for a in on_card:
                    expect_container(rows[identity(a)], a, node)


async def test_an_agent_beside_a_monitor_adds_temperature_and_power_to_the_same_cards() -> None:
    (node,) = build_cluster(1, seed=3, flavours=("volcano",), start_time=NOW - 600)
    node.step(NOW)
    store = Store(60)
    fill(store, [node])
    cards = [
        AgentCard(
            index=c.index,
            uuid=c.uuid,
            name=c.name,
            memory_used=c.memory_used,
            memory_total=c.memory_total,
            utilization=c.utilization,
            memory_utilization=c.memory_controller_utilization,
            temperature=40.0 + c.index,
            power=100.5 + c.index,
        )
        for c in node.cards
    ]
    payload = Payload(
        node=node.name, agent="a1", sequence=0, time=NOW, nvml=True, cards=cards, regions=[]
    )
    batch, _ = to_batch(payload, StaticDirectory({}, {}))
    store.put(source(node.name, "agent", priority=0), batch, time.monotonic())
    async with serving(store) as (client, _):
        body = await get(client, f"/api/v1/nodes/{node.name}")
    summary = body["node"]
    assert summary["card_count"] == len(node.cards), "Volcano's and the agent's labels: one card"
    assert [s["kind"] for s in summary["sources"]] == ["agent", "volcano"], "preferred first"
    assert summary["card_types"] == sorted({c.device_type for c in node.cards})
    for card, shown in zip(node.cards, body["cards"], strict=True):
        assert shown["device_type"] == card.device_type, "the agent's label fills Volcano's gap"
        assert shown["temperature_celsius"] == 40.0 + card.index
        assert shown["power_watts"] == 100.5 + card.index
        assert shown["memory_controller_utilization_percent"] == card.memory_controller_utilization
        assert len(shown["containers"]) == len(
            [a for a in node.allocations if a.card == card.index]
        )


async def test_totals_unmatched_containers_and_odd_values() -> None:
    body = (
        b'hami_host_gpu_memory_used_bytes{device_index="0",device_uuid="GPU-A"} 10\n'
        b'hami_host_gpu_memory_used_bytes{device_index="1",device_uuid="GPU-B"} 20\n'
        b'hami_host_gpu_utilization_ratio{device_index="0",device_uuid="GPU-A"} NaN\n'
        b'hami_host_gpu_memory_total_bytes{device_index="0",device_uuid="GPU-A"} 100\n'
        b'hami_host_gpu_memory_total_bytes{device_index="1",device_uuid="GPU-B"} 200\n'
        b'hami_vgpu_memory_used_bytes{container="c",device_uuid="GPU-X",namespace="n",pod="p",vdevice_index="0"} 5\n'
        b'hami_vgpu_memory_used_bytes{container="c",device_uuid="GPU-A",namespace="n",pod="p",vdevice_index="1"} 7\n'
    )
    half = body.replace(
        b'hami_host_gpu_memory_total_bytes{device_index="1"', b'other{device_index="1"'
    )
    store = Store(60)
    store.put(source("full", "hami"), Normaliser("full").normalise(body), time.monotonic())
    store.put(source("half", "hami"), Normaliser("half").normalise(half), time.monotonic())
    async with serving(store) as (client, _):
        full = await get(client, "/api/v1/nodes/full")
        half_summary = (await get(client, "/api/v1/nodes/half"))["node"]
    assert full["node"]["memory_total_bytes"] == 300
    assert full["node"]["memory_used_bytes"] == 30
    # a total says what it covers: one card of two reports its total
    assert half_summary["memory_total_bytes"] == 100
    assert (half_summary["memory_total_cards"], half_summary["memory_used_cards"]) == (1, 2)
    assert half_summary["memory_compared"] == {
        "cards": 1,
        "used_bytes": 10,
        "total_bytes": 100,
        "allocated_bytes": None,
    }
    assert full["node"]["memory_compared"]["cards"] == full["node"]["card_count"] == 2
    assert full["node"]["utilization_average_percent"] is None, "NaN is no reading"
    assert full["node"]["container_count"] == 1
    assert [c["device_uuid"] for c in full["unmatched_containers"]] == ["GPU-X"]
    assert [c["vdevice_index"] for c in full["cards"][0]["containers"]] == [1]
    assert full["cards"][0]["containers"][0]["sm_utilization_percent"] is None


async def test_pods_rows_filters_sort_and_limit() -> None:
    nodes = simulated()
    store = Store(60)
    fill(store, nodes)
    everything = [(n, a) for n in nodes for a in containers_of(n)]
    async with serving(store) as (client, _):
        body = await get(client, "/api/v1/pods")
        ContainerList.model_validate(body)
        assert body["total"] == len(everything) == len(body["containers"])
        rows = {(r["node"], *identity_of(r)): r for r in body["containers"]}
        for node, a in everything:
            expect_container(rows[(node.name, *identity(a))], a, node)
        default = [
            (r["node"], r["namespace"], r["pod"], r["container"]) for r in body["containers"]
        ]
        assert default == sorted(default)

        namespace = everything[0][1].namespace
        body = await get(client, f"/api/v1/pods?namespace={namespace}")
        assert {r["namespace"] for r in body["containers"]} == {namespace}
        assert body["total"] == sum(a.namespace == namespace for _, a in everything)

        node = nodes[1]
        body = await get(client, f"/api/v1/pods?node={node.name}&namespace=")
        assert {r["node"] for r in body["containers"]} == {node.name}, "empty filter: no filter"
        assert body["total"] == len(containers_of(node))
        both = await get(client, f"/api/v1/pods?node={node.name}&namespace={namespace}")
        assert both["total"] == sum(a.namespace == namespace for a in containers_of(node))
        assert (await get(client, "/api/v1/pods?node=nowhere"))["total"] == 0

        body = await get(client, "/api/v1/pods?sort=-memory_used_bytes&limit=5")
        used = sorted((a.used for _, a in everything), reverse=True)[:5]
        assert [r["memory_used_bytes"] for r in body["containers"]] == used
        assert body["total"] == len(everything), "total counts before the limit"
        body = await get(client, "/api/v1/pods?sort=sm_utilization_percent")
        utils = [r["sm_utilization_percent"] for r in body["containers"]]
        assert utils == sorted(utils)


def identity_of(row: dict[str, Any]) -> tuple[str, str, str, int]:
    return (row["namespace"], row["pod"], row["container"], row["vdevice_index"])


async def test_nodes_filter_sort_limit_and_nulls_last() -> None:
    nodes = simulated(6)
    store = Store(60)
    fill(store, nodes)
    store.put(
        source("bare", "hami"),
        Normaliser("bare").normalise(b'hami_build_info{version="1"} 1\n'),
        time.monotonic(),
    )
    async with serving(store) as (client, _):
        body = await get(client, "/api/v1/nodes?sort=-memory_used_bytes")
        names = [s["name"] for s in body["nodes"]]
        by_used = sorted(nodes, key=lambda n: -sum(c.memory_used for c in n.cards))
        assert names == [n.name for n in by_used] + ["bare"], "nulls last, descending too"
        body = await get(client, "/api/v1/nodes?sort=memory_used_bytes&limit=2")
        assert [s["name"] for s in body["nodes"]] == [n.name for n in reversed(by_used)][:2]
        assert body["total"] == len(nodes) + 1
        body = await get(client, "/api/v1/nodes?sort=-name")
        assert [s["name"] for s in body["nodes"]] == sorted([*names], reverse=True)
        namespace = nodes[2].allocations[0].namespace
        body = await get(client, f"/api/v1/nodes?namespace={namespace}")
        expected = {n.name for n in nodes if namespace in {a.namespace for a in containers_of(n)}}
        assert {s["name"] for s in body["nodes"]} == expected
        for field in NODE_SORT_FIELDS:
            await get(client, f"/api/v1/nodes?sort={field}")
            await get(client, f"/api/v1/nodes?sort=-{field}")
        for field in CONTAINER_SORT_FIELDS:
            await get(client, f"/api/v1/pods?sort=-{field}&limit=3")


async def test_one_pod_across_its_containers_even_with_awkward_names() -> None:
    nodes = simulated()
    nodes[0].weird_labels = True
    store = Store(60)
    fill(store, nodes)
    node = nodes[0]
    first = node.allocations[0]
    namespace, pod = first.namespace + WEIRD_SUFFIX, first.pod + WEIRD_SUFFIX
    allocations = [
        a for a in node.allocations if (a.namespace, a.pod) == (first.namespace, first.pod)
    ]
    async with serving(store) as (client, _):
        body = await get(
            client, f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(pod, safe='')}"
        )
        PodDetail.model_validate(body)
        assert body["namespace"] == namespace
        assert body["pod"] == pod
        assert body["nodes"] == [node.name]
        assert body["memory_used_bytes"] == sum(a.used for a in allocations)
        assert body["memory_limit_bytes"] == sum(a.limit for a in allocations)
        assert len(body["containers"]) == len(allocations)
        plain = nodes[1].allocations[0]
        body = await get(client, f"/api/v1/namespaces/{plain.namespace}/pods/{plain.pod}")
        for row in body["containers"]:
            (a,) = [x for x in nodes[1].allocations if identity(x) == identity_of(row)]
            expect_container(row, a, nodes[1])


# --------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "status", "error", "named"),
    [
        ("/api/v1/nodes/nowhere", 404, "not_found", "nowhere"),
        ("/api/v1/namespaces/team-a/pods/nobody", 404, "not_found", "team-a/nobody"),
        ("/api/v1/nodes?sort=colour", 400, "bad_request", "'sort'"),
        ("/api/v1/pods?sort=-colour", 400, "bad_request", "'sort'"),
        ("/api/v1/nodes?limit=0", 400, "bad_request", "'limit'"),
        ("/api/v1/pods?limit=-3", 400, "bad_request", "'limit'"),
        ("/api/v1/pods?limit=ten", 400, "bad_request", "'limit'"),
        ("/api/v1/pods?limit=1&limit=2", 400, "bad_request", "'limit'"),
        ("/api/v1/pods?namespaces=x", 400, "bad_request", "'namespaces'"),
        ("/api/v1/nodes?node=x", 400, "bad_request", "'node'"),
    ],
)
async def test_errors_share_one_envelope(path: str, status: int, error: str, named: str) -> None:
    store = Store(60)
    fill(store, simulated(1))
    async with serving(store) as (client, _):
        body = await get(client, path, status)
    assert set(body) == {"status", "error", "message"}
    assert body["status"] == "error"
    assert body["error"] == error
    assert named in body["message"]


async def test_a_bad_sort_lists_the_allowed_fields() -> None:
    async with serving(Store(60)) as (client, _):
        message = (await get(client, "/api/v1/pods?sort=size", 400))["message"]
        assert all(field in message for field in CONTAINER_SORT_FIELDS)
        message = (await get(client, "/api/v1/nodes?sort=size", 400))["message"]
        assert all(field in message for field in NODE_SORT_FIELDS)
        assert (await get(client, "/api/v1/nodes"))["nodes"] == []


# --------------------------------------------------------------------------
# Freshness, caching, consistency
# --------------------------------------------------------------------------


async def test_health_turns_stale_past_two_intervals() -> None:
    nodes = simulated(2)
    store = Store(600)
    fill(store, nodes[:1], at=time.monotonic() - 25)
    fill(store, nodes[1:], at=time.monotonic() - 35)
    async with serving(store, interval=15.0) as (client, _):
        body = await get(client, "/api/v1/nodes?sort=data_age_seconds")
        detail = await get(client, f"/api/v1/nodes/{nodes[1].name}")
    fresh, old = body["nodes"]
    assert (fresh["name"], fresh["health"]) == (nodes[0].name, "ok")
    assert (old["name"], old["health"]) == (nodes[1].name, "stale")
    assert 25 <= fresh["data_age_seconds"] < 30
    assert 35 <= old["data_age_seconds"] < 40
    assert detail["node"]["health"] == "stale"


async def test_answers_follow_the_store_through_changes_and_churn() -> None:
    nodes = simulated(2)
    store = Store(60)
    fill(store, nodes)
    node = nodes[0]
    async with serving(store) as (client, api):
        first = await get(client, "/api/v1/nodes")
        # New readings, same series: the cached shape is reused, the values are new.
        later = NOW + 3600 * 5 + 17
        node.step(later)
        store.put(
            source(node), Normaliser(node.name).normalise(node.exposition(later)), time.monotonic()
        )
        second = await get(client, "/api/v1/nodes")
        assert second["generation"] > first["generation"]
        summary = next(s for s in second["nodes"] if s["name"] == node.name)
        assert summary["memory_used_bytes"] == sum(c.memory_used for c in node.cards)
        assert [u["utilization_percent"] for u in summary["utilization"]] == [
            c.utilization for c in node.cards
        ]
        rows = (await get(client, f"/api/v1/pods?node={node.name}"))["containers"]
        assert {identity_of(r) for r in rows} == {identity(a) for a in containers_of(node)}, (
            "pods churned in five simulated hours: the new ones show, the ended ones do not"
        )
        # A node whose source is gone vanishes, and the caches forget it.
        store.remove(source(nodes[1]).id)
        assert [s["name"] for s in (await get(client, "/api/v1/nodes"))["nodes"]] == [node.name]
        await get(client, f"/api/v1/nodes/{nodes[1].name}", 404)
        assert api.refresh(store, 0.0), "everything current"


async def test_refresh_rebuilds_within_its_budget() -> None:
    nodes = simulated(3)
    store = Store(60)
    fill(store, nodes)
    async with serving(store) as (client, api):
        assert not api.refresh(store, 0.0), "one node at most with no budget"
        assert api.refresh(store, 10.0)
        assert api.refresh(store, 0.0)
        fill(store, nodes[:1])
        assert not api.refresh(store, 0.0), "a changed node"
        assert api.refresh(store, 10.0)
        assert (await get(client, "/api/v1/nodes"))["total"] == 3


async def test_an_answer_is_one_generation_while_the_store_changes() -> None:
    """A writer puts every node's round ``r`` at once; no answer may show two rounds."""
    store = Store(60)
    names = [f"n{i}" for i in range(20)]
    stop = asyncio.Event()

    def put_round(r: int) -> None:
        for name in names:
            body = (
                f'hami_host_gpu_memory_used_bytes{{device_index="0",device_uuid="G-{name}"}} {r}\n'
                f'hami_vgpu_memory_used_bytes{{container="c",device_uuid="G-{name}",namespace="n",pod="p-{name}",vdevice_index="0"}} {r}\n'
            ).encode()
            store.put(source(name, "hami"), Normaliser(name).normalise(body), time.monotonic())

    async def writer() -> None:
        r = 0
        while not stop.is_set():
            r += 1
            put_round(r)
            await asyncio.sleep(0)  # a writer yielding between rounds, so readers run among them

    put_round(0)
    async with serving(store) as (client, _):
        task = asyncio.create_task(writer())
        seen = set()
        try:
            for _ in range(30):
                nodes = await get(client, "/api/v1/nodes")
                rounds = {s["memory_used_bytes"] for s in nodes["nodes"]}
                assert len(rounds) == 1, rounds
                pods = await get(client, "/api/v1/pods")
                assert len({r["memory_used_bytes"] for r in pods["containers"]}) == 1
                seen |= rounds
        finally:
            stop.set()
            await task
    assert len(seen) > 1, "the writer ran between answers"


# --------------------------------------------------------------------------
# OpenAPI
# --------------------------------------------------------------------------


def refs(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for k, v in value.items():
            if k == "$ref":
                yield v
            else:
                yield from refs(v)
    elif isinstance(value, list):
        for v in value:
            yield from refs(v)


async def test_openapi_describes_every_route_parameter_and_error() -> None:
    async with serving(Store(60)) as (client, _):
        resp = await client.get("/api/v1/openapi.json")
        assert resp.status == 200
        doc = json.loads(await resp.read())
        routes = {
            r.resource.canonical
            for r in client.app.router.routes()
            if r.method == "GET" and r.resource is not None
        }
    assert doc["openapi"] == "3.1.0"
    assert doc["info"]["title"]
    assert doc["info"]["version"]
    assert set(doc["paths"]) == routes
    for path, item in doc["paths"].items():
        operation = item["get"]
        assert operation["operationId"]
        assert operation["summary"]
        params = operation.get("parameters", [])
        in_path = {p["name"] for p in params if p["in"] == "path"}
        assert in_path == set(re.findall(r"{(\w+)}", path)), path
        assert all(p["required"] for p in params if p["in"] == "path")
        assert all("schema" in p and p["description"] for p in params)
        responses = operation["responses"]
        assert "200" in responses
        if in_path:
            assert "404" in responses, path
        if any(p["in"] == "query" for p in params):
            assert "400" in responses, path
        for sort in (p for p in params if p["name"] == "sort"):
            assert "-name" in sort["schema"]["enum"] or "-node" in sort["schema"]["enum"]
    for ref in refs(doc):
        assert ref.startswith("#/"), ref
        target: Any = doc
        for part in ref[2:].split("/"):
            target = target[part]
    schemas = doc["components"]["schemas"]
    assert {
        "NodeList",
        "NodeDetail",
        "ContainerList",
        "PodDetail",
        "ShardInfo",
        "UsageReport",
        "Error",
    } <= set(schemas)
    error = schemas["Error"]
    assert set(error["required"]) == {"status", "error", "message"}
    assert {"not_found", "bad_request", "method_not_allowed"} <= set(
        error["properties"]["error"]["enum"]
    ), "every code an answer may carry, the shared error middleware's included"


async def test_answers_have_exactly_the_documented_fields() -> None:
    store = Store(60)
    fill(store, simulated(1))
    async with serving(store) as (client, _):
        doc = await get(client, "/api/v1/openapi.json")
        schemas = doc["components"]["schemas"]
        nodes = await get(client, "/api/v1/nodes")
        node = await get(client, f"/api/v1/nodes/{nodes['nodes'][0]['name']}")
        pods = await get(client, "/api/v1/pods")
        row = pods["containers"][0]
        pod = await get(client, f"/api/v1/namespaces/{row['namespace']}/pods/{row['pod']}")
    for body, name in (
        (nodes, "NodeList"),
        (nodes["nodes"][0], "NodeSummary"),
        (node, "NodeDetail"),
        (node["cards"][0], "CardUsage"),
        (pods, "ContainerList"),
        (row, "ContainerRow"),
        (pod, "PodDetail"),
    ):
        assert set(body) == set(schemas[name]["properties"]) == set(schemas[name]["required"]), name


# --------------------------------------------------------------------------
# End to end: the real collector scraping simulated monitors over HTTP
# --------------------------------------------------------------------------


async def test_the_collector_serves_what_its_monitors_say(tmp_path: Path) -> None:
    nodes = simulated(4, seed=11)
    targets = tmp_path / "targets.json"
    async with MonitorFarm(nodes, clock=lambda: NOW) as farm:
        write_targets(targets, farm)
        settings = CollectorSettings(
            listen="127.0.0.1:0",
            kubernetes=False,
            targets_file=targets,
            interval=0.5,
            timeout=0.4,
        )
        app = build_app(settings)
        api = RestApi(STORE, settings.interval)
        app.router.add_routes(api.routes())
        app.cleanup_ctx.append(api.warming)
        runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        base = f"http://127.0.0.1:{runner.addresses[0][1]}/api/v1"
        try:
            async with aiohttp.ClientSession() as http:

                async def all_nodes() -> bool:
                    async with http.get(f"{base}/nodes") as resp:
                        total: int = (await resp.json())["total"]
                        return total == len(nodes)

                await eventually(all_nodes, 10, "every node in /api/v1/nodes")
                for node in nodes:
                    async with http.get(f"{base}/pods?node={node.name}") as resp:
                        rows = (await resp.json())["containers"]
                    got = by_identity(rows)
                    assert set(got) == {identity(a) for a in containers_of(node)}
                    for a in containers_of(node):
                        expect_container(got[identity(a)], a, node)
                    async with http.get(f"{base}/nodes/{node.name}") as resp:
                        summary = (await resp.json())["node"]
                    assert summary["memory_used_bytes"] == sum(c.memory_used for c in node.cards)
                    assert summary["health"] == "ok"
                    assert summary["sources"][0]["kind"] == collector_flavour(node.flavour)
        finally:
            await runner.cleanup()
