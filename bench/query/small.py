"""Small range queries: 80 and 200 nodes x 60 steps, ours beside Prometheus 2.42, same run.

Why: a small dashboard (tens of nodes, an hour at 60 s) is where a fixed cost
per query and per step shows; the hour-long query at 1,000 nodes
(:mod:`bench.query.run`) hides it. Goal: every query here no slower than
Prometheus at 80 nodes (p99 ratio <= 1.0) and <= 0.5x from 200 nodes up.

Setup: as :mod:`bench.query.run` (the same simulated cluster, filled by
:func:`bench.query.fill.fill` at 60 s for the last hour, 61 rounds; the same
samples written to a real Prometheus by remote write), once per size. Each
query of :data:`QUERIES` is a range query over the hour at step 60 s: timed in
process (what the HTTP handler does but the socket: plan, read, evaluate, write
the JSON body; :data:`IN_PROCESS` runs, the cyclic collector tuned as the
collector runs it) and over HTTP on both peers
(the client process of :mod:`bench.query.http`, requests interleaved, each sent
once both servers are quiet, :data:`OVER_HTTP` runs). Answers are checked
against Prometheus' (label sets, values within 1e-9, timestamps).

``python -m bench.query.small [--nodes 80,200] [--only NAME,...] [--save]``;
``--save`` writes ``bench/results/query_small.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.kit.cluster import ROOT
from bench.kit.processes import loopback_socket
from bench.query.answers import agreement, from_json
from bench.query.budget import Budget, timed
from bench.query.fill import fill
from bench.query.http import time_ranges
from bench.query.peer import Prometheus, remote_write
from bench.query.setup import HISTORY_MAX_POINTS, HISTORY_RETENTION, SPAN, STALE_AFTER
from collector.app import STORE, build_app
from collector.memory import heap, malloc
from collector.promql.query import prepare_range
from collector.settings import CollectorSettings
from collector.tsdb.series import Queryable
from collector.web.promjson import matrix_body

STEP = 60.0
SIZES = (80, 200)
U = "hami_container_device_utilization_ratio"
QUERIES = {
    "max_over_time": f"max_over_time({U}[30s])",
    # the dataset has no counter: rate over a gauge (Prometheus computes it alike)
    "rate": "rate(hami_container_last_kernel_elapsed_seconds[5m])",
    "deriv": f"deriv({U}[5m])",
    "avg_over_time": f"avg_over_time({U}[5m])",
    "quantile_over_time": f"quantile_over_time(0.9, {U}[1m])",
    "topk": f"topk(5, {U})",
    "bottomk": f"bottomk(5, {U})",
    "sum_by_node": f"sum by (node) ({U})",
}
IN_PROCESS = Budget(60, 3.0, 10)
OVER_HTTP = Budget(25, 4.0, 8)
GOAL = {80: 1.0, 200: 0.5}
"""The p99 ratio to Prometheus' each size must meet (sizes above 200: 0.5)."""
RESULTS = ROOT / "bench" / "results"
NOTES = """`agree`: label sets, timestamps and values within 1e-9 of Prometheus'. For
`topk`/`bottomk`, "values yes, tied series differ": at every step the chosen values
are Prometheus' (compared as a sorted list per timestamp), but where several series
tie at the k-th value the two engines keep different ones (Prometheus keeps what its
heap of k happens to hold, which depends on the order series arrive in)."""


def answer_body(query: str, start: float, end: float, history: Queryable) -> bytes:
    """What the HTTP handler does for a range query but the socket: plan, read, evaluate
    and write the JSON body."""
    return matrix_body(prepare_range(query, start, end, STEP, history).columns())


def _ratio(a: float, b: float) -> float:
    return a / b if b else math.inf


