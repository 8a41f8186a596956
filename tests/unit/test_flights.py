"""The single-flight helper (:class:`core.tasks.Flights`): one computation per key, shared,
its failures not kept, its callers free to leave, and everything in flight owned; and the
collector's pages' flights, stopped with the app.

Every test waits on events the computations set, never on time.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import aiohttp
import pytest
from helpers import eventually, holds, running_collector

from collector.app import ENGINE
from collector.promql.engine import Queries
from core.tasks import Flights


class Broken(RuntimeError):
    """The failure the tests' computations raise."""


class Work:
    """Computations that wait for the test's go, counted as they are made and as they end."""

    def __init__(self) -> None:
        self.go = asyncio.Event()
        self.started = asyncio.Event()
        self.made: list[str] = []
        self.ended: list[str] = []
        self.fail: Exception | None = None

    async def compute(self, key: str) -> list[str]:
        try:
            self.started.set()
            await self.go.wait()
            if self.fail is not None:
                raise self.fail
            return [key]
        finally:
            self.ended.append(key)

    def maker(self, key: str) -> Callable[[], Coroutine[Any, Any, list[str]]]:
        """What a caller hands the helper: counted when it is called."""

        def make() -> Coroutine[Any, Any, list[str]]:
            self.made.append(key)
            return self.compute(key)

        return make


async def release(work: Work) -> None:
    """Let the computations finish, once every caller before this one waits."""
    work.go.set()


async def test_concurrent_callers_share_one_computation() -> None:
    work = Work()
    flights: Flights[str, list[str]] = Flights("test")
    a1, a2, b, a3, _ = await asyncio.gather(
        flights.join("a", work.maker("a")),
        flights.join("a", work.maker("a")),
        flights.join("b", work.maker("b")),
        flights.join("a", work.maker("a")),
        release(work),
    )
    assert a1 is a2 is a3, "one result for every caller of a key"
    assert a1 == ["a"]
    assert b == ["b"]
    assert work.made == ["a", "b"], "one computation per key, made on the first caller's turn"
    assert flights.flight("a") is None, "forgotten once ended"
    assert await flights.join("a", work.maker("a")) is not a1, (
        "nothing kept: the next call computes"
    )
    assert work.made == ["a", "b", "a"]


async def test_start_never_waits_and_make_runs_on_the_callers_turn() -> None:
    work = Work()
    flights: Flights[str, list[str]] = Flights("test")
    first = flights.start("a", work.maker("a"))
    assert work.made == ["a"], "made before start returns"
    assert flights.start("a", work.maker("a")) is first
    assert flights.flight("a") is first
    assert work.made == ["a"]
    work.go.set()
    assert await first == ["a"]


async def test_a_failure_reaches_every_waiter_and_is_not_cached(
    caplog: pytest.LogCaptureFixture,
) -> None:
    work = Work()
    work.fail = Broken("no")
    flights: Flights[str, list[str]] = Flights("test")
    outcomes = await asyncio.gather(
        flights.join("a", work.maker("a")),
        flights.join("a", work.maker("a")),
        release(work),
        return_exceptions=True,
    )
    assert outcomes[0] is outcomes[1] is work.fail
    assert work.made == ["a"]
    assert not [r for r in caplog.records if r.name == "core.tasks"], "the callers had it"
    work.fail = None
    assert await flights.join("a", work.maker("a")) == ["a"], "the failure was not kept"
    assert work.made == ["a", "a"]


async def test_a_failure_nobody_waited_for_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    work = Work()
    flights: Flights[str, list[str]] = Flights("the test's refresh", expected=(Broken,))
    work.fail = Broken("timed out")
    expected = flights.start("a", work.maker("a"))
    work.go.set()
    await asyncio.wait([expected])
    work.fail = ValueError("a bug")
    unexpected = flights.start("b", work.maker("b"))
    await asyncio.wait([unexpected])  # the helper's own callback ran before this one's
    logged = [(r.levelno, r.getMessage(), r.exc_info is not None) for r in caplog.records]
    assert logged == [
        (logging.WARNING, "the test's refresh failed: timed out", False),
        (logging.ERROR, "the test's refresh failed", True),
    ]


