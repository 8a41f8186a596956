"""Liveness and readiness."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from core.tasks import Supervisor


def routes(
    ready: Callable[[web.Application], str | None], tasks: web.AppKey[Supervisor]
) -> list[web.RouteDef]:
    """``/healthz`` and ``/readyz``.

    ``/healthz`` answers 200 while no task of ``app[tasks]`` is dead, else 503
    naming each; ``/readyz`` answers 200 once ``ready(app)`` says nothing is
    missing. A dead task (one that crashed past its restarts, or ended) fails
    both: the process no longer does all its work, and a restart would fix it.
    """

    def dead(request: web.Request) -> str | None:
        names = request.app[tasks].dead()
        return ", ".join(names) if names else None

    async def healthz(request: web.Request) -> web.Response:
        gone = dead(request)
        if gone:
            return web.Response(status=503, text=f"dead: {gone}\n")
        return web.Response(text="ok\n")

    async def readyz(request: web.Request) -> web.Response:
        gone = dead(request)
        if gone:
            return web.Response(status=503, text=f"not ready: dead: {gone}\n")
        missing = ready(request.app)
        if missing:
            return web.Response(status=503, text=f"not ready: {missing}\n")
        return web.Response(text="ready\n")

    return [web.get("/healthz", healthz), web.get("/readyz", readyz)]
