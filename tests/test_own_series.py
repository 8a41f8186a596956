"""The collector's own series are queryable through ``/prometheus``, with ``node`` where one is meant."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
from helpers import eventually, scraping_collector

from collector.demo.cluster import build_cluster
from collector.demo.monitors import MonitorFarm


async def test_own_series_are_in_the_query_api(tmp_path: Path) -> None:
    nodes = build_cluster(2, seed=5, flavours=("hami", "volcano"))
    answer: dict[str, Any] = {}
    async with (
        MonitorFarm(nodes) as farm,
        scraping_collector(farm, tmp_path, interval=0.5, timeout=0.4) as (base, _),
        aiohttp.ClientSession() as http,
    ):

        async def query(text: str) -> list[dict[str, Any]]:
            url = f"{base}/prometheus/api/v1/query"
            async with http.get(url, params={"query": text}) as resp:
                answer.update(await resp.json())
            return list(answer["data"]["result"])

        async def both_up() -> bool:
            found = await query("hami_usage_collector_source_up == 1")
            return {s["metric"].get("node") for s in found} == {n.name for n in nodes}

        await eventually(both_up, 15, "source_up of both nodes through /prometheus")
        (info,) = await query("hami_usage_collector_build_info")
        assert "node" not in info["metric"], "a collector-wide series names no node"
        by_node = await query("sum by (node) (hami_usage_collector_node_source_info)")
        assert {s["metric"]["node"] for s in by_node} == {n.name for n in nodes}
        async with http.get(f"{base}/prometheus/api/v1/label/node/values") as resp:
            assert "" not in (await resp.json())["data"]
