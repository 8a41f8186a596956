"""A real Prometheus scrapes the collector's gzip /metrics page and reads every series."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import aiohttp
from helpers import eventually, real_prometheus, running_collector
from test_metrics_page import WEIRD, fill

from collector.app import STORE


async def test_real_prometheus_reads_the_gzip_page(tmp_path: Path) -> None:
    async with (
        running_collector(kubernetes=False, stale_after=3600) as (base, app),
        aiohttp.ClientSession() as http,
    ):
        fill(app[STORE], time.monotonic())
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "900ms"},
            "scrape_configs": [
                {
                    "job_name": "hami",
                    "static_configs": [{"targets": [base.removeprefix("http://")]}],
                }
            ],
        }
        with real_prometheus(tmp_path, config) as prometheus:

            async def pods() -> list[dict[str, Any]]:
                async with http.get(
                    f"{prometheus}/api/v1/query",
                    params={"query": 'hami_vgpu_memory_used_bytes{job="hami"}'},
                ) as resp:
                    result: list[dict[str, Any]] = (await resp.json())["data"]["result"]
                    return result

            async def scraped() -> bool:
                return len(await pods()) == 3

            await eventually(scraped, 30, "Prometheus to scrape every node's series")
            by_node = {r["metric"]["node"]: r["value"][1] for r in await pods()}
            assert by_node == {"n1": "7", "n2": "5", WEIRD: "NaN"}
