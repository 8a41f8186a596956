"""Every card's capacity from its Node record: the node watch, the series, and who wins.

Three levels: :class:`KubernetesNodes` against the fake API server (list, watch, 410);
:class:`CapacitySource` over a store that also holds what the simulated monitors serve,
normalised as a scrape normalises it (a Volcano monitor's cards lack ``device_type``, a
KAI node has GPU Feature Discovery's labels only); and the whole collector, where an
agent's NVML total outranks the registered one, and the Nodes come from Kubernetes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Collection, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from helpers import eventually, running_collector, running_demo

from agent.app import Sampler
from agent.nvml import NvmlSampler
from collector.exposition.parse import Labels, parse
from collector.normalise import labelsets, schema
from collector.normalise.batch import Source
from collector.normalise.bodies import Normaliser
from collector.normalise.labelsets import key_labels
from collector.normalise.registration import Capacity, capacity
from collector.normalise.schema import SourceKind
from collector.sources.capacity_series import CapacityConfig, CapacitySource
from collector.sources.kubernetes import Timeouts
from collector.sources.nodes import KubernetesNodes, NodeDirectory, StaticNodes
from collector.store.latest import Store
from simulator.agents import SimulatedDirectory, fake_nvml, write_regions
from simulator.cluster import build_cluster
from simulator.node import SimulatedNode
from simulator.node_objects import node_object
from testing.fakekube import JSON, FakeKube, make_node

MIB = 1 << 20
CARD_FAMILIES = {
    schema.MEMORY_REGISTERED,
    schema.SPLIT_COUNT,
    schema.HEALTHY,
    schema.MEMORY_TOTAL,
    schema.MEMORY_OVERSUBSCRIPTION,
}
JSON_RECORD = (
    '[{"id":"GPU-356be20e-9e5c-4e2c-9304-05768d8d4741","count":10,"devmem":81559,'
    '"devcore":100,"type":"NVIDIA H100 80GB HBM3","mode":"hami-core","health":true}]'
)


class Changing:
    """A node directory whose nodes a test replaces."""

    def __init__(self, *objects: JSON) -> None:
        self.set(*objects)

    def set(self, *objects: JSON) -> None:
        self.nodes = StaticNodes.of(objects).nodes

    def capacities(self) -> Collection[Capacity]:
        return self.nodes


def simulated(flavour: str, seed: int = 31) -> SimulatedNode:
    (node,) = build_cluster(1, seed=seed, cards=4, allocations_per_node=6, flavours=(flavour,))
    return node


def source_of(
    nodes: NodeDirectory, store: Store, errors: list[str] | None = None
) -> CapacitySource:
    sink = errors if errors is not None else []
    return CapacitySource(nodes, store, CapacityConfig(15.0, 9), sink.append)


def scraped(store: Store, node: SimulatedNode) -> None:
    """The node's monitor body, normalised and stored as a scrape of it would be."""
    batch = Normaliser(node.name).normalise(node.exposition(time.time()))
    kind = SourceKind.VOLCANO if node.flavour == "volcano" else SourceKind.HAMI
    source = Source(f"pod/{node.name}", "monitor", node.name, kind, 1)
    store.put(source, batch, time.monotonic())


def by_family(series: Mapping[bytes, float]) -> dict[str, dict[Labels, float]]:
    out: dict[str, dict[Labels, float]] = {}
    for key, value in series.items():
        name, labels = key_labels(key)
        out.setdefault(name, {})[tuple(sorted(labels))] = value
    return out


def uuids(series: Mapping[Labels, float]) -> dict[str, Labels]:
    return {dict(labels)["device_uuid"]: labels for labels in series}


# -- the series a node with a record gets ----------------------------------------------------


