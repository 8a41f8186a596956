"""Keeping the REST read model warm: only while the API is read, under the app's supervisor."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from helpers import eventually, holds
from test_rest import NOW, Client, fill, get, simulated, source

from collector.app import STORE, TASKS
from collector.normalise.bodies import Normaliser
from collector.store.latest import Store
from collector.views.cache import WARM_AFTER_READ_S, WARM_SLICE_S, NodeCache
from collector.web import health
from collector.web.rest.handlers import RestApi
from core.tasks import RestartPolicy, Supervisor

TURNS = 50
"""Event-loop turns given to a warmer that must not work; an active one (no pause) works in one."""


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@asynccontextmanager
async def warmed(
    store: Store, cache: NodeCache, tasks: Supervisor | None = None
) -> AsyncIterator[Client]:
    """An app serving the REST API over ``store``, with ``cache`` kept warm by its cleanup context."""
    app = web.Application()
    app[STORE] = store
    app[TASKS] = tasks or Supervisor()
    api = RestApi(STORE, 15.0, tasks=TASKS, nodes=cache)
    app.router.add_routes(api.routes())
    app.router.add_routes(health.routes(lambda _: None, TASKS))
    app.cleanup_ctx.append(api.warming)
    async with TestClient(TestServer(app)) as client:
        yield client


async def turns() -> None:
    for _ in range(TURNS):
        await asyncio.sleep(0)


async def test_no_warming_without_readers_and_a_late_reader_reads_the_new_values() -> None:
    nodes = simulated(4)
    store = Store(60)
    fill(store, nodes)
    clock = Clock()
    cache = NodeCache(clock, period=0.0)
    async with warmed(store, cache) as client:
        await turns()
        assert cache.idle
        assert cache.stale(store) == len(nodes), "never read: nothing presented"

        # One node read: the warmer presents the others without another read.
        await get(client, f"/api/v1/nodes/{nodes[0].name}")
        assert not cache.idle
        await eventually(lambda: holds(cache.stale(store) == 0), 10, "the other nodes warmed")

        # Quiet past the window: the warmer stops, changed nodes stay unpresented.
        clock.now += WARM_AFTER_READ_S + 1
        await eventually(lambda: holds(cache.idle), 10, "warming stopped")
        later = NOW + 3600
        for node in nodes:
            node.step(later)
            batch = Normaliser(node.name).normalise(node.exposition(later))
            store.put(source(node), batch, time.monotonic())
        await turns()
        assert cache.stale(store) == len(nodes), "nobody reads: no warming work"

        # The first read after the quiet spell answers from the new values.
        listed = await get(client, "/api/v1/nodes")
        assert listed["total"] == len(nodes)
        used = {s["name"]: s["memory_used_bytes"] for s in listed["nodes"]}
        assert used == {n.name: sum(c.memory_used for c in n.cards) for n in nodes}
        assert cache.stale(store) == 0
        assert not cache.idle, "read again: warming again"


async def test_warming_keeps_pace_with_a_cluster_that_all_changes_while_read() -> None:
    nodes = simulated(6)
    store = Store(60)
    fill(store, nodes)
    cache = NodeCache(Clock(), period=0.0, pause=0.0)
    async with warmed(store, cache) as client:
        await get(client, f"/api/v1/nodes/{nodes[0].name}")
        for round_ in range(3):  # every node changes each round, no read in between
            await eventually(lambda: holds(cache.stale(store) == 0), 10, f"round {round_} warmed")
            fill(store, nodes)
            assert cache.stale(store) == len(nodes)
        await eventually(lambda: holds(cache.stale(store) == 0), 10, "the last round warmed")
        assert not cache.idle


def test_a_slice_rebuilds_what_its_budget_allows_and_the_next_goes_on() -> None:
    nodes = simulated(5)
    store = Store(60)
    fill(store, nodes)
    cache = NodeCache()
    assert cache.refresh(store, 1.0), "enough budget: all current in one slice"
    fill(store, nodes)
    left = []
    while not cache.refresh(store, -1.0):  # spent at once: one node a slice
        left.append(cache.stale(store))
    assert left == list(range(len(nodes) - 1, -1, -1)), "one node each, none done twice"
    assert cache.refresh(store, -1.0), "nothing changed since: current"

    # A node the store no longer holds is forgotten by the next pass.
    store.remove(source(nodes[0]).id)
    assert cache.refresh(store, 1.0)
    assert cache.stale(store) == 0
    assert [p.usage.node for p in cache.all(store)] == sorted(n.name for n in nodes[1:])


def test_warming_builds_what_was_read_of_the_last_view() -> None:
    nodes = simulated(4)
    store = Store(60)
    fill(store, nodes)
    cache = NodeCache()
    first = cache.all(store)[0]
    first.rows()  # a reader of the first node's container rows (REST's pod list)
    fill(store, nodes)
    assert cache.refresh(store, 1.0)
    warmed, *rest = cache.all(store)
    assert warmed is not first
    assert warmed.usage.containers_read, "read of the last view: built for the next"
    assert not any(p.usage.containers_read for p in rest), "never read: left to first use"

    # A request's rebuild builds only what it reads, but hands the wish on to warming.
    fill(store, nodes)
    by_request = cache.one(store, nodes[0].name)
    assert by_request is not None
    assert not by_request.usage.containers_read
    fill(store, nodes)
    assert cache.refresh(store, 1.0)
    assert cache.all(store)[0].usage.containers_read


def test_a_view_presents_a_bounded_number_of_changed_nodes_and_rest_every_one() -> None:
    nodes = simulated(5)
    store = Store(60)
    fill(store, nodes[:4])
    cache = NodeCache()
    before = {p.usage.node: p for p in cache.all(store)}
    fill(store, nodes)  # the four change, a fifth appears

    seen = cache.all(store, rebuilds=1)
    again = [p.usage.node for p in seen if p is not before.get(p.usage.node)]
    assert [p.usage.node for p in seen] == sorted(n.name for n in nodes)
    assert again == sorted([nodes[0].name, nodes[4].name]), "one changed, and the new one"
    assert cache.stale(store) == 3, "the others shown as they were, left to warming"

    assert all(p.usage.view is store.view(p.usage.node) for p in cache.all(store))
    assert cache.stale(store) == 0, "REST's read: every node current"


class Slicing(NodeCache):
    """Rebuilds one node a slice, noting the budget each slice was given and the event
    loop's turn it ran in."""

    def __init__(self, turn: list[int]) -> None:
        super().__init__(period=0.0, pause=0.0)
        self.slices: list[tuple[float, int]] = []
        self._turn = turn

    def refresh(self, store: Store, budget: float) -> bool:
        self.slices.append((budget, self._turn[0]))
        return super().refresh(store, -1.0)


