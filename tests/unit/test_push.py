"""Pushed readings become exactly the series a HAMi v2.10 monitor would export."""

from __future__ import annotations

import asyncio
import gzip
import json
import math
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from helpers import eventually, holds, running_collector, scraping_collector

from agent.app import Sampler
from agent.nvml import NvmlSampler
from collector.app import PUSH, STORE
from collector.exposition.parse import parse, parse_series
from collector.normalise.schema import (
    AGENT_CHECK_FAMILIES,
    NVML_VIEW_FAMILIES,
    VGPU_FAMILIES,
    SourceKind,
)
from collector.sources.pods import PodRef, StaticDirectory
from collector.sources.push import SeriesKeys, to_batch
from core.payload import Card, Device, Payload, Region
from simulator.agents import SimulatedDirectory, fake_nvml, write_regions
from simulator.cluster import build_cluster
from simulator.monitors import MonitorFarm
from simulator.node import SimulatedNode
from testing.oracle import SeriesKey, expected_canonical

NOT_FROM_AGENTS = {"hami_build_info", "hami_mig_device_info"}
AGENT_EXTRAS = {
    "hami_host_gpu_memory_total_bytes",
    "hami_host_gpu_temperature_celsius",
    "hami_host_gpu_power_usage_watts",
    *NVML_VIEW_FAMILIES,
    *AGENT_CHECK_FAMILIES,
}


def snapshot(node: SimulatedNode, root: Path, dra: bool = False) -> Payload:
    write_regions(root, node, dra=dra)
    nvml = NvmlSampler(fake_nvml(node))
    assert nvml.start()
    return Sampler(node.name, [str(root)], None, nvml).snapshot()


def canonical(series: Mapping[bytes, float], node: str) -> dict[SeriesKey, float]:
    out = {}
    for key, value in series.items():
        name, labels = parse_series(key)
        if name not in AGENT_EXTRAS:
            out[(name, frozenset((*labels, ("node", node))))] = value
    return out


def expected(node: SimulatedNode, now: float) -> dict[SeriesKey, float]:
    return {k: v for k, v in expected_canonical(node, now).items() if k[0] not in NOT_FROM_AGENTS}


@pytest.mark.parametrize("dra", [False, True])
def test_agent_readings_give_the_monitors_series(tmp_path: Path, dra: bool) -> None:
    (node,) = build_cluster(1, seed=21, flavours=("hami",))
    node.step(time.time())
    payload = snapshot(node, tmp_path, dra)
    directory = SimulatedDirectory([node], dra=[node.name] if dra else [])
    batch, unowned = to_batch(payload, directory)
    assert unowned == 0
    assert canonical(batch.series, node.name) == expected(node, payload.time)
    assert len(batch.series) > 200


def test_regions_without_a_live_pod_are_dropped(tmp_path: Path) -> None:
    (node,) = build_cluster(1, seed=22, flavours=("hami",))
    payload = snapshot(node, tmp_path)
    gone = node.allocations[0].pod_uid
    full = SimulatedDirectory([node])
    pods = {
        uid: ref
        for uid in {a.pod_uid for a in node.allocations}
        if uid != gone and (ref := full.pod(uid))
    }
    batch, unowned = to_batch(payload, StaticDirectory(pods, {}))
    assert unowned == len({a.container for a in node.allocations if a.pod_uid == gone})
    assert not any(
        b'pod="' + node.allocations[0].pod.encode() + b'"' in key for key in batch.series
    )
    elsewhere = StaticDirectory(
        {
            uid: type(ref)(ref.uid, ref.namespace, ref.name, "other-node")
            for uid, ref in pods.items()
        },
        {},
    )
    assert to_batch(payload, elsewhere)[1] == len(payload.regions), (
        "a pod on another node is not this node's"
    )