async def test_a_cancelled_waiter_leaves_the_shared_work_running(
    caplog: pytest.LogCaptureFixture,
) -> None:
    work = Work()
    flights: Flights[str, list[str]] = Flights("test")
    leaving = asyncio.ensure_future(flights.join("a", work.maker("a")))
    staying = asyncio.ensure_future(flights.join("a", work.maker("a")))
    await work.started.wait()  # the flight runs: both callers took their first step before it
    leaving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leaving
    flight = flights.flight("a")
    assert flight is not None
    assert not flight.cancelled()
    work.go.set()
    assert await staying == ["a"]
    assert work.made == ["a"]
    assert work.ended == ["a"]

    # every waiter gone: the work still ends, and its failure, which reached no one, is logged
    work.go.clear()
    work.started.clear()
    work.fail = Broken("no")
    alone = asyncio.ensure_future(flights.join("a", work.maker("a")))
    await work.started.wait()
    alone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await alone
    flight = flights.flight("a")
    assert flight is not None
    work.go.set()
    await asyncio.wait([flight])  # the helper's own callback ran before this one's
    assert work.ended == ["a", "a"]
    assert [r.getMessage() for r in caplog.records] == ["test failed"]


async def test_cancel_frees_the_key_and_stop_waits_for_the_cancelled_too() -> None:
    work = Work()
    flights: Flights[str, list[str]] = Flights("test")
    cleaning, finish = asyncio.Event(), asyncio.Event()

    running = asyncio.Event()

    async def slow_to_stop() -> list[str]:
        try:
            running.set()
            await asyncio.Event().wait()
        finally:
            cleaning.set()
            await finish.wait()
            work.ended.append("slow")
        return []

    old = flights.start("a", slow_to_stop)
    await running.wait()
    flights.cancel("a")
    new = flights.start("a", work.maker("a"))
    assert new is not old, "the key is free at once"
    assert work.made == ["a"]
    other = flights.start("b", work.maker("b"))

    stopping = asyncio.ensure_future(flights.stop())
    await cleaning.wait()
    assert not stopping.done(), "stop waits for a flight that is still ending"
    finish.set()
    await stopping
    assert sorted(work.ended) == ["a", "b", "slow"], "every flight ended before stop returned"
    assert old.done()
    assert new.cancelled()
    assert other.cancelled()
    assert flights.flight("a") is None
    assert flights.flight("b") is None
    with pytest.raises(RuntimeError, match="stopped"):
        flights.start("a", work.maker("a"))
    assert work.made == ["a", "b"]


async def test_stop_cancels_the_waiters_of_a_flight() -> None:
    work = Work()
    flights: Flights[str, list[str]] = Flights("test")
    waiting = asyncio.ensure_future(flights.join("a", work.maker("a")))
    await work.started.wait()
    await flights.stop()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert work.ended == ["a"]


PAGE_FLIGHTS = {"the overview's chart", "chargeback for the namespaces page"}
"""The names of the flights of the pages that query the history."""


def _flying() -> set[str]:
    return {t.get_name() for t in asyncio.all_tasks() if not t.done()} & PAGE_FLIGHTS


async def test_the_pages_flights_end_with_the_app() -> None:
    """A request that goes away leaves its flight running; the app's cleanup stops it."""
    release = threading.Event()
    held: list[asyncio.Future[None]] = []

    def hold(queries: Queries) -> None:
        assert release.wait(60), "the test never released the engine's one slot"

    try:
        # The session outlives the collector: closed first, it would fail the request
        # itself, or its retry on the reused connection, before the app's cleanup ran.
        async with aiohttp.ClientSession() as http:
            async with running_collector(kubernetes=False, query_max_concurrency=1) as (
                base,
                app,
            ):
                engine = app[ENGINE]
                held.append(asyncio.ensure_future(engine.run(hold, identity="the test")))
                await eventually(lambda: holds(engine.evaluating == 1), what="the slot held")
                async with http.get(f"{base}/?refresh=0") as resp:
                    assert resp.status == 200, "the overview never waits long for its chart"
                report = asyncio.ensure_future(http.get(f"{base}/namespaces?window=1h"))
                await eventually(lambda: holds(_flying() == PAGE_FLIGHTS), what="both in flight")
            assert _flying() == set(), "cancelled and awaited by the app's cleanup"
            with pytest.raises(aiohttp.ClientError):
                await report
    finally:
        release.set()
        await asyncio.gather(*held)
