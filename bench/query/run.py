"""The query surfaces over one hour of a 1,000-node cluster: PromQL in process and over HTTP, REST.

Why: Grafana's panels ask the collector for ``sum by (node) (...)`` now and over
the last hour; a panel should answer within 100 ms (instant) and 1 s (range),
and the REST node list within 50 ms, with the history costing at most 10 bytes
per kept point.

Setup: the simulated cluster of :mod:`bench.kit.cluster` (``build_cluster(1000,
seed=1, flavours=("hami",))``, ~249k series) over the last hour at 60 s
resolution: 61 scrape rounds, too slow to get by scraping, so the store of the
real application (``build_app``) is filled directly, as the scrape stage does
it: one :class:`Normaliser` per node and ``store.put(source, batch, at,
sampled=t)`` for every round, each node at its own offset within the step (as
a scrape loop spreads its targets; :func:`bench.query.fill.fill`). Rendering the bodies (``node.step(t)``,
``node.exposition(t)``) is the simulator's cost, not the collector's: it runs in
:data:`RENDERERS` helper processes (``python -m bench.query.run render ...``, each
building the same cluster and rendering its share of the nodes), ahead of the
normalising, so the fill's wall time is mostly the collector's work; the
normalise and put seconds are reported on their own. The app's history keeps
2 h (the fill's oldest point must not be trimmed while it is queried); the
store's staleness is a day.

The history's bytes per kept point are measured twice: by tracemalloc, while a
fresh :class:`History` is fed the batches the first :data:`TRACE_NODES` nodes
put during the fill (the goal's figure), and by walking every object the full
history holds (``sys.getsizeof``; series keys, shared with the store's latest
batches while a series lives, are reported apart).

The peer (below) is filled next, before anything is timed, so every timing
sees the same two processes: reading the history for it parses every series'
labels, which the history otherwise does the first time a query needs them
(the first instant query after the fill, before that, is reported apart).
Then each surface is timed: one first run (reported apart), then up to
:data:`REPEATS` runs, fewer once the surface has spent :data:`BUDGET_S` seconds
(at least :data:`MIN_REPEATS`): ``instant_query`` and ``range_query`` (last
hour, step 60 s) in this process; the same two through
``/prometheus/api/v1/query`` and ``/query_range`` of the real app served on
127.0.0.1; ``GET /api/v1/nodes`` of the REST API. HTTP requests come from a
separate client process (``python -m bench.query.run client``: one keep-alive
connection per target, sequential, bodies read in full, no compression),
rounds interleaved with the peer's so both see the same load, each request
sent once both servers are quiet (``bench.query.http.settle``: Prometheus'
garbage collector goes on for a while after a large answer, and would
otherwise land in our next timing, or ours in its). p99 of 100 runs or fewer
is their maximum.

``--step 15`` fills the hour at 15 s instead (241 rounds); the headline range
query keeps its 60 s step. The goal's other instant queries (``topk(10, ...)``,
``count by (namespace) (...)``) are timed in process and over HTTP beside the
peer, and the dashboard is drawn over HTTP on both (:mod:`bench.query.dashboard`),
unless ``--no-dashboard`` is given.

Peer, same run: a real Prometheus 2.42 holding the same samples: every point
of the filled history (same series, timestamps and values), staleness markers
included. They are written through Prometheus' remote-write receiver (a
hand-encoded protobuf ``WriteRequest``, snappy-framed as literals), not
``promtool tsdb create-blocks-from openmetrics``: OpenMetrics cannot carry
Prometheus' staleness marker (test_promql_vs_prometheus.py says so too), and
the simulator replaces ~4% of pods every minute, so the two would not answer
alike for the 5 minutes after each churn. The samples land in Prometheus'
head block, where a Prometheus that has run for an hour holds its last hour.
Its answers to both queries are checked against ours (label sets equal,
values within 1e-9 relative, timestamps equal).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.kit.processes import cpu_seconds, loopback_socket, memory_mib
from bench.query import dashboard
from bench.query.answers import agreement, from_json, from_ours
from bench.query.budget import Budget, timed
from bench.query.fill import fill, render
from bench.query.http import client, rest_routes, serve_and_time
from bench.query.peer import Prometheus, remote_write
from bench.query.setup import (
    DASHBOARD,
    GOAL_BYTES_PER_POINT,
    GOAL_INSTANT_P99_MS,
    GOAL_RANGE_P99_MS,
    GOAL_RANGE_P99_VS_PROMETHEUS,
    GOAL_REST_P99_MS,
    HISTORY_MAX_POINTS,
    HISTORY_RETENTION,
    NODES,
    PREFIX,
    QUERY,
    SPAN,
    STALE_AFTER,
    STEP,
)
from bench.query.size import traced_bytes_per_point, walked_bytes
from collector.app import STORE, build_app
from collector.memory import heap, malloc
from collector.promql.query import instant_query, range_query
from collector.settings import CollectorSettings


def _query_path(prefix: str, kind: str, now: float, step: float) -> str:
    if kind == "instant":
        return dashboard.instant_path(prefix, QUERY, now)
    return dashboard.range_path(prefix, QUERY, now - SPAN, now, step)


def _ratio(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, float]:
    return {
        "p50": ours["p50_ms"] / theirs["p50_ms"] if theirs["p50_ms"] else math.inf,
        "p99": ours["p99_ms"] / theirs["p99_ms"] if theirs["p99_ms"] else math.inf,
    }


def run(
    budget: Budget | None = None, nodes: int = NODES, step: float = STEP, panels: bool = True
) -> dict[str, Any]:
    """Fill the app's store with an hour of the cluster, then time every query surface and the peer.

    ``budget`` bounds the timed runs of each surface (default :class:`Budget`); ``panels``
    False leaves the dashboard undrawn (at 15 s its raw-series panels answer ~300 MB each,
    which takes each peer minutes a draw).
    """
    budget = budget or Budget()
    rounds = int(SPAN // step) + 1
    malloc.set_policy()  # the memory policy the collector's command sets
    load_before = os.getloadavg()
    began = time.perf_counter()
    now = float(math.floor(time.time()))
    start = now - SPAN
    sock = loopback_socket()  # bound now, so the port stays ours until the app serves on it
    port = sock.getsockname()[1]
    settings = CollectorSettings(
        listen=f"127.0.0.1:{port}",
        kubernetes=False,
        stale_after=STALE_AFTER,
        history_retention=HISTORY_RETENTION,
        history_max_points=HISTORY_MAX_POINTS,
    )
    app = build_app(settings)
    store = app[STORE]
    history = store.history
    rest_how = rest_routes(app)

    phases: dict[str, float] = {}
    mark = time.perf_counter()

    def phase(name: str) -> None:
        nonlocal mark
        phases[name] = round(time.perf_counter() - mark, 1)
        mark = time.perf_counter()

    filled = fill(store, nodes, start, step, rounds)
    phase("fill")
    series = sum(len(v.series) for n in store.nodes() if (v := store.view(n)) is not None)
    traced = traced_bytes_per_point(filled.traced, start, step)
    filled.traced = []
    gc.collect()
    walk = walked_bytes(history)
    points = history.points
    phase("history_size")

    t0 = time.perf_counter()
    instant_query(QUERY, now, history)
    cold_instant_ms = (time.perf_counter() - t0) * 1e3

    with tempfile.TemporaryDirectory(prefix="bench-query-") as folder:
        prometheus = Prometheus(Path(folder))
        try:
            prometheus.wait_ready()
            t0 = time.perf_counter()
            # a node's first round lies up to a step before start (its offset)
            written = remote_write(prometheus.base, history, start - step, now)
            written["wall_s"] = time.perf_counter() - t0
            written["prometheus_rss_mib"] = memory_mib(prometheus.process.pid).get("VmRSS", 0.0)
            phase("prometheus_fill")

            heap.sweep()  # what the app's heap task does a minute after the fill
            malloc.for_queries()  # what the app does while it evaluates queries
            peer_cpu = cpu_seconds(prometheus.process.pid)
            instant, answer = timed(lambda: instant_query(QUERY, now, history), budget)
            ours_instant = from_ours(answer, now)
            ranged, answer = timed(lambda: range_query(QUERY, start, now, STEP, history), budget)
            ours_range = from_ours(answer, 0.0)
            del answer
            others = {
                name: timed(lambda q=q: instant_query(q, now, history), budget)[0]  # type: ignore[misc]
                for name, q in dashboard.INSTANT_GOALS.items()
            }
            written["prometheus_cpu_s_while_idle"] = cpu_seconds(prometheus.process.pid) - peer_cpu
            malloc.queries_done()
            phase("in_process")

            ours_base = f"http://127.0.0.1:{port}"
            targets = [
                ["ours_instant", ours_base, _query_path(PREFIX, "instant", now, STEP)],
                [
                    "prometheus_instant",
                    prometheus.base,
                    _query_path("/api/v1", "instant", now, STEP),
                ],
                ["ours_range", ours_base, _query_path(PREFIX, "range", now, STEP)],
                ["prometheus_range", prometheus.base, _query_path("/api/v1", "range", now, STEP)],
            ]
            peers = {"ours": (ours_base, PREFIX), "prometheus": (prometheus.base, "/api/v1")}
            targets += dashboard.instant_targets(peers, now)
            if panels:
                targets += dashboard.panel_targets(peers, DASHBOARD, now - SPAN, now, step)
            if not rest_how.startswith("not present"):
                targets.append(["rest_nodes", ours_base, "/api/v1/nodes"])
            spec: dict[str, Any] = {
                "targets": targets,
                "budget": asdict(budget),
                "out": folder,
                "pids": [os.getpid(), prometheus.process.pid],
            }
            gc.collect()
            http_times, _ = asyncio.run(serve_and_time(app, spec, sock))
            phase("http")
            bodies = {
                name: Path(folder, f"{name}.json").read_bytes() for name, *_ in spec["targets"]
            }
            written["prometheus_rss_mib_after_queries"] = memory_mib(prometheus.process.pid).get(
                "VmRSS", 0.0
            )
        finally:
            prometheus.close()

    theirs_instant = from_json(bodies["prometheus_instant"])
    theirs_range = from_json(bodies["prometheus_range"])
    checks = {
        "instant_in_process": agreement(theirs_instant, ours_instant),
        "range_in_process": agreement(theirs_range, ours_range),
        "instant_http": agreement(theirs_instant, from_json(bodies["ours_instant"])),
        "range_http": agreement(theirs_range, from_json(bodies["ours_range"])),
    }
    rest: dict[str, Any] | None = None
    if "rest_nodes" in http_times:
        rest = {**http_times["rest_nodes"], "served_by": rest_how}
        nodes_listed = json.loads(bodies["rest_nodes"])
        rest["nodes_listed"] = len(nodes_listed.get("nodes", nodes_listed.get("items", [])))
    peer_i, peer_r = http_times["prometheus_instant"], http_times["prometheus_range"]
    http_i, http_r = http_times["ours_instant"], http_times["ours_range"]
    bytes_per_point = traced["bytes_per_point"]
    agree = all(c["agree"] for c in checks.values())
    instant_goals = dashboard.instant_rows(http_times)
    surfaces = {
        "in_process_instant": (instant, peer_i),
        "in_process_range": (ranged, peer_r),
        "http_instant": (http_i, peer_i),
        "http_range": (http_r, peer_r),
    }
    for name, row in instant_goals.items():
        surfaces[f"in_process_{name}"] = (others[name], row["prometheus"])
        surfaces[f"http_{name}"] = (row["ours"], row["prometheus"])
    goals = p99_goals(surfaces)
    return {
        "nodes": nodes,
        "series": series,
        "rounds": rounds,
        "step_s": step,
        "query": QUERY,
        "budget": asdict(budget),
        "load_average_before": load_before,
        "fill": filled.figures(),
        "history_points": points,
        "history_tracemalloc": traced,
        "history_walk": {
            **walk,
            "bytes_per_point": walk["bytes"] / points if points else math.inf,
            "bytes_per_point_without_keys": (walk["bytes"] - walk["key_bytes"]) / points
            if points
            else math.inf,
        },
        "bytes_per_point": bytes_per_point,
        "in_process_cold_instant_ms": cold_instant_ms,
        "in_process_instant": instant,
        "in_process_range": ranged,
        "in_process_instant_goals": {"sum_by_node": instant, **others},
        "http_instant_goals": instant_goals,
        "dashboard": dashboard.drawn(http_times),
        "http_instant": http_i,
        "http_range": http_r,
        "rest_nodes": rest,
        "rest_served_by": rest_how,
        "peer_prometheus": {
            "remote_write": written,
            "instant": peer_i,
            "range": peer_r,
        },
        "ratio_in_process_vs_prometheus": {
            "instant": _ratio(instant, peer_i),
            "range": _ratio(ranged, peer_r),
        },
        "ratio_http_vs_prometheus": {
            "instant": _ratio(http_i, peer_i),
            "range": _ratio(http_r, peer_r),
        },
        "agreement": checks,
        "answers_agree": agree,
        "goal_instant_p99_ms": GOAL_INSTANT_P99_MS,
        "goal_range_p99_ms": GOAL_RANGE_P99_MS,
        "goal_range_p99_vs_prometheus": GOAL_RANGE_P99_VS_PROMETHEUS,
        "goal_rest_p99_ms": GOAL_REST_P99_MS,
        "goal_bytes_per_point": GOAL_BYTES_PER_POINT,
        "wall_s": time.perf_counter() - began,
        "phases_s": phases,
        "p99_goals": goals,
        "meets_goal": all(g["met"] for g in goals.values())
        and (rest is not None and rest["p99_ms"] <= GOAL_REST_P99_MS)
        and bytes_per_point <= GOAL_BYTES_PER_POINT
        and agree,
    }


def p99_goals(surfaces: dict[str, tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, Any]:
    """Each surface's p99 (``name: (ours, Prometheus')``) beside its goal and Prometheus' p99.

    A ``*_range`` surface meets its goal at p99 <= :data:`GOAL_RANGE_P99_MS` and
    <= :data:`GOAL_RANGE_P99_VS_PROMETHEUS` x Prometheus' p99; any other (an
    instant query) at p99 <= :data:`GOAL_INSTANT_P99_MS`.
    """
    out = {}
    for name, (ours, theirs) in surfaces.items():
        ranged = name.endswith("_range")
        ratio = ours["p99_ms"] / theirs["p99_ms"] if theirs["p99_ms"] else math.inf
        goal = GOAL_RANGE_P99_MS if ranged else GOAL_INSTANT_P99_MS
        out[name] = {
            "p99_ms": ours["p99_ms"],
            "prometheus_p99_ms": theirs["p99_ms"],
            "ratio_p99": ratio,
            "goal_p99_ms": goal,
            "goal_ratio_p99": GOAL_RANGE_P99_VS_PROMETHEUS if ranged else None,
            "met": ours["p99_ms"] <= goal and (not ranged or ratio <= GOAL_RANGE_P99_VS_PROMETHEUS),
        }
    return out


def _verdict(goal: dict[str, Any]) -> str:
    """``goal`` (one of :func:`p99_goals`) as the report prints it."""
    ratio = goal["goal_ratio_p99"]
    limit = f"p99 <= {goal['goal_p99_ms']:,.0f} ms" + (
        f" and <= {ratio:g}x Prometheus'" if ratio is not None else ""
    )
    return (
        f"p99 {goal['ratio_p99']:.2f}x Prometheus' {goal['prometheus_p99_ms']:.1f} ms; "
        f"goal {limit}: {'met' if goal['met'] else 'NO'}"
    )


def summary_lines(result: dict[str, Any]) -> Iterator[str]:
    f, w = result["fill"], result["peer_prometheus"]["remote_write"]
    yield (
        f"fill: {result['nodes']} nodes x {result['rounds']} rounds, {result['series']:,} series, "
        f"{result['history_points']:,} points in {f['wall_s']:.1f} s "
        f"(normalise {f['normalise_s']:.1f} s, put {f['put_s']:.1f} s)"
    )
    yield (
        f"history bytes/point: tracemalloc {result['history_tracemalloc']['bytes_per_point']:.1f}, "
        f"walk {result['history_walk']['bytes_per_point']:.1f} "
        f"({result['history_walk']['bytes_per_point_without_keys']:.1f} without keys)"
    )
    for name in ("in_process_instant", "in_process_range", "http_instant", "http_range"):
        r = result[name]
        yield (
            f"{name}: p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms "
            f"(n={r['repeats']}), first {r['first_ms']:.1f} ms; "
            f"{_verdict(result['p99_goals'][name])}"
        )
    for name in ("instant", "range"):
        r = result["peer_prometheus"][name]
        yield f"prometheus {name}: p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms"
    for name in result["http_instant_goals"]:
        for where in ("in_process", "http"):
            goal = result["p99_goals"][f"{where}_{name}"]
            yield f"{where} {name}: p99 {goal['p99_ms']:.1f} ms; {_verdict(goal)}"
    dash = result["dashboard"]
    if not dash["ours"]["requests"]:
        yield "dashboard: not drawn (--no-dashboard)"
    else:
        yield (
            f"dashboard ({dash['ours']['requests']} requests): ours {dash['ours']['p50_ms']:.0f} ms, "
            f"prometheus {dash['prometheus']['p50_ms']:.0f} ms per draw (median of "
            f"{dash['ours']['rounds']}), {dash['ratio_p50']:.2f}x"
        )
    rest = result["rest_nodes"]
    yield (
        f"rest /api/v1/nodes: p50 {rest['p50_ms']:.1f} ms, p99 {rest['p99_ms']:.1f} ms "
        f"({rest['served_by']})"
        if rest
        else f"rest: {result['rest_served_by']}"
    )
    yield f"prometheus remote write: {w['samples']:,} samples in {w['wall_s']:.1f} s"
    yield f"answers agree: {result['answers_agree']}; meets goal: {result['meets_goal']}"
    yield f"phases (s): {result['phases_s']}, wall {result['wall_s']:.0f} s"


def main(argv: list[str]) -> None:
    """This bench's helper processes: ``render`` a slice of the nodes, or the HTTP ``client``."""
    cli = argparse.ArgumentParser(prog="python -m bench.query.run")
    helpers = cli.add_subparsers(dest="helper", required=True)
    one = helpers.add_parser("render")
    for name, kind in (
        ("nodes", int),
        ("first", int),
        ("last", int),
        ("start", float),
        ("rounds", int),
        ("step", float),
    ):
        one.add_argument(name, type=kind)
    helpers.add_parser("client")
    a = cli.parse_args(argv)
    if a.helper == "render":
        render(a.nodes, a.first, a.last, a.start, a.rounds, a.step)
    else:
        print(json.dumps(client(json.load(sys.stdin))))


if __name__ == "__main__":
    main(sys.argv[1:])