def test_a_push_batch_counts_as_a_scrape_does() -> None:
    """``samples`` is what the source offered, ``dropped`` what was left out: the same for both."""
    owned_pod = PodRef("uid-a", "team-a", "pod-a", "n1", {})
    device = Device(index=0, uuid="GPU-a", memory_used=5, memory_limit=10)
    payload = Payload(
        node="n1",
        agent="x",
        sequence=1,
        time=1000.0,
        nvml=True,
        cards=[Card(index=0, uuid="GPU-a", name="A100", memory_used=7, utilization=3.0)],
        regions=[
            Region(
                pod_uid="uid-a",
                container="main",
                devices=[device, device.model_copy(update={"index": 1})],
            ),
            Region(pod_uid="uid-gone", container="main", devices=[device]),
        ],
    )
    batch, unowned = to_batch(payload, StaticDirectory({"uid-a": owned_pod}, {}))
    vgpu_series = 2 * (len(VGPU_FAMILIES) - 1)  # no kernel ran: no elapsed-seconds series
    assert unowned == 1
    assert len(batch.series) == 2 + vgpu_series
    assert batch.dropped == len(VGPU_FAMILIES)
    assert batch.samples == len(batch.series) + batch.dropped
    assert batch.duplicates == 0
    assert all(key.endswith(b',zone="vGPU"}') for key in batch.series)


def test_a_node_s_next_push_takes_its_new_values_and_repeated_vgpus_count_once() -> None:
    """Keys are kept from push to push, values never; a vGPU two regions name is one series."""
    pod = PodRef("uid-a", "team-a", "pod-a", "n1", {})
    pods = StaticDirectory({"uid-a": pod}, {})
    keys = SeriesKeys()

    def push(used: int, regions: int) -> dict[bytes, float]:
        device = Device(index=0, uuid="GPU-a", memory_used=used, memory_limit=10)
        region = Region(pod_uid="uid-a", container="main", devices=[device], last_kernel_time=990)
        payload = Payload(
            node="n1", agent="x", sequence=used, time=1000.0, nvml=True, regions=[region] * regions
        )
        batch, _ = to_batch(payload, pods, keys)
        assert batch.duplicates == (regions - 1) * len(VGPU_FAMILIES)
        assert len(batch.series) == len(VGPU_FAMILIES)
        return dict(batch.series.items())

    used = (
        b'hami_vgpu_memory_used_bytes{container="main",device_uuid="GPU-a",namespace="team-a",'
        b'pod="pod-a",vdevice_index="0",zone="vGPU"}'
    )
    assert [push(n, 1)[used] for n in (5, 6, 7)] == [5.0, 6.0, 7.0]
    assert push(8, 2)[used] == 8.0
    assert push(9, 1)[used] == 9.0


Pushing = tuple[str, SimulatedNode, Path, web.Application]
"""The collector's URL, the node that pushes, a folder for its regions, the collector app."""


@pytest.fixture
async def collector(tmp_path: Path) -> AsyncIterator[Pushing]:
    (node,) = build_cluster(1, seed=23, flavours=("hami",))
    async with running_collector(
        pods=SimulatedDirectory([node]),
        kubernetes=False,
        allocations=False,  # only the pushed series: tests/unit/test_allocation.py covers the others
        push_auth="none",
        stale_after=1.0,
        push_max_inflight=1,
    ) as (base, app):
        yield base, node, tmp_path, app


async def series_of(http: aiohttp.ClientSession, base: str, node: str) -> dict[SeriesKey, float]:
    """The node's data series on /metrics, as the simulator's oracle keys them."""
    async with http.get(f"{base}/metrics") as resp:
        samples = parse(await resp.read()).samples
    return {
        (s.name, frozenset(s.labels)): s.value
        for s in samples
        if ("node", node) in s.labels and not s.name.startswith("hami_usage")
    }


def named(series: dict[SeriesKey, float], name: str) -> dict[SeriesKey, float]:
    return {k: v for k, v in series.items() if k[0] == name}


async def test_push_shows_on_metrics_then_goes_stale(
    collector: Pushing,
) -> None:
    base, node, root, _ = collector
    payload = snapshot(node, root)
    async with aiohttp.ClientSession() as http:
        body = gzip.compress(payload.model_dump_json().encode())
        async with http.post(
            f"{base}/api/v1/push", data=body, headers={"Content-Encoding": "gzip"}
        ) as resp:
            assert resp.status == 204
        got = await series_of(http, base, node.name)
        assert {k: v for k, v in got.items() if k[0] not in AGENT_EXTRAS} == expected(
            node, payload.time
        )

        async def gone() -> bool:
            return not await series_of(http, base, node.name)

        await eventually(gone, 5, "a silent agent's series to go stale")


