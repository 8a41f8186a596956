"""Small queries at fine steps: a history scraped every 2 s, the last minutes at step 1 s, beside
Prometheus 2.42 in the same run.

Why: the small-query bench (:mod:`bench.query.small`) asks for an hour at step
60 s, over data filled at 60 s. A new user's first dashboard looks otherwise:
80 nodes scraped every 2 s, the last 1-5 minutes at step 1 s, host-level
series (tens to hundreds) as well as container-level ones (thousands), and
Grafana's own step for an hour's panel 1,000 pixels wide (3.6 s, which
Grafana's ``roundInterval`` makes 5 s). There a fixed cost per query shows.
Goal: every query here <= 1.0x Prometheus at 80 nodes (p99), the median of the
p50 ratios <= 0.5x.

Setup: :func:`bench.query.fill.fill` puts :data:`SPAN` seconds of the simulated
cluster at :data:`SCRAPE` s (each node at its own offset, as spread scrapes
are) through normalise and the store, as scrapes do; the same samples go to a
real Prometheus by remote write. Each query is timed in process through the
collector's one engine (admission, the worker thread, its reads on the loop,
the JSON body: all a request does but the socket) and over HTTP on both peers
(requests interleaved, each sent once both servers are quiet). Answers are
checked against Prometheus'.

``python -m bench.query.fine [--nodes 80] [--span 3600] [--only NAME,...] [--save]``;
``--save`` writes ``bench/results/query_fine.{json,md}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.kit.cluster import ROOT
from bench.kit.processes import cpu_seconds, loopback_socket
from bench.query.answers import agreement, from_json
from bench.query.budget import Budget, summary
from bench.query.dashboard import range_path
from bench.query.fill import fill
from bench.query.http import QUIET_CPU_S, time_ranges
from bench.query.peer import Prometheus, remote_write
from bench.query.setup import STALE_AFTER
from collector.app import STORE, build_app
from collector.memory import heap, malloc
from collector.promql.engine import Engine, Queries
from collector.settings import CollectorSettings
from collector.web.promjson import matrix_body

NODES = 80
SCRAPE = 2.0
"""Seconds between a node's two points: a live scrape every 2 s."""
SPAN = 3600.0
"""Seconds of history: the hour a Grafana panel shows by default."""
PANEL_STEP = 5.0
"""Grafana's step for an hour's panel 1,000 px wide: 3,600 s / 1,000 = 3.6 s, which its
``roundInterval`` (``@grafana/data`` rangeutil) rounds to 5 s."""
C = "hami_container_device_utilization_ratio"
H = "hami_host_gpu_utilization_ratio"
M = "hami_host_gpu_memory_used_bytes"
QUERIES: dict[str, tuple[str, float, float]] = {
    "rate_containers_1m": (f"rate({C}[1m])", 60.0, 1.0),
    "avg_over_time_cards_1m": (f"avg_over_time({H}[30s])", 60.0, 1.0),
    "bottomk_cards_1m": (f"bottomk(5, {H})", 60.0, 1.0),
    "topk_containers_1m": (f"topk(5, {C})", 60.0, 1.0),
    "sum_by_node_cards_5m": (f"sum by (node) ({H})", 300.0, 1.0),
    "max_over_time_cards_5m": (f"max_over_time({M}[1m])", 300.0, 1.0),
    "two_nodes_cards_5m": (f'{H}{{node=~"gpu-node-00(1|2)"}}', 300.0, 1.0),
    "quantile_over_time_containers_5m": (f"quantile_over_time(0.9, {C}[1m])", 300.0, 1.0),
    "avg_by_node_cards_1h_panel": (f"avg by (node) (avg_over_time({H}[1m]))", SPAN, PANEL_STEP),
    "rate_by_namespace_1h_panel": (f"sum by (namespace) (rate({C}[1m]))", SPAN, PANEL_STEP),
}
"""Name -> (query, seconds back from now, step)."""
IN_PROCESS = Budget(60, 3.0, 10)
FLOORS: dict[str, str] = {
    "buildinfo": "A request that does nothing but answer (`/api/v1/status/buildinfo`)",
    "vector0": "The cheapest range query, nothing read (`vector(0)`, 300 s at step 1 s)",
}
"""Requests timed beside the queries on both peers, cold: what answering at all costs, and
what a range query costs before it reads anything (a query over few series cannot cost
either peer less)."""
RETAKES = 2
"""Times an in-process run is taken again when the peer worked during it (see _through_engine)."""
OVER_HTTP = Budget(25, 4.0, 8)
GOAL_EACH = 1.0
GOAL_MEDIAN = 0.5
RESULTS = ROOT / "bench" / "results"


