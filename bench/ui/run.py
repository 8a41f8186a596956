"""Every view for people at 5,000 nodes: server time per page, beside REST's ``/api/v1/nodes``.

Why: a page must answer in at most 100 ms however large the cluster (the
overview aggregates, the lists page 100 rows). Setup: the real app
(``build_app``) on 127.0.0.1, its store filled with :data:`NODES` HAMI nodes
(the query bench's cluster, ``bench.query.fill``: ~249 series a node,
:data:`ROUNDS` rounds 15 s apart in the history). Each view of :data:`VIEWS`
is timed two ways after one untimed request (which builds the REST read model
of every node and starts the overview's chart): in process, the route's
handler called on a mocked request (what the server does for the page,
rendering included), and over HTTP from a client process of its own
(``bench.ui.client``). The REST figure is measured the same way in the same
run. The figures are taken in steady state (``bench.ui.churn``): every node's
source sends a new batch every :data:`STEP` seconds, spread over the interval
as scrapes are, so every node's read model goes out of date once an interval
and the REST cache's warming must keep pace; timing starts after one whole
round. In process, requests come :data:`GAP_S` apart (a handler called in a
loop would never yield to the store's feed or the warming). Beside them: what
rebuilding every node's read model costs after a round (``NodeCache.all`` on a
cache of its own), and the process's CPU share while the views were timed.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import sys
import time
from typing import Any

from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from bench.kit.cluster import ROOT
from bench.kit.table import Row, mark, table, write_result
from bench.kit.timing import median, percentile, settle
from bench.query.fill import fill
from bench.query.setup import HISTORY_MAX_POINTS, STALE_AFTER
from bench.ui.churn import Churn
from collector.app import ENGINE, STORE, build_app
from collector.settings import CollectorSettings
from collector.views.cache import NodeCache
from collector.web.ui.trend import POINTS, SPAN, Trend

NODES = 5000
ROUNDS = 5
STEP = 15.0
REPEATS = 50
GOAL_MS = 100.0
GAP_S = 0.05
"""Between two in-process requests: the event loop's turns for the feed and the warming."""

VIEWS: tuple[tuple[str, str], ...] = (
    ("overview", "/"),
    ("overview, tiles page 3", "/?page=3"),
    ("nodes, 100 a page", "/nodes"),
    ("nodes by memory used", "/nodes?sort=-memory_used_bytes"),
    ("a node's cards and pods", "/nodes/{node}"),
    ("workloads, 100 a page", "/workloads"),
    ("workloads by memory used", "/workloads?sort=-memory_used_bytes"),
    ("workloads of a namespace", "/workloads?namespace={namespace}"),
    ("a pod with its charts", "/workloads/{namespace}/{pod}"),
    ("namespaces, the last 15 minutes", "/namespaces?window=15m"),
)
"""(name, path) of every view timed, one line each; ``{node}``, ``{namespace}`` and ``{pod}``
are a node and a pod of the filled cluster."""
REST = ("REST nodes, 100 a page", "/api/v1/nodes?limit=100")
"""The peer: what a REST client asks for one page of nodes."""


async def measure(nodes: int = NODES, repeats: int = REPEATS) -> dict[str, Any]:
    """Fill a collector, then time every view and the REST peer, in process and over HTTP."""
    settings = CollectorSettings(
        listen="127.0.0.1:0",
        kubernetes=False,
        stale_after=STALE_AFTER,
        history_retention=2 * 3600.0,
        history_max_points=HISTORY_MAX_POINTS,
    )
    app = build_app(settings)
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        now = float(math.floor(time.time()))
        filled = fill(app[STORE], nodes, now - (ROUNDS - 1) * STEP, STEP, ROUNDS, traced=0)
        names = await _names(app)
        views = [(name, path.format(**names)) for name, path in (*VIEWS, REST)]
        for _, path in views:  # untimed: builds the read model, starts the chart's top-up
            await _handle(app, path)
        await _charted(app)
        settle()
        churn = Churn(app[STORE], STEP)
        feed = asyncio.create_task(churn.run())
        try:
            await churn.rounds(1)  # steady state: every node changed since the untimed reads
            in_process, over_http = {}, {}
            cpu, wall, put_s = time.process_time(), time.perf_counter(), churn.put_s
            for _, path in views:
                await _quiet()
                in_process[path] = await _in_process(app, path, repeats)
            for _, path in views:
                await _quiet()
                over_http.update(await _over_http(f"http://{host}:{port}", repeats, [path]))
            timed_s = time.perf_counter() - wall
            steady = {
                "interval_s": STEP,
                "timed_s": timed_s,
                "process_cpu_share": (time.process_time() - cpu) / timed_s,
                "feed_share": (churn.put_s - put_s) / timed_s,
                **await _rebuild(app, churn),
            }
        finally:
            feed.cancel()
        top_up = await _top_up(app, settings, now)
    finally:
        await runner.cleanup()
    return {
        "nodes": nodes,
        "rounds": ROUNDS,
        "steady": steady,
        "chart_top_up": top_up,
        "series": filled.samples // max(1, filled.rounds),
        "repeats": repeats,
        "views": [
            {
                "name": name,
                "path": path,
                "in_process": _figures(in_process[path]),
                "http": _figures(over_http[path]),
            }
            for name, path in views
        ],
    }


