"""Remote write into real receivers (Prometheus, VictoriaMetrics): the same series as /metrics,
staleness, outages.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from helpers import eventually, scraping_collector
from receivers import Switch, prometheus_receiver, victoria_metrics
from test_remote_write import _stats

from collector.exposition.parse import parse
from simulator.cluster import build_cluster
from simulator.monitors import MonitorFarm

CLUSTER = '{__name__=~"hami_.+", __name__!~"hami_usage_collector_.+"}'
EXTERNAL = {"cluster": "test", "replica": "r1"}


@pytest.fixture
async def farm() -> AsyncIterator[MonitorFarm]:
    nodes = build_cluster(3, seed=5, flavours=("hami", "volcano", "kai"))
    async with MonitorFarm(nodes) as running:
        yield running


async def query(http: aiohttp.ClientSession, url: str, promql: str, at: float) -> dict[str, float]:
    """An instant query's answer as {identity: value}; the identity is the sorted label pairs."""
    async with http.get(url, params={"query": promql, "time": f"{at:.3f}"}) as resp:
        answer: dict[str, Any] = await resp.json(content_type=None)
    assert answer["status"] == "success", answer
    found = {
        json.dumps(sorted(item["metric"].items())): float(item["value"][1])
        for item in answer["data"]["result"]
    }
    assert len(found) == len(answer["data"]["result"]), "each series once"
    return found


def strip_external(answer: dict[str, float]) -> dict[str, float]:
    """The answer without the external labels, which must be on every series."""
    out = {}
    for identity, value in answer.items():
        labels = dict(json.loads(identity))
        assert {k: labels.pop(k, None) for k in EXTERNAL} == EXTERNAL, labels
        out[json.dumps(sorted(labels.items()))] = value
    return out


async def page_identities(http: aiohttp.ClientSession, base: str) -> set[str]:
    """The cluster's series on /metrics, as identities like :func:`query`'s."""
    async with http.get(f"{base}/metrics") as resp:
        body = parse(await resp.read())
    return {
        json.dumps(sorted({"__name__": s.name, **dict(s.labels)}.items()))
        for s in body.samples
        if not s.name.startswith("hami_usage_collector_")
    }


@pytest.mark.parametrize("receiver", ["prometheus", "victoria-metrics"])
async def test_receiver_answers_what_the_collector_serves(
    farm: MonitorFarm, tmp_path: Path, receiver: str
) -> None:
    start = prometheus_receiver if receiver == "prometheus" else victoria_metrics
    with start(tmp_path) as base:
        settings = {
            "interval": 0.5,
            "timeout": 0.4,
            "remote_write_url": [f"{base}/api/v1/write"],
            "external_label": ["cluster=test"],
            "replica": "r1",
        }
        async with (
            scraping_collector(farm, tmp_path, **settings) as (ours, _),
            aiohttp.ClientSession() as http,
        ):
            theirs_api, ours_api = f"{base}/api/v1/query", f"{ours}/prometheus/api/v1/query"
            await eventually(
                lambda: _every_node(http, ours, 3), 20, "the collector to scrape every node"
            )
            moment: dict[str, Any] = {}

            async def page_matches_history() -> bool:
                # The page and the history at one instant; a scrape landing between
                # the two reads makes them differ, and the pair is read again.
                at = time.time()
                page = await page_identities(http, ours)
                held = await query(http, ours_api, CLUSTER, at)
                moment.update(at=at, held=held)
                return set(held) == page

            await eventually(page_matches_history, 20, "/metrics and the history to agree")
            at, held = moment["at"], moment["held"]

            async def same() -> bool:
                theirs = await query(http, theirs_api, CLUSTER, at)
                return bool(theirs) and strip_external(theirs) == held

            await eventually(same, 30, f"{receiver} to answer what the collector holds")
            theirs = strip_external(await query(http, theirs_api, CLUSTER, at))
            assert all('"node"' in identity for identity in theirs)
            own = await query(http, theirs_api, "hami_usage_collector_live_series", time.time())
            assert own, "the collector's own series reach the receiver too"


async def _every_node(http: aiohttp.ClientSession, base: str, count: int) -> bool:
    nodes = {dict(json.loads(i)).get("node") for i in await page_identities(http, base)}
    return len(nodes - {None}) == count


async def test_a_vanished_series_ends_at_the_receiver(farm: MonitorFarm, tmp_path: Path) -> None:
    with prometheus_receiver(tmp_path) as base:
        settings = {"interval": 0.5, "timeout": 0.4, "remote_write_url": [f"{base}/api/v1/write"]}
        async with (
            scraping_collector(farm, tmp_path, **settings),
            aiohttp.ClientSession() as http,
        ):
            api = f"{base}/api/v1/query"
            by_node = "count by (node) (hami_vgpu_memory_used_bytes)"

            async def nodes() -> set[str]:
                answer = await query(http, api, by_node, time.time())
                return {dict(json.loads(i))["node"] for i in answer}

            every = {name for name, _, _ in farm.targets()}
            await eventually(lambda: _equal(nodes(), every), 20, "every node at the receiver")
            gone = sorted(every)[0]
            targets = tmp_path / "targets.json"
            groups = json.loads(targets.read_text())
            kept = [g for g in groups if g["labels"]["node"] != gone]
            targets.write_text(json.dumps(kept))
            # Without a staleness marker Prometheus would answer for 5 more minutes.
            await eventually(lambda: _equal(nodes(), every - {gone}), 20, f"{gone} to end")


async def _equal(found: Any, expected: set[str]) -> bool:
    return bool(await found == expected)


OUTAGES = [2.0]
"""Seconds the receiver is down in the outage test; the bench runs 30 s."""


@pytest.mark.parametrize("outage", OUTAGES)
async def test_a_receiver_outage_loses_nothing_within_the_bound(
    farm: MonitorFarm, tmp_path: Path, outage: float
) -> None:
    with prometheus_receiver(tmp_path) as base:
        async with Switch.forwarding(f"{base}/api/v1/write") as switch:
            settings = {"interval": 0.25, "timeout": 0.2, "remote_write_url": [switch.url]}
            async with (
                scraping_collector(farm, tmp_path, **settings) as (ours, app),
                aiohttp.ClientSession() as http,
            ):
                await eventually(lambda: _every_node(http, ours, 3), 20, "every node scraped")
                await switch.down()
                began = time.time()
                stats = _stats(app)
                retried = stats.totals["retried"]
                await eventually(
                    lambda: _after(began + outage, stats.totals["retried"] > retried),
                    outage + 20,
                    "the outage to last and requests to be retried",
                )
                await switch.up()
                ended = time.time()
                window = f"count_over_time(hami_vgpu_memory_used_bytes[{int((ended - began + 1) * 1000)}ms])"
                promql = f"sum({window})"
                theirs_api, ours_api = f"{base}/api/v1/query", f"{ours}/prometheus/api/v1/query"

                answers: list[Any] = []

                async def caught_up() -> bool:
                    theirs = await query(http, theirs_api, promql, ended)
                    answers[:] = [theirs, await query(http, ours_api, promql, ended)]
                    return bool(answers[0] == answers[1])

                what = "the receiver to hold every queued sample"
                try:
                    await eventually(caught_up, 30, what)
                except AssertionError:
                    raise AssertionError(
                        f"{what}: theirs, ours {answers}, {stats.totals}"
                    ) from None
                assert stats.totals["dropped"] == 0
                (points,) = (await query(http, ours_api, promql, ended)).values()
                assert points > 3 * outage / 0.25, "samples of the outage"


async def _after(when: float, condition: bool) -> bool:
    return time.time() >= when and condition