async def _through_engine(
    engine: Engine, query: str, start: float, end: float, step: float, peer: int
) -> tuple[dict[str, Any], bytes]:
    """A first run, then timed runs of the work a range request hands the engine; a run
    during which the peer (pid ``peer``) worked is taken again, up to :data:`RETAKES` times.

    Why: these runs follow one another without waiting for quiet (the HTTP ones
    wait), and the two peers share two cores: Prometheus' own work after taking
    an hour of samples (its garbage collector) landed in single runs, one of 10
    runs of the hour's ``sum by (namespace) (rate)`` taking 640 ms against a
    median of 250 (alone, 25 runs took 192-219 ms).
    """

    def work(queries: Queries) -> bytes:
        return matrix_body(queries.range(query, start, end, step).columns())

    began = time.perf_counter()
    body = await engine.run(work, identity="bench")
    first = time.perf_counter() - began
    times: list[float] = []
    retaken = 0
    while IN_PROCESS.more(len(times), sum(times)):
        for attempt in range(RETAKES + 1):
            worked = cpu_seconds(peer)
            began = time.perf_counter()
            body = await engine.run(work, identity="bench")
            took = time.perf_counter() - began
            if cpu_seconds(peer) - worked <= QUIET_CPU_S or attempt == RETAKES:
                break
            retaken += 1
        times.append(took)
    return {**summary(times, first), "retaken": retaken}, body


