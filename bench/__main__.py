"""``python -m bench``: run every benchmark, print a table, save JSON and markdown.

Each figure is printed with its goal and, where there is one,
the peer measured in the same run and the ratio to it. Results are written to
``bench/results/foundation.json`` and ``foundation.md`` (overwritten); the query
surfaces get a section of their own.

Options: ``--quick`` (or ``BENCH_QUICK=1``) trims the query bench's repeats
(:data:`bench.query.budget.QUICK`); every figure is still produced. ``--only
NAME[,NAME]`` runs some benches only and prints their rows without saving.
"""

from __future__ import annotations

import datetime
import gc
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.fleet import agent, remote, shards, status
from bench.fleet.report import (
    agent_rows,
    push_rows,
    remote_rows,
    scale_rows,
    shards_rows,
    status_rows,
)
from bench.foundation import ingest, memory, page, serve
from bench.foundation.report import foundation_rows
from bench.kit import cluster
from bench.kit.table import Row, mark, table
from bench.load import report as load_report
from bench.load import run as load
from bench.push import run as push
from bench.query import run as query
from bench.query.budget import QUICK, Budget
from bench.query.report import query_rows
from bench.scale import run as scale

RESULTS = Path(__file__).resolve().parent / "results"


def rows(r: dict[str, Any]) -> list[Row]:
    """The summary table of the results present (the query surfaces apart)."""
    out: list[Row] = []
    if {"ingest", "page", "serve", "memory"} <= r.keys():
        out += foundation_rows(r)
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
        "scale": scale.run,
        "query": run_query,
        "load": run_load,
    }


def run_load() -> dict[str, Any]:
    """The cluster-scale load (``bench/results/load.md`` is written too)."""
    result = load.run()
    load_report.write_report(result)
    return result


def chosen(argv: list[str], known: Sequence[str]) -> list[str]:
    """The benches ``--only`` names (all when it is absent); exit on a name not ``known``."""
    only = argv[argv.index("--only") + 1].split(",") if "--only" in argv else list(known)
    unknown = set(only) - set(known)
    if unknown:
        raise SystemExit(f"unknown benches {sorted(unknown)}; known: {', '.join(known)}")
    return only


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
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "foundation.json").write_text(json.dumps(document, indent=2) + "\n")
    (RESULTS / "foundation.md").write_text(text)


def main(argv: list[str]) -> None:
    """Run the benchmarks chosen, print their tables, and save them when every one ran."""
    quick = "--quick" in argv or os.environ.get("BENCH_QUICK", "") not in ("", "0")
    budget = QUICK if quick else Budget()
    every = benches(budget)
    only = chosen(argv, list(every))
    results, seconds = run_all(every, only)
    summary = rows(results)
    queries = query_rows(results["query"]) if "query" in results else []
    meta = describe_run(quick, seconds)
    markdown = table(summary)
    query_markdown = table(queries) if queries else ""
    print(markdown)
    if query_markdown:
        print(f"\nQuery surfaces\n\n{query_markdown}")
    if "remote" in results:
        remote.save(RESULTS, meta, table(remote_rows(results["remote"])), results["remote"])
    if set(only) != every.keys():
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


if __name__ == "__main__":
    if sys.argv[1:2] == ["load"]:  # ``python -m bench load``: that bench alone, its own report
        load.main(sys.argv[2:])
    else:
        main(sys.argv[1:])
