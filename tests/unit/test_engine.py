"""The one query engine: admission, limits and busy/idle hold for every surface that queries.

The Prometheus API, chargeback, the overview's chart and a pod's page all go
through :class:`~collector.promql.engine.Engine`; these tests show a page's and
a report's queries refused or timed out by the same limits as the API's.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import aiohttp
import pytest
from aiohttp import web
from helpers import eventually, holds, pod_history, running_collector

from collector.app import ENGINE, PRIMED, STORE
from collector.promql.engine import Engine, EngineLimits, Queries, Unavailable
from collector.promql.values import QueryError
from collector.tsdb.history import History


def blocked(
    engine: Engine, identity: str = "holder"
) -> tuple[asyncio.Future[int], threading.Event]:
    """A work of ``identity`` that holds a slot of ``engine`` until the event is set."""
    release = threading.Event()

    def hold(queries: Queries) -> int:
        assert release.wait(60), "the test never released the work"
        return 7

    return asyncio.ensure_future(engine.run(hold, identity=identity)), release


async def test_admission_caps_each_identity_and_queues_the_rest() -> None:
    engine = Engine(History(), EngineLimits(max_concurrency=1, max_concurrency_per_identity=1))
    holder, release = blocked(engine, "a")
    await eventually(lambda: holds(engine.evaluating == 1), what="the work to hold its slot")
    assert engine.busy.is_set()
    assert not engine.idle.is_set()
    with pytest.raises(Unavailable):  # a second work of the same reader, at once
        await engine.run(lambda q: 0, identity="a")
    with pytest.raises(QueryError, match="query timed out in query queue") as waited:
        await engine.run(lambda q: 0, identity="b", time_limit=0.05)
    assert waited.value.error_type == "timeout"
    release.set()
    assert await holder == 7
    assert engine.evaluating == 0
    assert engine.idle.is_set()
    assert not engine.busy.is_set()
    assert await engine.run(lambda q: 1, identity="a") == 1  # its place was given back


async def test_a_work_s_queries_share_one_deadline() -> None:
    history = History()
    now = time.time()
    history.record("n1", {b'x{a="1"}': 1.0}, now)
    engine = Engine(history)
    answered: list[object] = []

    def two(queries: Queries) -> None:
        answered.append(queries.instant("x", now).run())
        while queries.remaining() > 0:  # the work itself outlives its deadline
            threading.Event().wait(0.01)
        queries.instant("x", now)

    await engine.run(lambda q: q.instant("x", now).run(), identity="a")  # compiled, if need be
    with pytest.raises(QueryError, match="timed out") as late:
        await engine.run(two, identity="a", time_limit=0.5)
    assert late.value.error_type == "timeout"
    assert len(answered) == 1  # the first query ran within the work's deadline


async def test_a_caller_that_goes_away_cancels_its_queries() -> None:
    history = History()
    now = time.time()
    history.record("n1", {b'x{a="1"}': 1.0}, now)
    engine = Engine(history)
    started, release = threading.Event(), threading.Event()
    made: list[Queries] = []

    def slow(queries: Queries) -> object:
        made.append(queries)
        prepared = queries.instant("x", now)
        started.set()
        assert release.wait(60)
        return prepared.run()  # canceled meanwhile: it stops at its first check

    work = asyncio.ensure_future(engine.run(slow, identity="a"))
    await eventually(lambda: holds(started.is_set()), what="the work to plan its query")
    work.cancel()
    with pytest.raises(asyncio.CancelledError):
        await work
    assert engine.evaluating == 1  # the thread still holds its slot
    release.set()
    await eventually(lambda: holds(engine.evaluating == 0), what="the slot to be given back")


@asynccontextmanager
async def collector(
    **limits: float,
) -> AsyncIterator[tuple[web.Application, aiohttp.ClientSession]]:
    """A collector with one query slot and ``limits``, and a pod with 40 points of history."""
    async with (
        running_collector(kubernetes=False, query_max_concurrency=1, interval=1.0, **limits) as (
            base,
            app,
        ),
        aiohttp.ClientSession(base) as http,
    ):
        pod_history(app[STORE])
        # the pages' first reports, made once ready, would take the one slot too
        await eventually(lambda: holds(app[PRIMED].is_set()), what="the first readers' pages")
        yield app, http


SURFACES: dict[str, Callable[[str], str]] = {
    "api": lambda t: (
        f"/prometheus/api/v1/query_range?query=hami_vgpu_memory_used_bytes&start={t}&end={float(t) + 60}&step=1"
    ),
    "chargeback": lambda t: "/api/v1/usage?format=csv",
    "pod page": lambda t: "/workloads/ns-a/p",
}


@pytest.mark.parametrize("surface", SURFACES)
async def test_every_surface_waits_for_the_same_slots_and_times_out_alike(surface: str) -> None:
    async with collector(query_timeout=0.5) as (app, http):
        holder, release = blocked(app[ENGINE])
        await eventually(lambda: holds(app[ENGINE].evaluating == 1), what="the slot to be held")
        try:
            async with http.get(SURFACES[surface](repr(time.time() - 60))) as resp:
                status, text = resp.status, await resp.text()
        finally:
            release.set()
            await holder
        assert app[ENGINE].evaluating == 0
    assert status == 503, text
    assert "query timed out in query queue" in text


@pytest.mark.parametrize("surface", SURFACES)
async def test_every_surface_is_held_to_the_same_sample_limit(surface: str) -> None:
    async with (
        collector(query_max_samples=100) as (_, http),
        http.get(SURFACES[surface](repr(time.time() - 60))) as resp,
    ):
        status, text = resp.status, await resp.text()
    assert status in (422, 503), text  # a page says why with its own status, the API 422
    assert "too many samples" in text
