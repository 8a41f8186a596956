"""Liveness and readiness."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web


def routes(ready: Callable[[], str | None]) -> list[web.RouteDef]:
    """``/healthz`` answers while the process serves; ``/readyz`` once ``ready()`` says nothing is missing."""

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(request: web.Request) -> web.Response:
        missing = ready()
        if missing:
            return web.Response(status=503, text=f"not ready: {missing}\n")
        return web.Response(text="ready\n")

    return [web.get("/healthz", healthz), web.get("/readyz", readyz)]