def test_a_node_without_an_agent_gets_every_card_from_its_record() -> None:
    node = simulated("hami")
    store = Store(60)
    source_of(StaticNodes.of([node_object(node)]), store).refresh()
    view = store.view(node.name)
    assert view is not None
    expected: dict[bytes, float] = {labelsets.key(schema.NODE_GPU_COUNT, ()): 4.0}
    for card in node.cards:
        labels = labelsets.card(card.index, card.name, card.uuid)  # as the agent labels it
        memory = float(card.memory_total // MIB * MIB)
        expected |= {
            labelsets.key(schema.MEMORY_REGISTERED, labels): memory,
            labelsets.key(schema.MEMORY_TOTAL, labels): memory,  # the stand-in: no NVML here
            labelsets.key(schema.SPLIT_COUNT, labels): 10.0,
            labelsets.key(schema.HEALTHY, labels): 1.0,
            labelsets.key(
                schema.REGISTRATION_INFO, labelsets.registered_card(labels, "hami-core", card.name)
            ): 1.0,
        }
    assert dict(view.series) == expected
    (held,) = view.sources
    assert held.source.kind is SourceKind.REGISTRATION
    assert set(held.batch.families) == set(schema.CAPACITY_FAMILIES)


@pytest.mark.parametrize("flavour", ["hami", "hami-legacy", "volcano"])
def test_cards_join_their_monitor_series_one_to_one(flavour: str) -> None:
    """Whatever labels a monitor gives a card (Volcano's lack ``device_type``), the card's
    capacity has exactly those, and the monitor's cards are all registered."""
    node = simulated(flavour)
    store = Store(60)
    scraped(store, node)
    source_of(StaticNodes.of([node_object(node)]), store).refresh()
    view = store.view(node.name)
    assert view is not None
    families = by_family(view.series)
    used = uuids(families[schema.MEMORY_USED])
    assert len(used) == len(node.cards)
    for family in (schema.MEMORY_REGISTERED, schema.SPLIT_COUNT, schema.HEALTHY):
        assert uuids(families[family]) == used, family
    assert uuids(families[schema.MEMORY_TOTAL]) == used  # no monitor sends a total
    if flavour == "volcano":
        assert all("device_type" not in dict(labels) for labels in used.values())
        info = families[schema.REGISTRATION_INFO]
        assert {dict(labels)["model"] for labels in info} == {node.cards[0].name}


def test_kai_cards_get_gpu_feature_discovery_memory() -> None:
    node = simulated("kai")
    store = Store(60)
    scraped(store, node)
    source_of(StaticNodes.of([node_object(node)]), store).refresh()
    view = store.view(node.name)
    assert view is not None
    families = by_family(view.series)
    totals = families[schema.MEMORY_TOTAL]
    assert uuids(totals) == uuids(families[schema.MEMORY_USED])
    assert set(totals.values()) == {float(node.cards[0].memory_total // MIB * MIB)}
    assert families[schema.NODE_GPU_COUNT] == {(): 4.0}
    assert schema.HEALTHY not in families  # GPU Feature Discovery knows no health


def test_a_kai_node_without_labels_has_unknown_capacity() -> None:
    node = simulated("kai")
    bare = node_object(node)
    bare["metadata"]["labels"] = {}
    assert capacity(bare) is None
    store = Store(60)
    scraped(store, node)
    source_of(StaticNodes.of([bare]), store).refresh()
    view = store.view(node.name)
    assert view is not None
    assert schema.MEMORY_TOTAL not in by_family(view.series)  # unknown, never 0
    assert [h.source.kind for h in view.sources] == [SourceKind.HAMI]


def test_an_unusable_node_registers_its_cards_unhealthy() -> None:
    gone = make_node("gpu-x", {"hami.io/node-nvidia-register": JSON_RECORD})  # no nvidia.com/gpu
    store = Store(60)
    source_of(StaticNodes.of([gone]), store).refresh()
    view = store.view("gpu-x")
    assert view is not None
    assert list(by_family(view.series)[schema.HEALTHY].values()) == [0.0]


def test_a_node_whose_record_goes_takes_its_series() -> None:
    node = simulated("volcano")
    store = Store(60)
    nodes = Changing(node_object(node))
    source = source_of(nodes, store)
    source.refresh()
    assert store.nodes() == [node.name]
    nodes.set()
    source.refresh()
    assert store.nodes() == []


def test_only_this_shard_s_nodes() -> None:
    a, b = build_cluster(2, seed=5, cards=1, allocations_per_node=1, flavours=("hami",))
    store = Store(60)
    nodes = StaticNodes.of([node_object(a), node_object(b)])
    CapacitySource(
        nodes, store, CapacityConfig(15, 9), print, holds=lambda n: n == b.name
    ).refresh()
    assert store.nodes() == [b.name]


# -- a malformed record is one node's problem -------------------------------------------------


def test_a_malformed_record_is_counted_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    good, bad = build_cluster(2, seed=8, cards=2, allocations_per_node=2, flavours=("hami",))
    broken = node_object(bad)
    note = "hami.io/node-nvidia-register"
    broken["metadata"]["annotations"][note] = '[{"id":"GPU-a","count":"ten"},{"id":'
    store, errors = Store(60), list[str]()
    nodes = Changing(node_object(good), broken)
    source = source_of(nodes, store, errors)
    with caplog.at_level(logging.WARNING, logger="collector.sources.capacity_series"):
        for _ in range(3):  # the watch reads a node again at every status update
            source.refresh()
    assert errors == ["json"]
    (record,) = caplog.records
    assert bad.name in record.getMessage()
    assert "not JSON" in record.getMessage()
    assert store.nodes() == [good.name]  # nothing to say of the broken node; the other is whole
    view = store.view(good.name)
    assert view is not None
    assert len(by_family(view.series)[schema.MEMORY_REGISTERED]) == 2
    # one bad card of several: the rest registered, the bad one counted once
    partly = node_object(bad)
    text = partly["metadata"]["annotations"][note]
    partly["metadata"]["annotations"][note] = text[:-1] + ',{"id":"GPU-z","devmem":1.5}]'
    nodes.set(node_object(good), partly)
    source.refresh()
    source.refresh()
    assert errors == ["json", "value"]
    partial = store.view(bad.name)
    assert partial is not None
    assert len(by_family(partial.series)[schema.MEMORY_REGISTERED]) == 2


# -- the collector: an agent's NVML total wins -------------------------------------------------


async def metrics_of(
    http: aiohttp.ClientSession, base: str, node: str
) -> dict[str, dict[Labels, float]]:
    async with http.get(f"{base}/metrics") as resp:
        assert resp.status == 200
        samples = parse(await resp.read()).samples
    out: dict[str, dict[Labels, float]] = {}
    for s in samples:
        labels = dict(s.labels)
        if labels.pop("node", None) == node:
            out.setdefault(s.name, {})[tuple(sorted(labels.items()))] = s.value
    return out


async def test_an_agent_s_nvml_total_wins_and_oversubscription_says_so(tmp_path: Path) -> None:
    node = simulated("hami", seed=33)
    node.memory_scaling = 1.5
    node.step(time.time())
    async with (
        running_collector(
            pods=SimulatedDirectory([node]),
            registrations=StaticNodes.of([node_object(node)]),
            kubernetes=False,
            allocations=False,
            push_auth="none",
            interval=0.2,
            timeout=0.2,
            stale_after=60,  # one push: it must not go stale while the test reads
        ) as (base, _),
        aiohttp.ClientSession() as http,
    ):

        async def registered() -> bool:
            return schema.MEMORY_REGISTERED in await metrics_of(http, base, node.name)

        await eventually(registered, 10, "the registered cards on /metrics")
        before = await metrics_of(http, base, node.name)
        scaled = {int(c.memory_total // MIB * 1.5) * MIB for c in node.cards}
        assert set(before[schema.MEMORY_TOTAL].values()) == set(map(float, scaled))
        assert schema.MEMORY_OVERSUBSCRIPTION not in before  # no physical total known

        write_regions(tmp_path, node)
        nvml = NvmlSampler(fake_nvml(node))
        assert nvml.start()
        payload = Sampler(node.name, [str(tmp_path)], None, nvml).snapshot()
        async with http.post(f"{base}/api/v1/push", data=payload.model_dump_json()) as resp:
            assert resp.status == 204

        async def physical() -> bool:
            return schema.MEMORY_OVERSUBSCRIPTION in await metrics_of(http, base, node.name)

        await eventually(physical, 10, "the oversubscription once NVML's total is known")
        after = await metrics_of(http, base, node.name)
    totals = after[schema.MEMORY_TOTAL]
    assert sorted(totals.values()) == sorted(float(c.memory_total) for c in node.cards)
    cards = set(after[schema.MEMORY_USED])  # the agent's labels
    assert set(totals) == cards
    for family in (schema.MEMORY_REGISTERED, schema.SPLIT_COUNT, schema.HEALTHY):
        assert set(after[family]) == cards, family
    ratios = after[schema.MEMORY_OVERSUBSCRIPTION]
    assert set(ratios) == cards
    assert all(1.49 < ratio <= 1.5 for ratio in ratios.values())


# -- the watch of Nodes, against the fake API server ------------------------------------------


def gpu_node(name: str, gpus: str = "40", **notes: str) -> JSON:
    annotations = {"hami.io/node-nvidia-register": JSON_RECORD} | notes
    return make_node(name, annotations, allocatable={"nvidia.com/gpu": gpus})


@contextlib.asynccontextmanager
async def watching(v1: Any, fake: FakeKube) -> AsyncIterator[KubernetesNodes]:
    nodes = KubernetesNodes(v1, Timeouts(request=5, watch=30, stall=5), backoff=(0.05, 0.2))
    task = asyncio.create_task(nodes.run(), name="node watch under test")
    try:
        yield nodes
        if task.done():
            raise AssertionError(f"the watch stopped by itself: {task.exception()!r}")
    finally:
        task.cancel()
        await asyncio.wait({task}, timeout=5)
    await fake.wait_for_watches(0)


async def settles(nodes: KubernetesNodes, expected: Mapping[str, bool], what: str) -> None:
    """Wait until the watched nodes with a record are ``expected`` (name -> usable)."""

    async def now() -> bool:
        return {c.node: bool(c.usable) for c in nodes.capacities()} == expected

    await eventually(now, 5, what)


async def test_node_watch_lists_then_follows_adds_changes_and_deletes(
    fake: FakeKube, v1: Any
) -> None:
    fake.add_node(gpu_node("gpu-a"))
    fake.add_node(make_node("cpu-1"))  # no GPU record: not kept
    async with watching(v1, fake) as nodes:
        await settles(nodes, {"gpu-a": True}, "the list")
        assert nodes.synced
        assert nodes.status().objects == 1
        await fake.wait_for_watches(1)
        b = fake.add_node(gpu_node("gpu-b"))
        await settles(nodes, {"gpu-a": True, "gpu-b": True}, "ADDED")
        fake.modify_node(gpu_node("gpu-b", gpus="0") | {"metadata": b["metadata"]})
        await settles(nodes, {"gpu-a": True, "gpu-b": False}, "MODIFIED: the plugin is gone")
        fake.delete_node("gpu-a")
        await settles(nodes, {"gpu-b": False}, "DELETED")
    listed = [q for path, q in fake.requests if path == "/api/v1/nodes" and "watch" not in q]
    assert len(listed) == 1, "everything after the first list came through the watch"


@pytest.mark.parametrize("as_http_status", [False, True], ids=["error-event", "http-status"])
async def test_node_watch_relists_on_410(fake: FakeKube, v1: Any, as_http_status: bool) -> None:
    fake.gone_as_http_status = as_http_status
    fake.add_node(gpu_node("gpu-a"))
    fake.add_node(gpu_node("gpu-b"))
    async with watching(v1, fake) as nodes:
        await settles(nodes, {"gpu-a": True, "gpu-b": True}, "the list")
        await fake.wait_for_watches(1)
        fake.set_down(True)  # the watch is cut, and misses what follows
        fake.delete_node("gpu-b")
        fake.add_node(gpu_node("gpu-c", gpus="0"))
        fake.compact()  # resuming from the version the watch holds is 410 Gone
        await fake.wait_for_watches(0)
        fake.set_down(False)
        await settles(nodes, {"gpu-a": True, "gpu-c": False}, "relisted")
        await fake.wait_for_watches(1)
        fake.expire_watches()  # and an ERROR 410 mid-stream
        fake.add_node(gpu_node("gpu-d"))
        await settles(nodes, {"gpu-a": True, "gpu-c": False, "gpu-d": True}, "after 410 again")


async def test_the_collector_reads_the_cluster_s_nodes(fake: FakeKube, kubeconfig: Path) -> None:
    node = simulated("volcano")
    fake.add_node(node_object(node))
    async with (
        running_collector(kubernetes=True, kubeconfig=kubeconfig, interval=0.2, timeout=0.2) as (
            base,
            _,
        ),
        aiohttp.ClientSession() as http,
    ):

        async def registered() -> bool:
            found = await metrics_of(http, base, node.name)
            return len(found.get(schema.MEMORY_REGISTERED, {})) == len(node.cards)

        await eventually(registered, 10, "the Node's cards on /metrics")
        found = await metrics_of(http, base, node.name)
        assert found[schema.NODE_GPU_COUNT] == {(): 4.0}
        assert set(found[schema.HEALTHY].values()) == {1.0}
    nodes_listed = [path for path, _ in fake.requests if path == "/api/v1/nodes"]
    assert nodes_listed, "the collector watched the Nodes"


# -- the demo: every card's total is known ---------------------------------------------------


async def test_the_demo_knows_every_card_s_memory_total(tmp_path: Path) -> None:
    """Four monitored nodes (HAMi v2.10, legacy HAMi, Volcano, KAI), one with an agent, the
    HAMi-DRA and device-plugin nodes with agents: every node's total covers all its cards."""
    async with running_demo(tmp_path, 4, 1.0) as (served, _), aiohttp.ClientSession() as http:

        async def every_total() -> bool:
            async with http.get(f"{served}/api/v1/nodes") as resp:
                nodes = (await resp.json())["nodes"]
            return len(nodes) == 7 and all(n["memory_total_bytes"] for n in nodes)

        await eventually(every_total, 60, "a memory total on every node of the demo")
        oversubscribed = await metrics_of(http, served, "gpu-node-001")
    ratios = oversubscribed[schema.MEMORY_OVERSUBSCRIPTION]
    assert len(ratios) == 8
    assert all(1.49 < ratio <= 1.5 for ratio in ratios.values())
