"""A real Prometheus scrapes the collector; promtool checks the page."""

from __future__ import annotations

import asyncio
import time
from asyncio.subprocess import PIPE, STDOUT
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from helpers import (
    eventually,
    prometheus_tool,
    real_prometheus,
    scraping_collector,
)

from simulator.cluster import build_cluster
from simulator.monitors import MonitorFarm
from testing.oracle import expected_canonical


@pytest.fixture
async def collector_url(tmp_path: Path) -> AsyncIterator[tuple[str, MonitorFarm]]:
    nodes = build_cluster(4, seed=11, flavours=("hami", "hami-legacy", "volcano", "kai"))
    async with (
        MonitorFarm(nodes) as farm,
        scraping_collector(farm, tmp_path, interval=0.5, timeout=0.4) as (base, _),
    ):
        yield base, farm


async def test_promtool_accepts_the_page(collector_url: tuple[str, MonitorFarm]) -> None:
    base, farm = collector_url
    async with aiohttp.ClientSession() as http:

        async def all_nodes() -> bool:
            async with http.get(f"{base}/metrics") as resp:
                text = await resp.text()
            return all(f'node="{name}"' in text for name, _, _ in farm.targets())

        await eventually(all_nodes, 10, "every node on the page")
        async with http.get(f"{base}/metrics") as resp:
            page = await resp.read()
    promtool = await asyncio.create_subprocess_exec(
        prometheus_tool("promtool"), "check", "metrics", stdin=PIPE, stdout=PIPE, stderr=STDOUT
    )
    output, _ = await asyncio.wait_for(promtool.communicate(page), 60)
    assert promtool.returncode == 0, output.decode()


async def test_prometheus_scrapes_every_node_once(
    collector_url: tuple[str, MonitorFarm], tmp_path: Path
) -> None:
    base, farm = collector_url
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "900ms"},
        "scrape_configs": [
            {
                "job_name": "hami-usage",
                "static_configs": [{"targets": [base.removeprefix("http://")]}],
            }
        ],
    }
    with real_prometheus(tmp_path, config) as prometheus:
        async with aiohttp.ClientSession() as http:

            async def query(promql: str) -> list[dict[str, Any]]:
                params = {"query": promql}
                async with http.get(f"{prometheus}/api/v1/query", params=params) as resp:
                    answer = await resp.json()
                assert answer["status"] == "success", answer
                result: list[dict[str, Any]] = answer["data"]["result"]
                return result

            async def scraped_all() -> bool:
                try:
                    ups = await query('up{job="hami-usage"}')
                    nodes = await query("count by (node) (hami_vgpu_memory_used_bytes)")
                except aiohttp.ClientError:
                    return False
                return [u["value"][1] for u in ups] == ["1"] and len(nodes) == 4

            await eventually(scraped_all, 40, "Prometheus to scrape every node")
            now = time.time()
            series = await query(
                '{job="hami-usage", __name__=~"hami_.*", __name__!~"hami_usage_collector_.*"}'
            )
            per_node = Counter(s["metric"]["node"] for s in series)
            expected = {
                name: len(expected_canonical(farm.node(name), now)) for name, _, _ in farm.targets()
            }
            assert dict(per_node) == expected
            identities = [tuple(sorted(s["metric"].items())) for s in series]
            assert len(identities) == len(set(identities))
            assert not [k for s in series for k in s["metric"] if k.startswith("exported_")]
            legacy = await query('{__name__=~"HostCoreUtilization|vGPU_.*|Device_.*"}')
            assert legacy == []
