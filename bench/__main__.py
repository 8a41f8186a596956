"""``python -m bench [NAME] [options]``: one bench, or every one with a summary table.

Each figure is printed with its goal and, where there is one, the peer
measured in the same run and the ratio to it. ``all`` (also no NAME) writes
``bench/results/foundation.json`` and ``.md`` beside each bench's own result;
``all --quick`` (or ``BENCH_QUICK=1``) trims the query bench's repeats
(:data:`bench.query.budget.QUICK`) and ``all --only NAME[,NAME]`` runs some of
the set, printing their rows without saving the summary.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import importlib
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from bench.fleet import agent, agentinstall, remote, rss, shards, status
from bench.fleet.report import (
    agent_rows,
    push_rows,
    remote_rows,
    scale_rows,
    shards_rows,
    status_rows,
)
from bench.foundation import allocations, heap, ingest, memory, page, readauth, serve
from bench.foundation.report import ingest_rows, memory_rows, page_rows, serve_rows
from bench.kit import cluster
from bench.kit.table import RESULTS, Row, mark, table, write_result
from bench.load import report as load_report
from bench.load import run as load
from bench.push import run as push
from bench.query import run as query
from bench.query import setup as query_setup
from bench.query.budget import QUICK, Budget
from bench.query.report import query_rows
from bench.ui import run as ui


def rows(r: dict[str, Any]) -> list[Row]:
    """The summary table of the results present (the query surfaces apart)."""
    out: list[Row] = []
    for name, rows_of in (
        ("ingest", ingest_rows),
        ("page", page_rows),
        ("serve", serve_rows),
        ("memory", memory_rows),
    ):
        if name in r:
            out += rows_of(r[name])
    if "push" in r:
        out += push_rows(r["push"])
    if "agent" in r:
        out += agent_rows(r["agent"])
    if "status" in r:
        out += status_rows(r["status"])
    if "shards" in r:
        out += shards_rows(r["shards"])
    if "remote" in r:
        out += remote_rows(r["remote"])
    if "load" in r:
        out += [Row(w, m, g, "-", "-", mark(ok)) for w, m, g, ok in load_report.summary(r["load"])]
    if "scale" in r:
        out += scale_rows(r["scale"])
    if "ui" in r:
        out += ui.rows(r["ui"])
    return out


def benches(budget: Budget) -> dict[str, Callable[[], dict[str, Any]]]:
    """Every bench by name, in running order (ingest first: cold caches; query last: largest)."""

    def run_query() -> dict[str, Any]:
        cluster.cluster.cache_clear()  # the shared clusters: no later bench needs them
        gc.collect()
        return query.run(budget)

    return {
        "ingest": ingest.run,
        "page": page.run,
        "serve": serve.run,
        "memory": memory.run,
        "push": push.run,
        "agent": agent.run,
        "status": status.run,
        "shards": shards.run,
        "remote": remote.run,
        "ui": ui.run,
        "scale": lambda: importlib.import_module("bench.scale.run").run(),
        "query": run_query,
        "load": run_load,
    }


def run_load() -> dict[str, Any]:
    """The cluster-scale load (``bench/results/load.md`` is written too)."""
    result = load.run()
    load_report.write_report(result)
    return result


def run_all(
    every: dict[str, Callable[[], dict[str, Any]]], only: list[str]
) -> tuple[dict[str, Any], dict[str, float]]:
    """Run the benches in ``only``, in order: their results, and seconds each and in all."""
    results: dict[str, Any] = {}
    seconds: dict[str, float] = {}
    began = time.perf_counter()
    for name, run in every.items():
        if name not in only:
            continue
        print(f"running {name} ...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        results[name] = run()
        seconds[name] = round(time.perf_counter() - start, 1)
    seconds["total"] = round(time.perf_counter() - began, 1)
    return results, seconds


def describe_run(quick: bool, seconds: dict[str, float]) -> dict[str, Any]:
    """When, where and how long the run was."""
    load = os.getloadavg()
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "quick": quick,
        "load_average_after": load,
        "seconds": seconds,
    }


def foundation_md(meta: dict[str, Any], budget: Budget, markdown: str, query_markdown: str) -> str:
    """``foundation.md``: the run, both tables, and how the query figures were taken."""
    return (
        f"# Foundation benchmarks\n\n{meta['date']}, Python {meta['python']}, "
        f"{meta['cpus']} CPUs, {meta['seconds']['total']} s in all"
        f"{' (--quick)' if meta['quick'] else ''} "
        f"(load average after: {', '.join(f'{x:.2f}' for x in meta['load_average_after'])}).\n\n"
        f"{markdown}\n\n## Query surfaces\n\n{query_markdown}\n\n"
        f"Query repeats stop after {budget.repeats} runs or once a surface has used "
        f"{budget.seconds:g} s of timed runs (at least {budget.least}); p99 of fewer than "
        "100 runs is their maximum. The peer holds the same samples, staleness markers "
        "included (written by remote write: see `bench/query/run.py`).\n\n"
        "Details, per-repeat figures and peers' own numbers: `foundation.json`.\n"
    )


def save(document: dict[str, Any], text: str) -> None:
    """Overwrite ``foundation.json`` with ``document`` and ``foundation.md`` with ``text``."""
    write_result("foundation", text, document)


def run_set(quick: bool, only: list[str]) -> None:
    """Run the benches ``only`` names, print their tables, and save them when every one ran."""
    budget = QUICK if quick else Budget()
    every = benches(budget)
    unknown = set(only) - set(every)
    if unknown:
        raise SystemExit(f"unknown benches {sorted(unknown)}; known: {', '.join(every)}")
    results, seconds = run_all(every, only or list(every))
    summary = rows(results)
    queries = query_rows(results["query"]) if "query" in results else []
    meta = describe_run(quick, seconds)
    markdown = table(summary)
    query_markdown = table(queries) if queries else ""
    print(markdown)
    if query_markdown:
        print(f"\nQuery surfaces\n\n{query_markdown}")
    if "remote" in results:
        remote.save(meta, table(remote_rows(results["remote"])), results["remote"])
    if only and set(only) != every.keys():
        print(f"\n{meta['seconds']}; --only: nothing else saved")
        return
    document = {
        "meta": meta,
        "summary": [asdict(row) for row in summary],
        "query_summary": [asdict(row) for row in queries],
        "results": results,
    }
    save(document, foundation_md(meta, budget, markdown, query_markdown))
    print(f"\n{meta['seconds']}; written to {RESULTS}/foundation.json and .md")


def env_quick() -> bool:
    """``BENCH_QUICK=1`` means ``--quick``."""
    return os.environ.get("BENCH_QUICK", "") not in ("", "0")


def run_scale(args: argparse.Namespace) -> None:
    """The scale bench alone; its options go where its module reads them, the environment."""
    for name, value in vars(args).items():
        if name.startswith("scale_") and value is not None:
            os.environ[f"BENCH_{name.upper()}"] = str(value)
    from bench.scale import run as scale  # after the environment is set: read at import

    print(json.dumps(scale.run(), indent=2))


def run_query(args: argparse.Namespace) -> None:
    """The query bench alone, on its own sizes."""
    budget = QUICK if args.quick else Budget(args.repeats)
    result = query.run(budget, args.nodes, args.step, not args.no_dashboard)
    print("\n".join(query.summary_lines(result)))
    if args.json:
        print(json.dumps(result, indent=2))


def run_load_alone(args: argparse.Namespace) -> None:
    """The cluster-scale load alone, its report written."""
    load_report.write_report(load.run(args.scale, args.seconds))


def run_soak(args: argparse.Namespace) -> None:
    """The soak; exits 1 when a check failed."""
    from bench.soak import run as soak

    soak.main(args.minutes)


def run_push(args: argparse.Namespace) -> None:
    """The push bench alone, with its own table."""
    outcome = push.run(args.fill_seconds)
    print(push.table(outcome))
    if args.json:
        print(json.dumps(outcome, indent=2))


def run_rss(args: argparse.Namespace) -> None:
    """The whole collector's memory alone."""
    rss.main(args.nodes, args.json)


