"""A real Prometheus scrapes the collector; promtool checks the page."""

from __future__ import annotations

import asyncio
import time
from asyncio.subprocess import DEVNULL, PIPE, STDOUT
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from helpers import eventually, free_port, running_collector

from collector.demo.monitors import MonitorFarm
from collector.demo.run import write_targets
from collector.demo.simulator import build_cluster

TOOLS = Path(__file__).resolve().parent.parent / ".tools" / "prometheus" / "usr" / "bin"


def tool(name: str) -> Path:
    path = TOOLS / name
    if not path.exists():
        pytest.fail(f"{path} is missing: run `make tools` (make test does it)")
    return path


@pytest.fixture
async def collector_url(tmp_path: Path) -> AsyncIterator[tuple[str, MonitorFarm]]:
    nodes = build_cluster(4, seed=11, flavours=("hami", "hami-legacy", "volcano", "kai"))
    async with MonitorFarm(nodes) as farm:
        targets = tmp_path / "targets.json"
        write_targets(targets, farm)
        async with running_collector(
            kubernetes=False, targets_file=targets, interval=0.5, timeout=0.4
        ) as (base, _):
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
        tool("promtool"), "check", "metrics", stdin=PIPE, stdout=PIPE, stderr=STDOUT
    )
    output, _ = await asyncio.wait_for(promtool.communicate(page), 60)
    assert promtool.returncode == 0, output.decode()


async def test_prometheus_scrapes_every_node_once(
    collector_url: tuple[str, MonitorFarm], tmp_path: Path
) -> None:
    base, farm = collector_url
    port = free_port()
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "900ms"},
        "scrape_configs": [
            {
                "job_name": "hami-usage",
                "static_configs": [{"targets": [base.removeprefix("http://")]}],
            }
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    process = await asyncio.create_subprocess_exec(
        tool("prometheus"),
        f"--config.file={tmp_path / 'prometheus.yml'}",
        f"--storage.tsdb.path={tmp_path / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        stdout=DEVNULL,
        stderr=DEVNULL,
    )
    try:
        async with aiohttp.ClientSession() as http:

            async def query(promql: str) -> list[dict[str, Any]]:
                params = {"query": promql}
                async with http.get(f"http://127.0.0.1:{port}/api/v1/query", params=params) as resp:
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
                name: len(farm.node(name).expected_canonical(now)) for name, _, _ in farm.targets()
            }
            assert dict(per_node) == expected
            identities = [tuple(sorted(s["metric"].items())) for s in series]
            assert len(identities) == len(set(identities))
            assert not [k for s in series for k in s["metric"] if k.startswith("exported_")]
            legacy = await query('{__name__=~"HostCoreUtilization|vGPU_.*|Device_.*"}')
            assert legacy == []
    finally:
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), 10)
        except TimeoutError:
            process.kill()
            await process.wait()
