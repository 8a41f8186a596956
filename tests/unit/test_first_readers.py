"""Once the collector is ready, what each page's first reader would wait for is made in the
background: the namespaces page's report, the overview's chart and sums, the nodes'
presented forms. The first reader finds them kept, as later readers do."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import pytest
from aiohttp import web
from helpers import eventually, holds, pod_history, running_collector

from collector.app import ENGINE, PRIMED, STORE
from collector.promql.engine import Engine
from collector.views.chargeback import Chargeback
from collector.views.models import ApiError
from collector.web.ui.trend import Trend


@asynccontextmanager
async def collector(
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[tuple[web.Application, aiohttp.ClientSession, asyncio.Event]]:
    """A collector whose engine is ready once the event is set, with a pod's history."""
    warm, compiled = Engine.warm, asyncio.Event()

    async def held(self: Engine, body: object) -> float:
        await compiled.wait()
        return await warm(self, body)  # type: ignore[arg-type]

    monkeypatch.setattr(Engine, "warm", held)
    async with (
        running_collector(kubernetes=False, interval=1.0) as (base, app),
        aiohttp.ClientSession(base) as http,
    ):
        pod_history(app[STORE])
        yield app, http, compiled


async def test_the_first_readers_pages_are_made_once_ready_and_found_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reports, charts = [0], [0]
    report, chart = Chargeback.report, Trend._query

    async def counted_report(self: Chargeback, *args: object) -> object:
        reports[0] += 1
        return await report(self, *args)  # type: ignore[arg-type]

    async def counted_chart(self: Trend, *args: object) -> object:
        charts[0] += 1
        return await chart(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(Chargeback, "report", counted_report)
    monkeypatch.setattr(Trend, "_query", counted_chart)
    async with collector(monkeypatch) as (app, http, compiled):
        async with http.get("/readyz") as resp:
            assert resp.status == 503  # the engine is compiling: nothing is made yet
        assert not app[PRIMED].is_set()
        assert (reports[0], charts[0]) == (0, 0)

        compiled.set()
        await eventually(lambda: holds(app[PRIMED].is_set()), what="the first readers' pages")
        async with http.get("/readyz") as resp:
            assert resp.status == 200
        assert (reports[0], charts[0]) == (1, 1)

        async with http.get("/namespaces") as resp:
            page = await resp.text()
            assert resp.status == 200, page
        assert "ns-a" in page
        async with http.get("/") as resp:
            assert resp.status == 200
        assert (reports[0], charts[0]) == (1, 1), "the first reader waited for none of it"
        assert app[ENGINE].evaluating == 0


async def test_a_report_that_cannot_be_made_is_made_at_its_first_read(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    report = Chargeback.report
    failing = [True]

    async def unavailable(self: Chargeback, *args: object) -> object:
        if failing[0]:
            raise ApiError(429, "unavailable", "too many queries")
        return await report(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(Chargeback, "report", unavailable)
    async with collector(monkeypatch) as (app, http, compiled):
        compiled.set()
        await eventually(lambda: holds(app[PRIMED].is_set()), what="the first readers' pages")
        assert "made at their first read: too many queries" in caplog.text
        assert not app[ENGINE].evaluating
        failing[0] = False
        async with http.get("/namespaces") as resp:
            page = await resp.text()
            assert resp.status == 200, page
        assert "ns-a" in page
        async with http.get("/healthz") as resp:
            assert resp.status == 200, "a failed first report is no failed task"
