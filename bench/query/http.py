"""HTTP for the query bench: the client process, and the app served here while it times."""

from __future__ import annotations

import asyncio
import gc
import http.client
import importlib
import itertools
import json
import os
import socket
import time
import urllib.parse
from pathlib import Path
from typing import Any

from aiohttp import web

from bench.kit.cluster import ROOT
from bench.kit.processes import cpu_seconds
from bench.query.budget import Budget, summary
from bench.query.dashboard import range_path
from bench.query.setup import CLIENT_TIMEOUT, HELPER, HTTP_TIMEOUT, PREFIX
from collector.app import SETTINGS, STORE

QUIET_WINDOW_S = 0.2
QUIET_CPU_S = 0.02
"""The servers are quiet once they used at most this much CPU over :data:`QUIET_WINDOW_S`
together (``/proc`` counts in 10 ms ticks)."""
QUIET_WAIT_S = 10.0
"""The longest wait for quiet before a request is sent anyway."""


def settle(pids: list[int]) -> float:
    """Wait until the processes ``pids`` are quiet (at most :data:`QUIET_WAIT_S`); the wait.

    Why: the peers share two cores, and each goes on working after a large
    answer (Go's garbage collector in Prometheus, our heap task), which would
    land in the timing of whichever request comes next.
    """
    began = time.perf_counter()
    before = sum(map(cpu_seconds, pids))
    while time.perf_counter() - began < QUIET_WAIT_S:
        time.sleep(QUIET_WINDOW_S)
        now = sum(map(cpu_seconds, pids))
        if now - before <= QUIET_CPU_S:
            break
        before = now
    return time.perf_counter() - began


def client(spec: dict[str, Any]) -> dict[str, Any]:
    """Time ``spec["targets"]`` (``[name, base, path]``, and a cap on repeats if a fourth),
    interleaved, one connection each, each request sent once the servers ``spec["pids"]``
    are quiet (:func:`settle`).

    Each target is asked once first (reported apart), then in rounds while
    ``spec["budget"]`` (:class:`Budget` fields) allows. The last body of each
    target is written to ``spec["out"]/<name>.json``.
    """
    budget = Budget(**spec["budget"])
    conns: dict[str, http.client.HTTPConnection] = {}
    times: dict[str, list[float]] = {name: [] for name, *_ in spec["targets"]}
    first: dict[str, float] = {}
    last: dict[str, tuple[int, bytes]] = {}
    given_up: set[str] = set()
    try:
        for r in itertools.count():
            due = [
                (name, base, path)
                for name, base, path, *cap in spec["targets"]
                if name not in given_up
                and (
                    r == 0
                    or (
                        budget.more(len(times[name]), sum(times[name]))
                        and len(times[name]) < min(cap, default=budget.repeats)
                    )
                )
            ]
            if not due:
                break
            for name, base, path in due:
                conn = conns.get(name)
                if conn is None:
                    url = urllib.parse.urlsplit(base)
                    conn = http.client.HTTPConnection(
                        url.hostname or "127.0.0.1", url.port, timeout=HTTP_TIMEOUT
                    )
                    conns[name] = conn
                settle(spec.get("pids", []))
                t0 = time.perf_counter()
                status, body = _get(conn, path)
                elapsed = time.perf_counter() - t0
                if r == 0:
                    first[name] = elapsed
                else:
                    times[name].append(elapsed)
                last[name] = (status, body)
                if not status:  # timed out: counted once at its full time, then not asked again
                    conns.pop(name).close()
                    given_up.add(name)
    finally:
        for conn in conns.values():
            conn.close()
    out = {}
    for name, seconds in times.items():
        status, body = last[name]
        Path(spec["out"], f"{name}.json").write_bytes(body)
        out[name] = {**summary(seconds, first[name]), "status": status, "bytes": len(body)}
    return out


def _get(conn: http.client.HTTPConnection, path: str) -> tuple[int, bytes]:
    """Status and body of ``GET path``; status 0 when it took longer than :data:`HTTP_TIMEOUT`."""
    try:
        conn.request("GET", path, headers={"Accept-Encoding": "identity"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    except TimeoutError:
        return 0, b'{"status":"error","errorType":"timeout","error":"no answer in time"}'


def rest_routes(app: web.Application) -> str:
    """How ``GET /api/v1/nodes`` is served: by build_app, by this bench, or not at all."""
    if any(r.canonical == "/api/v1/nodes" for r in app.router.resources()):
        return "build_app"
    try:
        rest: Any = importlib.import_module("collector.web.rest.handlers")
        api = rest.RestApi(STORE, app[SETTINGS].interval)
        app.router.add_routes(api.routes())
        app.cleanup_ctx.append(api.warming)
    except Exception as exc:
        return f"not present ({type(exc).__name__}: {exc})"
    return "mounted by the bench (build_app does not mount it yet)"


Window = tuple[str, float, float, float]
"""A range query and its start, end and step."""


def time_ranges(
    app: web.Application,
    sock: socket.socket,
    peer: tuple[str, int],
    windows: dict[str, Window],
    budget: Budget,
    folder: str,
    paths: dict[str, str] | None = None,
) -> tuple[dict[str, Any], dict[str, tuple[bytes, bytes]]]:
    """Time every range query of ``windows`` over HTTP on ``app`` (served on ``sock``) and on
    Prometheus (``peer``: its base URL and pid), requests interleaved, each sent once both
    are quiet: the client's times by ``ours_<name>`` and ``prometheus_<name>``, and each
    name's last bodies, ours and Prometheus'. ``paths``: more requests by name, each a
    path under both APIs' prefix (timed alike; their bodies are not returned)."""
    port = sock.getsockname()[1]
    peers = {"ours": (f"http://127.0.0.1:{port}", PREFIX), "prometheus": (peer[0], "/api/v1")}
    targets = [
        [f"{who}_{name}", base, range_path(prefix, q, start, end, step)]
        for name, (q, start, end, step) in windows.items()
        for who, (base, prefix) in peers.items()
    ]
    targets += [
        [f"{who}_{name}", base, prefix + path]
        for name, path in (paths or {}).items()
        for who, (base, prefix) in peers.items()
    ]
    spec = {
        "targets": targets,
        "budget": {"repeats": budget.repeats, "seconds": budget.seconds, "least": budget.least},
        "out": folder,
        "pids": [os.getpid(), peer[1]],
    }
    gc.collect()
    times, _ = asyncio.run(serve_and_time(app, spec, sock))
    read = {
        who: {n: Path(folder, f"{who}_{n}.json").read_bytes() for n in windows} for who in peers
    }
    return times, {name: (read["ours"][name], read["prometheus"][name]) for name in windows}


async def serve_and_time(
    app: web.Application, spec: dict[str, Any], sock: socket.socket
) -> tuple[dict[str, Any], str]:
    """Serve ``app`` on ``sock`` (bound) while the client process times ``spec``."""
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    try:
        await web.SockSite(runner, sock).start()
        process = await asyncio.create_subprocess_exec(
            *HELPER,
            "client",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=ROOT,
        )
        try:
            out, err = await asyncio.wait_for(
                process.communicate(json.dumps(spec).encode()), CLIENT_TIMEOUT
            )
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        if process.returncode != 0:
            raise RuntimeError(f"the client failed: {err.decode(errors='replace')[-2000:]}")
        return json.loads(out), err.decode(errors="replace")
    finally:
        await runner.cleanup()
