"""The scrapes in flight at once are bounded over every target, and every target still gets its turn."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from aiohttp import web
from helpers import eventually, holds, running_collector

from collector.sources import scrape

TARGETS = 6
BOUND = 2


async def test_scrapes_in_flight_stay_within_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scrape, "IN_FLIGHT", BOUND)
    state = {"now": 0, "most": 0}
    served: set[int] = set()

    async def stalled(request: web.Request) -> web.Response:
        # a monitor that never answers in time: each scrape holds its slot until the timeout
        state["now"] += 1
        state["most"] = max(state["most"], state["now"])
        assert request.transport is not None
        served.add(request.transport.get_extra_info("sockname")[1])
        try:
            await asyncio.sleep(5)
        finally:
            state["now"] -= 1
        return web.Response(text="")

    app = web.Application()
    app.router.add_get("/metrics", stalled)
    # handler_cancellation: a request the collector gave up on leaves the count at once
    runner = web.AppRunner(
        app, handle_signals=False, access_log=None, shutdown_timeout=0.5, handler_cancellation=True
    )
    await runner.setup()
    try:
        sites = [web.TCPSite(runner, "127.0.0.1", 0) for _ in range(TARGETS)]
        for site in sites:
            await site.start()
        ports = [address[1] for address in runner.addresses]
        groups = [
            {"targets": [f"127.0.0.1:{port}"], "labels": {"node": f"n{i}", "flavour": "hami"}}
            for i, port in enumerate(ports)
        ]
        targets = tmp_path / "targets.json"
        targets.write_text(json.dumps(groups))
        async with running_collector(kubernetes=False, targets_file=targets, interval=1, timeout=1):
            await eventually(lambda: holds(len(served) == TARGETS), 20, "every target scraped")
    finally:
        await runner.cleanup()
    assert state["most"] == BOUND