async def _rebuild(app: web.Application, churn: Churn) -> dict[str, float]:
    """CPU to rebuild every node's read model once a round has changed them all, as a
    request would with no warming (a cache of its own, its shapes made a round before)."""
    cache = NodeCache()
    cache.all(app[STORE])
    await churn.rounds(1)
    cpu = time.process_time()
    count = len(cache.all(app[STORE]))
    spent = time.process_time() - cpu
    return {"rebuild_all_cpu_ms": spent * 1e3, "rebuild_per_node_us": spent / count * 1e6}


async def _quiet() -> None:
    """Wait until no view's background work runs (the overview's chart top-up, a report
    the namespaces view computes ahead): it would take the timed requests' turns, and is
    measured apart (:func:`_top_up`)."""
    for _ in range(1200):
        if not any(_of_views(task) for task in asyncio.all_tasks()):
            return
        await asyncio.sleep(0.1)
    raise RuntimeError("the views' background work never ended")


def _of_views(task: asyncio.Task[Any]) -> bool:
    code = getattr(task.get_coro(), "cr_code", None)
    return code is not None and "/collector/web/ui/" in code.co_filename


async def _top_up(
    app: web.Application, settings: CollectorSettings, now: float
) -> dict[str, float]:
    """What the overview's chart costs in the background: its first top-up (the hour) and a
    steady one (an interval later: a step and the newest interval's point), CPU and wall."""
    clock = [now]
    trend = Trend(app[ENGINE], settings.interval, clock=lambda: clock[0])
    found = {}
    for name in ("first", "steady"):
        await _quiet()
        cpu, wall = time.process_time(), time.perf_counter()
        await trend.refresh(None)
        found[f"{name}_cpu_ms"] = (time.process_time() - cpu) * 1e3
        found[f"{name}_wall_ms"] = (time.perf_counter() - wall) * 1e3
        clock[0] += max(settings.interval, SPAN / POINTS)
    return found


async def _charted(app: web.Application) -> None:
    """Wait for the overview's chart: its first top-up (the hour) reads the history in a
    thread, which would take the timed requests' turns."""
    for _ in range(600):
        body = (await _handle(app, "/")).text or ""
        if any(int(n) > 1 for n in re.findall(r"(\d+) points from", body)):
            return  # the history's steps, not only the page's point of now
        await asyncio.sleep(0.5)
    raise RuntimeError("the overview's chart never had the history")


async def _names(app: web.Application) -> dict[str, str]:
    body = json.loads((await _handle(app, "/api/v1/pods?limit=1")).body or b"{}")  # type: ignore[arg-type]
    row = body["containers"][0]
    return {"node": row["node"], "namespace": row["namespace"], "pod": row["pod"]}


async def _handle(app: web.Application, path: str) -> web.Response:
    """``path``'s route called as the server calls it, middlewares aside."""
    probe = make_mocked_request("GET", path, app=app)
    match = await app.router.resolve(probe)
    request = make_mocked_request("GET", path, app=app, match_info=dict(match))
    response = await match.handler(request)
    if not isinstance(response, web.Response) or response.status != 200:
        raise RuntimeError(f"GET {path}: {getattr(response, 'status', response)}")
    return response


async def _in_process(app: web.Application, path: str, repeats: int) -> list[float]:
    found = []
    for _ in range(repeats):
        await asyncio.sleep(GAP_S)
        began = time.perf_counter()
        await _handle(app, path)
        found.append(time.perf_counter() - began)
    return found