def one_size(nodes: int, queries: dict[str, str]) -> dict[str, Any]:
    """Fill ``nodes`` nodes for the hour, then time every query of ``queries`` on both peers."""
    malloc.set_policy()
    now = float(math.floor(time.time()))
    start = now - SPAN
    rounds = int(SPAN // STEP) + 1
    sock = loopback_socket()
    port = sock.getsockname()[1]
    app = build_app(
        CollectorSettings(
            listen=f"127.0.0.1:{port}",
            kubernetes=False,
            stale_after=STALE_AFTER,
            history_retention=HISTORY_RETENTION,
            history_max_points=HISTORY_MAX_POINTS,
        )
    )
    history = app[STORE].history
    fill(store=app[STORE], nodes=nodes, start=start, step=STEP, rounds=rounds, traced=0)
    out: dict[str, Any] = {"nodes": nodes, "points": history.points, "queries": {}}
    with tempfile.TemporaryDirectory(prefix="bench-query-small-") as folder:
        prometheus = Prometheus(Path(folder))
        try:
            prometheus.wait_ready()
            remote_write(prometheus.base, history, start - STEP, now)
            heap.sweep()
            malloc.for_queries()
            # the timed answers kept as their bodies: kept as Python series (at 80
            # nodes, 153,000 objects the garbage collector tracks) they added 112 ms to
            # each sweep of the server's heap task, which can fall into a request
            ours: dict[str, tuple[dict[str, Any], bytes]] = {}
            with heap.fewer_collections():  # as the collector runs
                for name, q in queries.items():
                    ours[name] = timed(
                        lambda q=q: answer_body(q, start, now, history),  # type: ignore[misc]
                        IN_PROCESS,
                    )
            malloc.queries_done()
            windows = {name: (q, start, now, STEP) for name, q in queries.items()}
            peer = (prometheus.base, prometheus.process.pid)
            times, bodies = time_ranges(app, sock, peer, windows, OVER_HTTP, folder)
        finally:
            prometheus.close()
    for name in queries:
        inproc, answer = ours[name]
        theirs = from_json(bodies[name][1])
        h_ours, h_theirs = times[f"ours_{name}"], times[f"prometheus_{name}"]
        checks = {
            "in_process": agreement(theirs, from_json(answer)),
            "http": agreement(theirs, from_json(bodies[name][0])),
        }
        out["queries"][name] = {
            "query": queries[name],
            "in_process": {k: v for k, v in inproc.items() if k != "ms"},
            "http": {k: v for k, v in h_ours.items() if k != "ms"},
            "prometheus_http": {k: v for k, v in h_theirs.items() if k != "ms"},
            "ratio_in_process_p50": _ratio(inproc["p50_ms"], h_theirs["p50_ms"]),
            "ratio_in_process_p99": _ratio(inproc["p99_ms"], h_theirs["p99_ms"]),
            "ratio_http_p50": _ratio(h_ours["p50_ms"], h_theirs["p50_ms"]),
            "ratio_http_p99": _ratio(h_ours["p99_ms"], h_theirs["p99_ms"]),
            "series": checks["http"]["series"],
            "agree": all(c["agree"] or not c["series"] for c in checks.values()),
            "same_per_step": all(c["same_per_step"] for c in checks.values()),
            "agreement": checks,
        }
    return out


def _agrees(row: dict[str, Any]) -> str:
    if row["agree"]:
        return "yes"
    # the same values at every step, held by other series: ties picked otherwise
    return "values yes, tied series differ" if row.get("same_per_step") else "NO"


def table(results: list[dict[str, Any]]) -> str:
    """One markdown row per query and size."""
    lines = [
        "| nodes | query | series | ours in process p50 / p99 | ours HTTP p50 / p99 "
        "| Prometheus HTTP p50 / p99 | ratio in process p50 / p99 | ratio HTTP p50 / p99 "
        "| goal (p99) | agree |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        goal = GOAL.get(r["nodes"], 0.5)
        for row in r["queries"].values():
            i, h, p = row["in_process"], row["http"], row["prometheus_http"]
            met = max(row["ratio_in_process_p99"], row["ratio_http_p99"]) <= goal
            lines.append(
                f"| {r['nodes']} | `{row['query']}` | {row['series']} "
                f"| {i['p50_ms']:.1f} / {i['p99_ms']:.1f} ms "
                f"| {h['p50_ms']:.1f} / {h['p99_ms']:.1f} ms "
                f"| {p['p50_ms']:.1f} / {p['p99_ms']:.1f} ms "
                f"| {row['ratio_in_process_p50']:.2f}x / {row['ratio_in_process_p99']:.2f}x "
                f"| {row['ratio_http_p50']:.2f}x / {row['ratio_http_p99']:.2f}x "
                f"| <= {goal:g}x: {'met' if met else 'NO'} | {_agrees(row)} |"
            )
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    cli = argparse.ArgumentParser(prog="python -m bench.query.small")
    cli.add_argument("--nodes", default=",".join(map(str, SIZES)))
    cli.add_argument("--only", default="", help="NAME[,NAME] of QUERIES")
    cli.add_argument("--save", action="store_true", help="write bench/results/query_small.*")
    a = cli.parse_args(argv)
    names = a.only.split(",") if a.only else list(QUERIES)
    queries = {n: QUERIES[n] for n in names}
    began = time.perf_counter()
    results = [one_size(int(n), queries) for n in a.nodes.split(",")]
    text = table(results)
    print(text)
    print(f"wall {time.perf_counter() - began:.0f} s")
    if a.save:
        meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "step_s": STEP}
        (RESULTS / "query_small.json").write_text(
            json.dumps({**meta, "results": results}, indent=2) + "\n"
        )
        (RESULTS / "query_small.md").write_text(
            f"# Small range queries beside Prometheus 2.42\n\n{meta['date']}, "
            f"`python -m bench.query.small --save`: the last hour at step 60 s "
            f"(61 points a series), each size filled as `bench/query/run.py` fills it, "
            f"the same samples in Prometheus (remote write). In process: up to "
            f"{IN_PROCESS.repeats} runs; HTTP: up to {OVER_HTTP.repeats} runs a peer, "
            f"interleaved, each sent once both servers are quiet. Ratios are ours over "
            f"Prometheus' (HTTP). p99 of fewer than 100 runs is their maximum.\n\n{text}\n\n"
            f"{NOTES}\n"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
