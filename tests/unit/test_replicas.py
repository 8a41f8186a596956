"""The agent pushes to every collector replica: one dead replica delays no other, and gets its
backlog replayed when it comes back; names with several addresses are pushed to each."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
from aiohttp import web
from helpers import eventually, holds, reserved_port

from agent.app import PushMetrics
from agent.destinations import Endpoint, Fanout, PushOptions, resolve
from agent.push import Backlog, Pusher
from collector.app import STORE, build_app
from collector.settings import CollectorSettings
from collector.sources.pods import StaticDirectory
from core.payload import Card, Payload
from core.shards import shard_of
from core.tasks import Supervisor

HOSTS = ("127.0.0.1", "127.0.0.2")
START = time.time() - 300
"""Snapshot n is taken at START + n: all within the collector's history and lookback."""


def snapshot(node: str, sequence: int) -> Payload:
    card = Card(index=0, uuid="GPU-1", name="T4", memory_used=sequence << 20, memory_total=1 << 30)
    return Payload(
        node=node, agent="a1", sequence=sequence, time=START + sequence, nvml=True, cards=[card]
    )


class Replica:
    """A real collector app on ``host:port``, which can go down and come back at that address."""

    def __init__(self, host: str, port: int, **settings: object) -> None:
        self.host, self.port, self.settings = host, port, settings
        self.app: web.Application | None = None
        self._runner: web.AppRunner | None = None

    async def up(self) -> None:
        settings = CollectorSettings(
            listen=f"{self.host}:{self.port}",
            kubernetes=False,
            push_auth="none",
            **self.settings,  # type: ignore[arg-type]
        )
        self.app = build_app(settings, StaticDirectory({}, {}))
        self._runner = web.AppRunner(self.app, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port).start()

    async def down(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def points(self, node: str) -> int:
        """How many pushed intervals of ``node`` this replica's history holds."""
        query = f'count_over_time(hami_host_gpu_memory_used_bytes{{node="{node}"}}[1h])'
        url = f"http://{self.host}:{self.port}/prometheus/api/v1/query"
        async with (
            aiohttp.ClientSession() as http,
            http.get(url, params={"query": query, "time": str(time.time())}) as resp,
        ):
            result = (await resp.json())["data"]["result"]
        return int(result[0]["value"][1]) if result else 0


def fanout(urls: list[str], tasks: Supervisor, addresses: dict[str, list[str]]) -> Fanout:
    """Push to ``urls``, their hosts resolved through ``addresses`` (a name not in it fails)."""

    async def resolver(host: str, port: int) -> list[str]:
        if host not in addresses:
            raise OSError(f"{host}: Name or service not known")
        return addresses[host]

    options = PushOptions(lambda: None, 600, 1 << 20, 2.0, (0.01, 0.2))
    return Fanout(urls, options, tasks, resolver)


@asynccontextmanager
async def replicas(**settings: object) -> AsyncIterator[tuple[int, list[Replica]]]:
    """Two collector replicas on 127.0.0.1 and 127.0.0.2, one port held on both."""
    with reserved_port(*HOSTS) as port:
        running = [Replica(host, port, **settings) for host in HOSTS]
        try:
            yield port, running
        finally:
            for replica in running:
                await replica.down()


async def test_a_dead_replica_delays_no_other_and_gets_its_backlog_back() -> None:
    async with replicas() as (port, (alive, dead)), Supervisor() as tasks:
        await alive.up()
        out = fanout([f"http://huc-headless.test:{port}"], tasks, {"huc-headless.test": [*HOSTS]})
        await out.update()
        to_alive, to_dead = (out.pushers[Endpoint(out.urls[0], h)] for h in HOSTS)
        for sequence in range(12):
            out.submit(snapshot("node-a", sequence))
            # the live replica has each interval before the next is taken
            done = sequence + 1
            await eventually(lambda: holds(to_alive.stats.accepted == done), 5, "pushed")  # noqa: B023
        assert await alive.points("node-a") == 12
        assert to_dead.stats.accepted == 0
        assert len(to_dead.backlog) == 12
        assert to_dead.stats.failed > 0
        await dead.up()
        await eventually(lambda: holds(len(to_dead.backlog) == 0), 10, "backlog replayed")
        assert to_dead.stats.accepted == 12
        assert await dead.points("node-a") == 12, "every interval, in order, none lost"


async def test_pushes_keep_the_urls_host_header() -> None:
    hosts: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        hosts.append(request.host)
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/api/v1/push", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    with reserved_port() as port:
        await web.TCPSite(runner, "127.0.0.1", port).start()
        try:
            pusher = Pusher(
                f"http://collector.invalid:{port}",
                lambda: None,
                Backlog(600, 1 << 20),
                address="127.0.0.1",
            )
            async with Supervisor() as tasks:
                tasks.start("push", pusher.run)
                pusher.submit(snapshot("node-a", 0))
                await eventually(lambda: holds(pusher.stats.accepted == 1), 5, "the push")
        finally:
            await runner.cleanup()
    assert hosts == [f"collector.invalid:{port}"], "connected by address, named by host"


async def test_a_replica_that_moves_takes_over_the_backlog_of_the_address_it_left() -> None:
    addresses = {"huc.test": ["127.0.0.1", "127.0.0.2"]}
    with reserved_port(*HOSTS, "127.0.0.3") as port:  # nothing listens: every push is kept
        async with Supervisor() as tasks:
            out = fanout([f"http://huc.test:{port}"], tasks, addresses)
            await out.update()
            for sequence in range(3):
                out.submit(snapshot("node-a", sequence))
            moved = out.pushers[Endpoint(out.urls[0], "127.0.0.2")].backlog
            addresses["huc.test"] = ["127.0.0.1", "127.0.0.3"]
            await out.update()
            assert sorted(e.address or "" for e in out.pushers) == ["127.0.0.1", "127.0.0.3"]
            assert out.pushers[Endpoint(out.urls[0], "127.0.0.3")].backlog is moved
            assert len(moved) == 3
            assert sorted(tasks.dead()) == []
            addresses["huc.test"] = ["127.0.0.1"]  # .3 restarts: out of the Service meanwhile
            await out.update()
            out.submit(snapshot("node-a", 3))
            addresses["huc.test"] = ["127.0.0.1", "127.0.0.2"]
            await out.update()
            back = out.pushers[Endpoint(out.urls[0], "127.0.0.2")].backlog
            assert back is moved
            assert len(back) == 4, "the gap while it was away is queued for it too"


async def test_a_name_that_does_not_resolve_is_pushed_by_name_until_it_does() -> None:
    addresses: dict[str, list[str]] = {}
    with reserved_port() as port:
        async with Supervisor() as tasks:
            out = fanout([f"http://later.test:{port}"], tasks, addresses)
            await out.update()
            assert list(out.pushers) == [Endpoint(out.urls[0], None)]
            out.submit(snapshot("node-a", 0))
            addresses["later.test"] = ["127.0.0.1"]
            await out.update()
            assert list(out.pushers) == [Endpoint(out.urls[0], "127.0.0.1")]
            assert len(out.pushers[Endpoint(out.urls[0], "127.0.0.1")].backlog) == 1
            del addresses["later.test"]
            await out.update()  # a failed lookup keeps the known addresses
            assert list(out.pushers) == [Endpoint(out.urls[0], "127.0.0.1")]


async def test_the_event_loops_resolver_gives_every_address_of_a_name_once() -> None:
    found = await resolve("localhost", 9396)
    assert "127.0.0.1" in found
    assert len(found) == len(set(found))
    assert set(found) <= {"127.0.0.1", "::1"}


async def test_each_agent_pushes_to_its_nodes_shard_only() -> None:
    with reserved_port(*HOSTS) as port:
        shards = [Replica(h, port, shard_count=2, shard_index=i) for i, h in enumerate(HOSTS)]
        try:
            for shard in shards:
                await shard.up()
            nodes = [f"gpu-node-{i}" for i in range(6)]
            async with Supervisor() as tasks:
                pushers: list[Pusher] = []
                for node in nodes:
                    url = f"http://huc-{shard_of(node, 2)}.test:{port}"
                    out = fanout([url], tasks, {"huc-0.test": [HOSTS[0]], "huc-1.test": [HOSTS[1]]})
                    await out.update()
                    out.submit(snapshot(node, 0))
                    pushers.extend(out.pushers.values())
                await eventually(
                    lambda: holds(all(p.stats.accepted == 1 for p in pushers)), 10, "accepted"
                )
                assert all(p.stats.failed == 0 for p in pushers), "no push was misdirected"
            for index, shard in enumerate(shards):
                assert shard.app is not None
                assert shard.app[STORE].nodes() == [n for n in nodes if shard_of(n, 2) == index]
        finally:
            for shard in shards:
                await shard.down()


async def test_the_agents_push_metrics_have_one_series_per_destination() -> None:
    with reserved_port(*HOSTS) as port:  # nothing listens: both backlogs keep the snapshot
        async with Supervisor() as tasks:
            out = fanout([f"http://huc.test:{port}"], tasks, {"huc.test": [*HOSTS]})
            await out.update()
            out.submit(snapshot("node-a", 0))
            families = {f.name: f for f in PushMetrics(out).collect()}
    waiting = families["hami_agent_backlog_snapshots"].samples
    assert sorted((s.labels["address"], s.value) for s in waiting) == [(h, 1.0) for h in HOSTS]
    assert {s.labels["collector"] for s in waiting} == {f"http://huc.test:{port}"}