async def test_the_warmer_gives_the_event_loop_back_after_every_slice() -> None:
    nodes = simulated(8)
    store = Store(60)
    fill(store, nodes)
    turn = [0]

    async def ticking() -> None:
        while True:
            turn[0] += 1
            await asyncio.sleep(0)

    cache = Slicing(turn)
    ticker = asyncio.create_task(ticking())
    try:
        async with warmed(store, cache) as client:
            await get(client, f"/api/v1/nodes/{nodes[0].name}")
            await eventually(lambda: holds(cache.stale(store) == 0), 10, "warmed")
    finally:
        ticker.cancel()
    assert {budget for budget, _ in cache.slices} == {WARM_SLICE_S}
    assert len(cache.slices) >= len(nodes) - 1, "the read built one node, the warmer the rest"
    turns_seen = [t for _, t in cache.slices]
    assert all(a < b for a, b in itertools.pairwise(turns_seen)), "other tasks ran between"


class Crashing(NodeCache):
    """Its first ``times`` slices crash."""

    def __init__(self, times: int) -> None:
        super().__init__(period=0.0)
        self.crashes = 0
        self._times = times

    def refresh(self, store: Store, budget: float) -> bool:
        if self.crashes < self._times:
            self.crashes += 1
            raise RuntimeError("a bad slice")
        return super().refresh(store, budget)


async def test_a_crashed_warmer_is_logged_counted_and_restarted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    nodes = simulated(3)
    store = Store(60)
    fill(store, nodes)
    restarts: list[str] = []
    tasks = Supervisor(restarts.append, RestartPolicy(first=0.01, cap=0.01))
    cache = Crashing(1)
    async with warmed(store, cache, tasks) as client:
        await get(client, f"/api/v1/nodes/{nodes[0].name}")
        await eventually(lambda: holds(restarts == ["rest api warming"]), 10, "one restart")
        assert any(
            r.levelno == logging.ERROR and "'rest api warming' crashed" in r.getMessage()
            for r in caplog.records
        )
        # The restarted task warms: a changed node is presented without a read.
        fill(store, nodes[1:])
        await eventually(lambda: holds(cache.stale(store) == 0), 10, "warmed after the restart")
        assert tasks.dead() == []
        assert (await client.get("/healthz")).status == 200


async def test_a_warmer_that_keeps_crashing_is_named_by_healthz() -> None:
    nodes = simulated(2)
    store = Store(60)
    fill(store, nodes)
    tasks = Supervisor(policy=RestartPolicy(first=0.01, cap=0.01, limit=2))
    cache = Crashing(3)
    async with warmed(store, cache, tasks) as client:
        await get(client, f"/api/v1/nodes/{nodes[0].name}")
        await eventually(lambda: holds(tasks.dead() == ["rest api warming"]), 10, "given up")
        assert cache.crashes == 3, "the first run and two restarts"
        health = await client.get("/healthz")
        assert health.status == 503
        assert "rest api warming" in await health.text()
        # the API still answers, built on demand
        assert (await get(client, "/api/v1/nodes"))["total"] == len(nodes)