async def _over_http(base: str, repeats: int, paths: list[str]) -> dict[str, list[float]]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.ui.client",
        base,
        str(repeats),
        *paths,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"the HTTP client failed ({process.returncode})")
    found: dict[str, list[float]] = json.loads(out)
    return found


def _figures(seconds: list[float]) -> dict[str, float]:
    return {
        "p50_ms": median(seconds) * 1e3,
        "p99_ms": percentile(seconds, 99) * 1e3,
        "max_ms": max(seconds) * 1e3,
        "slowest_at": seconds.index(max(seconds)),
    }


def rows(r: dict[str, Any]) -> list[Row]:
    """One row per view: in process and HTTP p50 / p99, against the goal, REST beside it."""
    rest = r["views"][-1]
    peer = f"{rest['http']['p50_ms']:.1f} / {rest['http']['p99_ms']:.1f} ms"
    out = []
    for view in r["views"]:
        p, h = view["in_process"], view["http"]
        out.append(
            Row(
                f"{view['name']} `GET {view['path']}` at {r['nodes']:,} nodes:"
                " in process / HTTP, p50 / p99",
                f"{p['p50_ms']:.1f} / {p['p99_ms']:.1f} ms; {h['p50_ms']:.1f} / {h['p99_ms']:.1f} ms",
                f"p99 <= {GOAL_MS:.0f} ms",
                f"REST HTTP {peer}",
                f"{h['p50_ms'] / rest['http']['p50_ms']:.1f}x",
                mark(h["p99_ms"] <= GOAL_MS),
            )
        )
    return out


def top_up_row(r: dict[str, Any]) -> Row:
    """The overview chart's background top-up, beside the goal a request has."""
    t = r["chart_top_up"]
    return Row(
        f"overview chart's top-up in the background at {r['nodes']:,} nodes: steady"
        " (one step, every 30 s or interval while read) / first (the hour), CPU",
        f"{t['steady_cpu_ms']:.0f} ms / {t['first_cpu_ms']:.0f} ms",
        "-",
        "-",
        "-",
        "-",
    )


def steady_row(r: dict[str, Any]) -> Row:
    """What the steady state costs: a whole rebuild (what warming spares a request), the
    process's CPU while the views were timed, and the feed's part of it."""
    s = r["steady"]
    return Row(
        f"steady state at {r['nodes']:,} nodes (each node a new batch every"
        f" {s['interval_s']:.0f} s): rebuilding every node's read model after a round,"
        " without warming / a node; process CPU while timed (the feed's part)",
        f"{s['rebuild_all_cpu_ms']:.0f} ms / {s['rebuild_per_node_us']:.0f} us;"
        f" {s['process_cpu_share']:.0%} of a core ({s['feed_share']:.0%})",
        "-",
        "-",
        "-",
        "-",
    )


def markdown(r: dict[str, Any]) -> str:
    """``ui.md``: the table and what it measured."""
    return (
        f"# The views for people at {r['nodes']:,} nodes\n\n"
        f"{r['date']}, {r['nodes']:,} nodes (~{r['series']:,} series), {r['rounds']} rounds of"
        f" history 15 s apart, {r['repeats']} timed requests per view and way.\n"
        "Produced by `python -m bench ui` (`bench/ui/run.py`). In process: the route's handler"
        " on a mocked request (read model, aggregation, rendering); HTTP: from a client process"
        " of its own over loopback. The ratio is the view's HTTP p50 over REST's.\n\n"
        "Steady state: every node's source sends a new batch every"
        f" {r['steady']['interval_s']:.0f} s, spread over the interval as scrapes are"
        " (`bench/ui/churn.py`), so every node's read model goes out of date once an"
        " interval while the views are timed; timing starts a whole round after the untimed"
        f" reads. In process, requests come {GAP_S * 1e3:.0f} ms apart (the feed's and the"
        " warming's turns). Each view is timed once the views' background work (the"
        " overview chart's top-up, a report the namespaces view computes ahead) has ended;"
        " the top-up's own cost is its row below. `ui.json` names where each view's slowest"
        " request fell (`slowest_at`; 0: the first, when the view's own per-node figures are"
        " a round out of date).\n\n"
        f"{table([*rows(r), steady_row(r), top_up_row(r)])}\n"
    )


def run() -> dict[str, Any]:
    """Every view's server time at :data:`NODES` nodes; writes ``bench/results/ui.*``."""
    result = asyncio.run(measure())
    result["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    write_result("ui", markdown(result), result)
    return result