async def test_repeated_and_older_sequences_are_ignored(
    collector: Pushing,
) -> None:
    base, node, root, _ = collector
    first = snapshot(node, root)
    newer = first.model_copy(update={"sequence": 5, "cards": first.cards[:1]})
    older = first.model_copy(update={"sequence": 4})
    async with aiohttp.ClientSession() as http:
        for payload in (newer, older, newer):
            async with http.post(f"{base}/api/v1/push", data=payload.model_dump_json()) as resp:
                assert resp.status == 204
        hosts = named(await series_of(http, base, node.name), "hami_host_gpu_utilization_ratio")
        assert len(hosts) == 1, (
            "the older snapshot (all cards) did not replace the newer (one card)"
        )
        restarted = older.model_copy(update={"agent": "new-instance", "sequence": 0})
        async with http.post(f"{base}/api/v1/push", data=restarted.model_dump_json()) as resp:
            assert resp.status == 204
        hosts = named(await series_of(http, base, node.name), "hami_host_gpu_utilization_ratio")
        assert len(hosts) == len(first.cards), "a restarted agent starts its sequence again"


async def test_bad_payloads_are_refused_with_details(
    collector: Pushing,
) -> None:
    base, node, root, _ = collector
    good = json.loads(snapshot(node, root).model_dump_json())
    good["regions"][0]["devices"][0]["memory_used"] = -1
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{base}/api/v1/push", json=good) as resp:
            assert resp.status == 400
            answer = await resp.json()
        assert answer["error"] == "invalid"
        assert [d["field"] for d in answer["details"]] == ["regions.0.devices.0.memory_used"]
        bomb = gzip.compress(b" " * (8 << 20))
        async with http.post(
            f"{base}/api/v1/push", data=bomb, headers={"Content-Encoding": "gzip"}
        ) as resp:
            assert resp.status == 413
        assert not await series_of(http, base, node.name), (
            "nothing from a refused payload is stored"
        )


async def test_overload_answers_429_with_retry_after(
    collector: Pushing,
) -> None:
    base, node, root, app = collector
    body = snapshot(node, root).model_dump_json().encode()
    release = asyncio.Event()

    async def slow() -> AsyncIterator[bytes]:
        yield body[:10]
        await release.wait()
        yield body[10:]

    async with aiohttp.ClientSession() as http:
        holder = asyncio.create_task(http.post(f"{base}/api/v1/push", data=slow()))
        # The receiver's own count: no request can tell a held slot from a free one harmlessly.
        await eventually(lambda: holds(app[PUSH]._inflight == 1), 5, "the slow push in its slot")
        async with http.post(f"{base}/api/v1/push", data=body) as resp:
            assert resp.status == 429
            assert resp.headers["Retry-After"] == "1"
        release.set()
        async with await holder as resp:
            assert resp.status == 204


async def test_an_agent_outranks_the_nodes_monitor(tmp_path: Path) -> None:
    (node,) = build_cluster(1, seed=24, flavours=("hami",))
    async with (
        MonitorFarm([node]) as farm,
        scraping_collector(
            farm,
            tmp_path,
            pods=SimulatedDirectory([node]),
            allocations=False,
            push_auth="none",
            interval=0.3,
            timeout=0.2,
        ) as (base, app),
        aiohttp.ClientSession() as http,
    ):
        await eventually(lambda: _has(http, base, node.name), 10, "scraped series")
        payload = snapshot(node, tmp_path / "agent")
        card = payload.cards[0].model_copy(update={"utilization": 99.0})
        pushed = payload.model_copy(update={"cards": [card, *payload.cards[1:]]})
        async with http.post(f"{base}/api/v1/push", data=pushed.model_dump_json()) as resp:
            assert resp.status == 204

        async def scraped_since() -> bool:
            """The monitor's batch came after the push: both compete for the series now."""
            view = app[STORE].view(node.name)
            received = {held.source.kind: held.received for held in view.sources} if view else {}
            return received.get(SourceKind.HAMI, 0.0) > received.get(SourceKind.AGENT, math.inf)

        await eventually(scraped_since, 10, "a scrape after the push")
        util = named(await series_of(http, base, node.name), "hami_host_gpu_utilization_ratio")
        first_card = [v for (_, labels), v in util.items() if ("device_index", "0") in labels]
        assert first_card == [99.0], (
            "the agent's reading wins over the monitor's for the same series"
        )


async def _has(http: aiohttp.ClientSession, base: str, node: str) -> bool:
    return bool(await series_of(http, base, node))
