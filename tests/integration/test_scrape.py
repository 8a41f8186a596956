"""Pulling real HTTP monitors: one broken target never harms another node's data."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest
from helpers import eventually, scraping_collector

from collector.exposition.parse import parse
from simulator.cluster import build_cluster
from simulator.monitors import MonitorFarm
from simulator.run import collector_flavour
from testing.oracle import expected_canonical

FAULTS = ("malformed", "html", "500", "timeout", "drip", "oversized", "gzip_bomb")


async def page(
    http: aiohttp.ClientSession, base: str
) -> dict[str, dict[tuple[str, frozenset[tuple[str, str]]], float]]:
    """The data series of /metrics by node, and our own metrics under the key ''."""
    async with http.get(f"{base}/metrics") as resp:
        assert resp.status == 200
        samples = parse(await resp.read()).samples
    by_node: dict[str, dict[tuple[str, frozenset[tuple[str, str]]], float]] = {"": {}}
    for s in samples:
        labels = dict(s.labels)
        node = "" if s.name.startswith("hami_usage_collector_") else labels["node"]
        by_node.setdefault(node, {})[(s.name, frozenset(labels.items()))] = s.value
    return by_node


def up(own: dict[tuple[str, frozenset[tuple[str, str]]], float], node: str) -> float | None:
    for (name, labels), value in own.items():
        if name == "hami_usage_collector_source_up" and ("node", node) in labels:
            return value
    return None


@asynccontextmanager
async def cluster(
    tmp_path: Path, nodes: int, **settings: object
) -> AsyncIterator[tuple[MonitorFarm, str, aiohttp.ClientSession]]:
    simulated = build_cluster(nodes, seed=5, flavours=("hami", "hami-legacy", "volcano", "kai"))
    async with (
        MonitorFarm(
            simulated, stall_s=5, drip_interval_s=0.2, drip_max_s=5, oversized_bytes=3 << 20
        ) as farm,
        scraping_collector(farm, tmp_path, **settings) as (base, _),
        aiohttp.ClientSession() as http,
    ):
        yield farm, base, http


async def test_each_fault_fails_only_its_own_target(tmp_path: Path) -> None:
    nodes = len(FAULTS) + 2
    async with cluster(
        tmp_path, nodes, interval=1.0, timeout=0.8, stale_after=60, body_limit=1 << 20
    ) as (farm, base, http):
        names = [name for name, _, _ in farm.targets()]
        healthy, weird, faulty = names[0], names[1], names[2:]
        farm.set_fault(weird, "weird_labels")
        for name, fault in zip(faulty, FAULTS, strict=True):
            farm.set_fault(name, fault)

        async def all_tried() -> bool:
            own = (await page(http, base))[""]
            return all(up(own, n) is not None for n in names)

        await eventually(all_tried, 15, "every target scraped once")
        await eventually(lambda: _ready(http, base), 15, "ready")
        result = await page(http, base)
        now = time.time()
        for name in (healthy, weird):
            node = farm.node(name)
            assert set(result[name]) == set(expected_canonical(node, now)), name
            assert up(result[""], name) == 1
        for name in faulty:
            assert name not in result, f"{farm.fault(name)} must not produce data"
            assert up(result[""], name) == 0
        reasons = {
            dict(labels)["reason"]
            for (n, labels), _ in result[""].items()
            if n == "hami_usage_collector_scrape_errors_total"
        }
        assert {"parse", "http", "timeout", "too_large"} <= reasons


async def _ready(http: aiohttp.ClientSession, base: str) -> bool:
    async with http.get(f"{base}/readyz") as resp:
        return resp.status == 200


async def test_a_failing_target_keeps_its_last_batch_until_stale(tmp_path: Path) -> None:
    async with cluster(tmp_path, 2, interval=0.3, timeout=0.25, stale_after=1.5) as (
        farm,
        base,
        http,
    ):
        failing, other = (name for name, _, _ in farm.targets())

        async def both_present() -> bool:
            data = await page(http, base)
            return failing in data and other in data

        await eventually(both_present, 10, "both nodes")
        farm.set_fault(failing, "500")
        started = time.monotonic()

        async def failed_once() -> bool:
            return up((await page(http, base))[""], failing) == 0

        await eventually(failed_once, 5, "a failed scrape")
        if time.monotonic() - started < 1.2:
            assert failing in await page(http, base), "data stays while it is not yet stale"

        async def gone() -> bool:
            return failing not in await page(http, base)

        await eventually(gone, 5, "stale data to vanish")
        assert other in await page(http, base)
        farm.set_fault(failing, None)
        await eventually(both_present, 5, "recovery")


async def test_targets_file_changes_and_bad_versions(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with cluster(tmp_path, 3, interval=0.3, timeout=0.25) as (farm, base, http):
        targets = tmp_path / "targets.json"
        names = [name for name, _, _ in farm.targets()]

        async def nodes_are(expected: set[str]) -> bool:
            return set(await page(http, base)) - {""} == expected

        await eventually(lambda: nodes_are(set(names)), 10, "all nodes")
        groups = json.loads(targets.read_text())
        targets.write_text(json.dumps(groups[:1]))
        await eventually(lambda: nodes_are({names[0]}), 10, "removed targets to vanish at once")
        targets.write_text("[{not json")
        targets.write_text(
            json.dumps([{"targets": ["127.0.0.1:1"], "labels": {"node": "x", "flavour": "nope"}}])
        )

        async def refused() -> bool:
            return any("flavour 'nope'" in r.getMessage() for r in caplog.records)

        await eventually(refused, 10, "the bad version read and refused")
        assert await nodes_are({names[0]}), "a bad file keeps the last good targets"
        targets.write_text(json.dumps(groups))
        await eventually(lambda: nodes_are(set(names)), 10, "targets back")
        assert collector_flavour("hami-legacy") == "hami"


@pytest.mark.parametrize("fault", ["gzip_bomb", "oversized"])
async def test_body_limit_applies_after_decompression(tmp_path: Path, fault: str) -> None:
    async with cluster(tmp_path, 1, interval=1.0, timeout=0.9, body_limit=1 << 20) as (
        farm,
        base,
        http,
    ):
        (name,) = (name for name, _, _ in farm.targets())
        farm.set_fault(name, fault)

        async def rejected() -> bool:
            own = (await page(http, base))[""]
            return any(
                n == "hami_usage_collector_scrape_errors_total"
                and ("reason", "too_large") in labels
                for (n, labels), _ in own.items()
            )

        await eventually(rejected, 10, f"{fault} rejected as too large")
