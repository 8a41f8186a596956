"""Sharding by node: the hash, the collector's settings, its targets, its pushes and /api/v1/shards."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest
from helpers import eventually, holds, running_collector, scraping_collector
from pydantic import ValidationError

from agent.settings import AgentSettings
from collector.app import STORE
from collector.settings import CollectorSettings
from core.payload import Card, Payload
from core.shards import Shard, shard_of
from simulator.cluster import build_cluster
from simulator.monitors import MonitorFarm


def test_the_hash_is_the_first_eight_bytes_of_sha256_big_endian() -> None:
    for node in ("gpu-node-1", "node-a", "ноды-7", ""):
        digest = hashlib.sha256(node.encode()).digest()
        for count in (1, 2, 3, 4, 16):
            assert shard_of(node, count) == int(digest[:8].hex(), 16) % count
    assert [shard_of(n, 4) for n in ("node-a", "node-b", "node-c", "node-d")] == [0, 2, 0, 1]


def test_every_node_is_in_exactly_one_shard_and_they_are_about_even() -> None:
    nodes = [f"gpu-node-{i:05d}" for i in range(4000)]
    shards = [Shard(i, 4) for i in range(4)]
    held = [[n for n in nodes if s.holds(n)] for s in shards]
    assert sorted(n for part in held for n in part) == sorted(nodes)
    assert all(900 < len(part) < 1100 for part in held), [len(p) for p in held]
    assert all(Shard().holds(n) for n in nodes[:10])


@pytest.mark.parametrize(
    ("count", "index", "message"),
    [
        (2, 2, "shard-index (2) must be below shard-count (2)"),
        (0, 0, "shard_count"),
        (2, -1, "shard_index"),
    ],
)
def test_a_bad_shard_setting_is_refused_naming_it(count: int, index: int, message: str) -> None:
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        CollectorSettings(shard_count=count, shard_index=index)


def test_the_command_line_names_a_bad_shard_index() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "collector", "serve", "--shard-count=3", "--shard-index=3"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "shard-index (3) must be below shard-count (3)" in result.stderr


async def test_a_shard_scrapes_only_the_targets_of_its_nodes(tmp_path: Path) -> None:
    nodes = build_cluster(8, seed=3, flavours=("hami", "volcano", "kai"))
    async with MonitorFarm(nodes) as farm:
        names = {name for name, _, _ in farm.targets()}
        mine = {n for n in names if shard_of(n, 2) == 1}
        assert mine, "the seed puts nodes in shard 1"
        assert mine != names, "and in shard 0"
        async with scraping_collector(
            farm, tmp_path, interval=0.5, timeout=0.4, shard_count=2, shard_index=1
        ) as (base, app):
            store = app[STORE]
            await eventually(lambda: holds(set(store.nodes()) == mine), 10, "shard 1's nodes")
            async with aiohttp.ClientSession() as http, http.get(f"{base}/metrics") as resp:
                page = await resp.text()
            assert all(f'node="{n}"' not in page for n in names - mine)
            assert 'hami_usage_collector_shard{count="2",index="1"} 1.0' in page
            others = [n for n, _, _ in farm.targets() if n not in mine]
            assert f"hami_usage_collector_other_shard_targets {float(len(others))}" in page


def payload(node: str, sequence: int = 0) -> Payload:
    return Payload(
        node=node,
        agent="a1",
        sequence=sequence,
        time=time.time(),
        nvml=True,
        cards=[Card(index=0, uuid="GPU-1", name="T4", memory_used=1 << 20, memory_total=1 << 30)],
    )


async def test_a_push_for_another_shards_node_is_misdirected() -> None:
    async with (
        running_collector(kubernetes=False, push_auth="none", shard_count=4, shard_index=0) as (
            base,
            app,
        ),
        aiohttp.ClientSession() as http,
    ):
        for node, shard in (("node-b", 2), ("node-d", 1)):
            async with http.post(f"{base}/api/v1/push", data=payload(node).model_dump_json()) as r:
                assert r.status == 421
                body = await r.json()
            assert body["status"] == "error"
            assert body["error"] == "misdirected"
            assert body["details"] == {"shard": shard, "shard_count": 4, "this_shard": 0}
            assert f"belongs to shard {shard} of 4" in body["message"]
        async with http.post(f"{base}/api/v1/push", data=payload("node-a").model_dump_json()) as r:
            assert r.status == 204
        assert app[STORE].nodes() == ["node-a"]

        async with http.get(f"{base}/api/v1/shards") as resp:
            assert resp.status == 200
            info = await resp.json()
        assert (info["index"], info["count"], info["nodes"]) == (0, 4, ["node-a"])
        assert "sha256" in info["hash"]
        assert info["node_shard"] is None
        async with http.get(f"{base}/api/v1/shards", params={"node": "node-b"}) as resp:
            info = await resp.json()
        assert (info["node"], info["node_shard"]) == ("node-b", 2)
        async with http.get(f"{base}/api/v1/shards", params={"nodes": "x"}) as resp:
            assert resp.status == 400
            assert "unknown query parameter 'nodes'" in (await resp.json())["message"]


def test_the_agent_pushes_to_its_own_shard() -> None:
    for node, shard in (("node-a", 0), ("node-b", 2), ("node-d", 1)):
        settings = AgentSettings(
            node=node, collector_shards="http://huc-{shard}.huc-headless:9396", shard_count=4
        )
        assert settings.collector_urls() == [f"http://huc-{shard}.huc-headless:9396"]
    plain = AgentSettings(node="n", collector="http://a:1,https://b:2")
    assert plain.collector_urls() == ["http://a:1", "https://b:2"]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"collector_shards": "http://huc.huc-headless:9396", "shard_count": 2}, "{shard}"),
        ({"collector_shards": "http://huc-{shard}:9396"}, "go together"),
        ({"shard_count": 2}, "go together"),
        (
            {"collector": "http://x:1", "collector_shards": "http://h-{shard}:1", "shard_count": 2},
            "not both",
        ),
        ({"collector": "ftp://x"}, "http:// or https://"),
        ({"collector": "http://x:99999"}, "bad port"),
        ({"collector": ""}, "at least one URL"),
    ],
)
def test_bad_agent_destinations_are_refused(values: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message.replace("{", r"\{").replace("}", r"\}")):
        AgentSettings(node="n", **values)  # type: ignore[arg-type]