def run_heap(args: argparse.Namespace) -> None:
    """The heap task's sweep and freeze alone."""
    print(json.dumps(heap.measure(args.nodes), indent=2))


def parser() -> argparse.ArgumentParser:
    """``python -m bench [NAME] [options]``: every bench, or one."""
    top = argparse.ArgumentParser(
        prog="python -m bench", description="Run one bench, or the full set with no NAME."
    )
    subs = top.add_subparsers(dest="name", metavar="NAME")
    every = subs.add_parser("all", help="every bench; writes bench/results/foundation.*")
    every.add_argument(
        "--quick",
        action="store_true",
        default=env_quick(),
        help="fewer query repeats (BENCH_QUICK=1)",
    )
    every.add_argument(
        "--only",
        type=lambda v: v.split(","),
        default=[],
        help="NAME[,NAME]: these only, nothing saved",
    )
    every.set_defaults(handler=lambda a: run_set(a.quick, a.only))
    for name, about in ONE_OF_THE_SET.items():
        one = subs.add_parser(name, help=about)
        one.set_defaults(handler=lambda a, name=name: run_set(False, [name]))
    ps = subs.add_parser("push", help="the push API under 5,000 agents")
    ps.add_argument(
        "--fill-seconds",
        type=float,
        default=push.FILL_TIMEOUT,
        help="longest wait for the store to fill",
    )
    ps.add_argument("--json", action="store_true", help="print every figure as JSON too")
    ps.set_defaults(handler=run_push)
    q = subs.add_parser("query", help="the query surfaces beside a real Prometheus 2.42")
    q.add_argument("--nodes", type=int, default=query_setup.NODES)
    q.add_argument("--repeats", type=int, default=query_setup.REPEATS)
    q.add_argument("--step", type=float, default=query_setup.STEP, help="range-query step, s")
    q.add_argument("--quick", action="store_true", default=env_quick(), help="fewer repeats")
    q.add_argument("--no-dashboard", action="store_true", help="skip the dashboard's panels")
    q.add_argument("--json", action="store_true", help="print every figure as JSON too")
    q.set_defaults(handler=run_query)
    ld = subs.add_parser("load", help="one collector under every surface's load at once")
    ld.add_argument(
        "--scale",
        type=float,
        default=float(os.environ.get("LOAD_SCALE", load.SCALE)),
        help="share of the full cluster (LOAD_SCALE)",
    )
    ld.add_argument(
        "--seconds",
        type=float,
        default=float(os.environ.get("LOAD_SECONDS", load.SECONDS)),
        help="measured seconds (LOAD_SECONDS)",
    )
    ld.set_defaults(handler=run_load_alone)
    sc = subs.add_parser(
        "scale", help="thousands of monitors, beside vmagent 1.79 and Prometheus 2.42"
    )
    sc.add_argument(
        "--nodes", dest="scale_nodes", type=int, help="monitors (BENCH_SCALE_NODES, 5000)"
    )
    sc.add_argument(
        "--cards", dest="scale_cards", type=int, help="cards a node (BENCH_SCALE_CARDS, 2)"
    )
    sc.add_argument(
        "--allocations",
        dest="scale_allocations",
        type=int,
        help="vGPU allocations a node (BENCH_SCALE_ALLOCATIONS, 8)",
    )
    sc.add_argument(
        "--interval",
        dest="scale_interval",
        type=float,
        help="scrape interval, s (BENCH_SCALE_INTERVAL, 15)",
    )
    sc.add_argument(
        "--intervals",
        dest="scale_intervals",
        type=int,
        help="measured intervals (BENCH_SCALE_INTERVALS, 4)",
    )
    sc.add_argument(
        "--rounds",
        dest="scale_rounds",
        type=int,
        help="rounds of every scraper (BENCH_SCALE_ROUNDS, 1)",
    )
    sc.add_argument(
        "--before",
        dest="scale_before",
        help="another source tree, run as one more scraper (BENCH_SCALE_BEFORE)",
    )
    sc.add_argument(
        "--result", dest="scale_result", help="result file stem (BENCH_SCALE_RESULT, scale)"
    )
    sc.set_defaults(handler=run_scale)
    so = subs.add_parser("soak", help="the collector for an hour of churn and faults (make soak)")
    so.add_argument(
        "--minutes",
        type=float,
        default=float(os.environ.get("SOAK_MINUTES", "60")),
        help="length (SOAK_MINUTES)",
    )
    so.set_defaults(handler=run_soak)
    rs = subs.add_parser("rss", help="the whole collector's memory at 5,000 nodes with history")
    rs.add_argument("--nodes", type=int, default=rss.NODES)
    rs.add_argument("--json", action="store_true", help="print every figure as JSON too")
    rs.set_defaults(handler=run_rss)
    hp = subs.add_parser("heap", help="the heap task's sweep and freeze against a full collection")
    hp.add_argument("--nodes", type=int, default=cluster.NODES)
    hp.set_defaults(handler=run_heap)
    al = subs.add_parser("allocations", help="one refresh of the pod watch's allocation batches")
    al.set_defaults(handler=lambda a: print(json.dumps(allocations.measure(), indent=2)))
    cs = subs.add_parser("coldstart", help="first queries after a start, against warm ones")
    cs.add_argument("--runs", type=int, default=5, help="cold starts measured")
    cs.set_defaults(handler=lambda a: importlib.import_module("bench.coldstart").main(a.runs))
    ra = subs.add_parser(
        "readauth", help="what read authorization adds to a cached identity's read"
    )
    ra.set_defaults(handler=lambda a: print(readauth.table(readauth.run())))
    ai = subs.add_parser(
        "agent-install",
        help="the agent's own install beside both programs': size and RSS (needs the registry)",
    )
    ai.add_argument("--rounds", type=int, default=agentinstall.ROUNDS, help="runs of each install")
    ai.set_defaults(handler=lambda a: print(agentinstall.markdown(agentinstall.run(a.rounds))))
    return top


ONE_OF_THE_SET = {
    "ingest": "parse + normalise + store on one core, beside prometheus_client",
    "page": "/metrics rebuild after one node changed",
    "serve": "serving the cached gzip /metrics page",
    "memory": "memory per live series, beside prometheus_client",
    "agent": "the agent's share of a core and memory on a node",
    "status": "the status page at 5,000 nodes",
    "shards": "20,000 nodes over 4 shards x 2 replicas, a replica killed",
    "remote": "remote write, and into VictoriaMetrics 1.79 through an outage",
    "ui": "the views for people at 5,000 nodes, beside REST's nodes page",
}
"""The benches of the full set that run alone with no options of their own."""


def cli(argv: list[str]) -> None:
    """Parse ``argv`` and run what it names; no NAME (options only, or none) is ``all``."""
    if not argv or (argv[0] not in ("-h", "--help") and argv[0].startswith("-")):
        argv = ["all", *argv]  # ``python -m bench --only ...`` as make bench has always run it
    args = parser().parse_args(argv)
    args.handler(args)


if __name__ == "__main__":
    cli(sys.argv[1:])