def one_size(
    nodes: int, span: float, queries: dict[str, tuple[str, float, float]]
) -> dict[str, Any]:
    """Fill ``nodes`` nodes for ``span`` seconds, then time every query on both peers."""
    malloc.set_policy()
    now = float(math.floor(time.time()))
    start = now - span
    sock = loopback_socket()
    port = sock.getsockname()[1]
    app = build_app(
        CollectorSettings(
            listen=f"127.0.0.1:{port}",
            kubernetes=False,
            stale_after=STALE_AFTER,
            history_retention=2 * span,
            history_max_points=200_000_000,
        )
    )
    history = app[STORE].history
    filled = fill(app[STORE], nodes, start, SCRAPE, int(span // SCRAPE) + 1, traced=0)
    out: dict[str, Any] = {
        "nodes": nodes,
        "span_s": span,
        "points": history.points,
        "fill": filled.figures(),
        "queries": {},
    }
    windows = {n: (q, now - min(back, span), now, step) for n, (q, back, step) in queries.items()}
    with tempfile.TemporaryDirectory(prefix="bench-query-fine-") as folder:
        prometheus = Prometheus(Path(folder))
        try:
            prometheus.wait_ready()
            remote_write(prometheus.base, history, start - SCRAPE, now)
            heap.sweep()
            malloc.for_queries()
            ours: dict[str, tuple[dict[str, Any], bytes]] = {}

            async def in_process() -> None:
                engine = Engine(history)
                for name, (q, s, e, step) in windows.items():
                    ours[name] = await _through_engine(
                        engine, q, s, e, step, prometheus.process.pid
                    )

            with heap.fewer_collections():  # as the collector runs
                asyncio.run(in_process())
            malloc.queries_done()
            peer = (prometheus.base, prometheus.process.pid)
            floors = {
                "buildinfo": "/status/buildinfo",
                "vector0": range_path("", "vector(0)", now - 300, now, 1.0),
            }
            times, bodies = time_ranges(app, sock, peer, windows, OVER_HTTP, folder, floors)
        finally:
            prometheus.close()
    out["floors"] = {
        name: {
            who: {k: v for k, v in times[f"{who}_{name}"].items() if k != "ms"}
            for who in ("ours", "prometheus")
        }
        for name in FLOORS
    }
    for name, (q, s, e, step) in windows.items():
        inproc, answer = ours[name]
        theirs = from_json(bodies[name][1])
        h_ours, h_theirs = times[f"ours_{name}"], times[f"prometheus_{name}"]
        checks = {
            "in_process": agreement(theirs, from_json(answer)),
            "http": agreement(theirs, from_json(bodies[name][0])),
        }
        out["queries"][name] = {
            "query": q,
            "seconds": e - s,
            "step_s": step,
            "in_process": {k: v for k, v in inproc.items() if k != "ms"},
            "http": {k: v for k, v in h_ours.items() if k != "ms"},
            "prometheus_http": {k: v for k, v in h_theirs.items() if k != "ms"},
            "ratio_in_process_p50": inproc["p50_ms"] / h_theirs["p50_ms"],
            "ratio_in_process_p99": inproc["p99_ms"] / h_theirs["p99_ms"],
            "ratio_http_p50": h_ours["p50_ms"] / h_theirs["p50_ms"],
            "ratio_http_p99": h_ours["p99_ms"] / h_theirs["p99_ms"],
            "series": checks["http"]["series"],
            "agree": all(c["agree"] or not c["series"] for c in checks.values()),
            "same_per_step": all(c["same_per_step"] for c in checks.values()),
        }
    return out


def medians(result: dict[str, Any]) -> dict[str, float]:
    """The median over the queries of each p50 ratio."""
    rows = result["queries"].values()
    return {
        "http_p50": statistics.median(r["ratio_http_p50"] for r in rows),
        "in_process_p50": statistics.median(r["ratio_in_process_p50"] for r in rows),
    }


def table(result: dict[str, Any]) -> str:
    """One markdown row per query, and the medians."""
    lines = [
        "| query | window / step | series | ours in process p50 / p99 | ours HTTP p50 / p99 "
        "| Prometheus HTTP p50 / p99 | ratio in process p50 / p99 | ratio HTTP p50 / p99 "
        f"| goal (p99 <= {GOAL_EACH:g}x) | agree |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in result["queries"].values():
        i, h, p = row["in_process"], row["http"], row["prometheus_http"]
        met = max(row["ratio_in_process_p99"], row["ratio_http_p99"]) <= GOAL_EACH
        agree = (
            "yes"
            if row["agree"]
            else "values yes, tied series differ"
            if row["same_per_step"]
            else "NO"
        )
        lines.append(
            f"| `{row['query']}` | {row['seconds']:.0f} s / {row['step_s']:g} s | {row['series']} "
            f"| {i['p50_ms']:.1f} / {i['p99_ms']:.1f} ms "
            f"| {h['p50_ms']:.1f} / {h['p99_ms']:.1f} ms "
            f"| {p['p50_ms']:.1f} / {p['p99_ms']:.1f} ms "
            f"| {row['ratio_in_process_p50']:.2f}x / {row['ratio_in_process_p99']:.2f}x "
            f"| {row['ratio_http_p50']:.2f}x / {row['ratio_http_p99']:.2f}x "
            f"| {'met' if met else 'NO'} | {agree} |"
        )
    m = medians(result)
    lines.append(
        f"\nMedian of the p50 ratios: HTTP {m['http_p50']:.2f}x, in process "
        f"{m['in_process_p50']:.2f}x (goal <= {GOAL_MEDIAN:g}x: "
        f"{'met' if max(m.values()) <= GOAL_MEDIAN else 'NO'})."
    )
    for name, floor in result["floors"].items():
        lines.append(
            f"{FLOORS[name]}, HTTP p50 / p99: "
            f"ours {floor['ours']['p50_ms']:.2f} / {floor['ours']['p99_ms']:.2f} ms, Prometheus' "
            f"{floor['prometheus']['p50_ms']:.2f} / {floor['prometheus']['p99_ms']:.2f} ms."
        )
    retaken = {
        row["query"]: row["in_process"]["retaken"]
        for row in result["queries"].values()
        if row["in_process"]["retaken"]
    }
    taken = ", ".join(f"`{q}` {n}" for q, n in retaken.items()) or "none"
    lines.append(f"In-process runs taken again because Prometheus worked meanwhile: {taken}.")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    cli = argparse.ArgumentParser(prog="python -m bench.query.fine")
    cli.add_argument("--nodes", type=int, default=NODES)
    cli.add_argument("--span", type=float, default=SPAN, help="seconds of history filled")
    cli.add_argument("--only", default="", help="NAME[,NAME] of QUERIES")
    cli.add_argument("--save", action="store_true", help="write bench/results/query_fine.*")
    a = cli.parse_args(argv)
    names = a.only.split(",") if a.only else list(QUERIES)
    began = time.perf_counter()
    result = one_size(a.nodes, a.span, {n: QUERIES[n] for n in names})
    text = table(result)
    print(text)
    print(f"wall {time.perf_counter() - began:.0f} s, fill {result['fill']['wall_s']:.0f} s")
    if a.save:
        stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        (RESULTS / "query_fine.json").write_text(
            json.dumps({"date": stamp, "result": result}, indent=2) + "\n"
        )
        (RESULTS / "query_fine.md").write_text(
            f"# Small queries at fine steps beside Prometheus 2.42\n\n{stamp}, "
            f"`python -m bench.query.fine --save`: {a.nodes} nodes, {a.span:.0f} s of history "
            f"at {SCRAPE:g} s, the same samples in Prometheus (remote write). In process: "
            f"through the collector's engine, up to {IN_PROCESS.repeats} runs back to back, a "
            f"run during which Prometheus worked taken again (up to {RETAKES} times); HTTP: up to "
            f"{OVER_HTTP.repeats} runs a peer, interleaved, each sent once both servers are "
            f"quiet. Ratios are ours over Prometheus' (HTTP). p99 of fewer than 100 runs is "
            f"their maximum.\n\n{text}\n"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
