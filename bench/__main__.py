"""``python -m bench``: run every benchmark, print a table, save JSON and markdown.

Each figure is printed with its goal (from the issue) and, where there is one,
the peer measured in the same run and the ratio to it. Results are written to
``bench/results/foundation.json`` and ``foundation.md`` (overwritten); the query
surfaces get a section of their own.

Options: ``--quick`` (or ``BENCH_QUICK=1``) trims the query bench's repeats
(:data:`bench.query.QUICK`); every figure is still produced. ``--only
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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import (
    agent,
    cluster,
    ingest,
    load,
    load_report,
    memory,
    page,
    push,
    query,
    remote,
    scale,
    serve,
    shards,
    status,
)

RESULTS = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class Row:
    """One line of the summary table."""

    what: str
    measured: str
    goal: str
    peer: str
    ratio: str
    ok: str


def _mark(ok: bool | None) -> str:
    return "-" if ok is None else ("yes" if ok else "NO")


def _rate(value: float) -> str:
    return f"{value:,.0f}/s"


def _figure(what: str, measured: str, peer: str = "-", ratio: str = "-") -> Row:
    """A row without a goal: a figure shown beside the others, judged by nobody."""
    return Row(what, measured, "-", peer, ratio, "-")


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
        out += [Row(w, m, g, "-", "-", _mark(ok)) for w, m, g, ok in load_report.summary(r["load"])]
    if "scale" in r:
        out += scale_rows(r["scale"])
    return out


def scale_rows(s: dict[str, Any]) -> list[Row]:
    """One collector pulling every monitor, beside vmagent (also in ``scale.md``)."""
    c, v = s["collector"], s["vmagent"]
    pulled = f"{s['nodes']:,} monitors pulled every {s['interval_s']:g} s"
    return [
        Row(
            f"{pulled}: collector CPU / RSS peak",
            f"{c['cores']:.2f} cores / {c['rss_peak_mib']:,.0f} MiB",
            f"<= {s['goals']['cores']:g} core, <= {s['goals']['rss_mib']:,.0f} MiB",
            f"vmagent {v['cores']:.2f} cores / {v['rss_peak_mib']:,.0f} MiB",
            "-",
            _mark(s["meets_cores"] and s["meets_rss"] and s["meets_fresh"]),
        ),
        Row(
            f"{pulled}: CPU per scraped sample",
            f"{c['cpu_us_per_sample']:.2f} us",
            f"<= vmagent 1.79's ({s['goals']['ratio']:g}x)",
            f"vmagent 1.79 {v['cpu_us_per_sample']:.2f} us",
            f"{s['ratio_cpu_per_sample_vs_vmagent']:.2f}x",
            _mark(s["meets_ratio"]),
        ),
    ]


def remote_rows(r: dict[str, Any]) -> list[Row]:
    """Remote write: per core into an accept-all receiver; end to end into VictoriaMetrics."""
    sent, peer = r["throughput"]["sent"], r["throughput"]["render_peer"]
    vm = r["victoria_metrics"]
    bulk, outage = vm["bulk"], vm["outage"]
    return [
        Row(
            "remote write samples per sender core-second (accept-all receiver)",
            _rate(sent["samples_per_cpu_second"]),
            f">= {_rate(r['goal_samples_per_cpu_second'])} per core",
            f"/metrics text of the same samples {_rate(peer['samples_per_cpu_second'])}/core",
            f"{r['ratio_to_render_peer']:.2f}x",
            _mark(r["meets_goal"]),
        ),
        _figure(
            "remote write into VictoriaMetrics 1.79, bulk",
            f"{_rate(bulk['samples_per_second'])} wall, {_rate(bulk['samples_per_cpu_second'])} "
            f"per sender core; VictoriaMetrics {vm['victoria_cpu_seconds']:.1f} CPU-s in all",
        ),
        Row(
            f"VictoriaMetrics down {outage['outage_seconds']:g} s at "
            f"{outage['offered_samples_per_second']:,}/s offered",
            f"peak queue {outage['peak_pending']:,}, dropped {outage['dropped']:,}, "
            f"drained {outage['drain_seconds_after_last_round']:g} s after the last round; "
            f"VictoriaMetrics holds {vm['victoria_holds']:,.0f} of {vm['sent']:,} sent",
            "nothing lost within the queue bound",
            "-",
            "-",
            _mark(vm["lost"] == 0 and outage["dropped"] == 0),
        ),
    ]


def foundation_rows(r: dict[str, Any]) -> list[Row]:
    """Ingest, page, serving and memory."""
    return [
        *ingest_rows(r["ingest"]),
        *page_rows(r["page"]),
        *serve_rows(r["serve"]),
        *memory_rows(r["memory"]),
    ]


def ingest_rows(ingest: dict[str, Any]) -> list[Row]:
    """Ingest rates, steady, cold and with churn, of each flavour mix beside prometheus_client."""
    out: list[Row] = []
    for name in ("hami", "mixed"):
        i = ingest[name]
        peer = _rate(i["peer_prometheus_client_samples_per_s"])
        out.append(
            Row(
                f"ingest steady, {name} ({i['samples_per_pass']:,} samples/pass)",
                _rate(i["steady_samples_per_s"]),
                f">= {_rate(i['goal_samples_per_s'])}, >= {i['goal_ratio']:.0f}x",
                f"prometheus_client {peer}",
                f"{i['ratio_vs_prometheus_client']:.1f}x",
                _mark(i["meets_goal"]),
            )
        )
        out.append(
            _figure(
                f"ingest cold (first scrape, strict path), {name}",
                _rate(i["cold_samples_per_s"]),
                f"prometheus_client {peer}",
                f"{i['cold_ratio_vs_prometheus_client']:.1f}x",
            )
        )
        if i["churn_samples_per_s"] is not None:
            out.append(
                _figure(
                    f"ingest pass with pod churn, {name}",
                    _rate(i["churn_samples_per_s"]),
                    f"prometheus_client {peer}",
                    f"{i['churn_samples_per_s'] / i['peer_prometheus_client_samples_per_s']:.1f}x",
                )
            )
    return out


def page_rows(page: dict[str, Any]) -> list[Row]:
    """The ``/metrics`` rebuild after one node changed, plain and gzip, and the page's size."""
    out = [
        Row(
            f"/metrics rebuild after 1 node changed, plain ({label})",
            f"{p['rebuild_ms']:.1f} ms",
            f"<= {p['goal_ms']:.0f} ms",
            "-",
            "-",
            _mark(p["meets_goal"]),
        )
        for p, label in (
            (page["bare"], "bare self metrics"),
            (page["with_sources"], "+1,000 sources' self metrics"),
        )
    ]
    bare = page["bare"]
    return [
        *out,
        _figure(
            "/metrics rebuild after 1 node changed, gzip (bare)",
            f"{bare['rebuild_gzip_ms']:.0f} ms",
        ),
        _figure(
            "/metrics page size, plain / gzip",
            f"{bare['page_bytes'] / 1e6:.1f} MB / {bare['page_gzip_bytes'] / 1e6:.1f} MB",
        ),
    ]


def serve_rows(s: dict[str, Any]) -> list[Row]:
    """Serving the cached gzip page, beside bare and chunked aiohttp."""
    return [
        Row(
            f"serve cached gzip /metrics ({s['body_bytes'] / 1e6:.1f} MB), {s['connections']} conns",
            f"{s['req_per_s']:.0f} req/s ({s['server_cpu_ms_per_request']:.1f} ms CPU/req)",
            f">= {s['goal_req_per_s']:.0f} req/s",
            f"bare aiohttp {s['peer_bare_aiohttp']['req_per_s']:.0f}, "
            f"chunked {s['peer_chunked_aiohttp']['req_per_s']:.0f} req/s",
            f"{s['ratio_vs_bare_aiohttp']:.2f}x / {s['ratio_vs_chunked_aiohttp']:.2f}x",
            _mark(s["meets_goal"]),
        )
    ]


def memory_rows(m: dict[str, Any]) -> list[Row]:
    """Bytes per live series: store, page cache, history and churn, by RSS and tracemalloc."""
    rss, t, ch = m["rss"], m["tracemalloc"], m["churn_mixed"]
    goal = m["goal_bytes_per_series"]
    peer_rss = f"prometheus_client {rss['peer_prometheus_client_bytes_per_series']:.0f} B"
    return [
        Row(
            "memory, store (latest values) + Normalisers, per live series (RSS)",
            f"{rss['bytes_per_series']:.0f} B",
            f"<= {goal:.0f} B",
            peer_rss,
            f"{m['ratio_vs_prometheus_client']:.1f}x less",
            _mark(rss["bytes_per_series"] <= goal),
        ),
        Row(
            f"memory, same, tracemalloc ({t['nodes']} nodes)",
            f"{t['bytes_per_series']:.0f} B",
            f"<= {goal:.0f} B",
            f"prometheus_client {t['peer_prometheus_client_bytes_per_series']:.0f} B",
            f"{t['peer_prometheus_client_bytes_per_series'] / t['bytes_per_series']:.1f}x less",
            _mark(t["bytes_per_series"] <= goal),
        ),
        _figure(
            "memory, MetricsPage cache per live series (RSS: chunks / +bodies)",
            f"{rss['page_node_chunks_bytes_per_series']:.0f} B / "
            f"{rss['page_bytes_per_series']:.0f} B",
        ),
        _figure(
            "memory, store's History per live series, 2 points each (RSS / tracemalloc)",
            f"{rss['history_bytes_per_series']:.0f} B / {t['history_bytes_per_series']:.0f} B",
            peer_rss,
        ),
        Row(
            f"memory, mixed flavours over {ch['passes']} scrapes (tracemalloc, peak / final)",
            f"{ch['peak_bytes_per_series']:.0f} B / {ch['final_bytes_per_series']:.0f} B",
            f"<= {goal:.0f} B",
            "-",
            "-",
            _mark(ch["peak_bytes_per_series"] <= goal),
        ),
    ]


def push_rows(p: dict[str, Any]) -> list[Row]:
    """The push API under 5,000 agents."""
    pull, paced, seen = p["peer_pull"], p["paced"], p["visible"]
    goal_core = p["goal_accepted_per_core_s"]
    return [
        Row(
            f"push accepted per collector core-second ({p['nodes']:,} agents, steady)",
            _rate(p["accepted_per_collector_core_s"]),
            f">= {_rate(goal_core)} per core",
            f"pull path {pull['us_median']:,.0f} us/node-snapshot in process",
            f"push {p['push_http_us_per_snapshot']:,.0f} us = "
            f"{p['ratio_push_http_vs_pull']:.1f}x pull",
            _mark(p["accepted_per_collector_core_s"] >= goal_core),
        ),
        Row(
            f"push first round (every node new), in {p['fill']['seconds']:.0f} s",
            f"{p['nodes_in_store']:,} of {p['nodes']:,} nodes; "
            f"{p['cold_accepted_per_collector_core_s']:,.0f}/core-s",
            f"all {p['nodes']:,}",
            "-",
            "-",
            _mark(p["nodes_in_store"] == p["nodes"]),
        ),
        Row(
            f"push accept latency p50 / p99 at {p['offered_per_s']:,.0f}/s offered",
            f"{paced['latency_p50_ms']:,.1f} / {paced['latency_p99_ms']:,.1f} ms"
            + (
                f"; {paced['not_sent']:,} pushes not sent in the window (counts as missed)"
                if paced["not_sent"]
                else ""
            ),
            f"p99 <= {p['goal_accept_p99_ms']:.0f} ms",
            f"at {p['offered_per_s'] / 2:,.0f}/s: {p['light']['latency_p99_ms']:,.1f} ms p99",
            "-",
            _mark(p["accept_p99_ms"] <= p["goal_accept_p99_ms"]),
        ),
        Row(
            "push-to-visible on gzip /metrics p50 / p99 (page built)",
            f"{seen['visible_p50_ms']:,.0f} / {p['visible_p99_ms']:,.0f} ms",
            f"p99 <= {p['goal_visible_p99_ms']:.0f} ms",
            f"push to found by a full gzip read: {seen['full_read_ms_median']:,.0f} ms",
            "-",
            _mark(p["visible_p99_ms"] <= p["goal_visible_p99_ms"]),
        ),
    ]


def agent_rows(a: dict[str, Any]) -> list[Row]:
    """The agent's footprint on one node."""
    process, fake = a["process"], a["snapshot_with_fake_nvml"]
    return [
        Row(
            f"agent CPU, % of one core ({a['cards']} cards, {a['regions']} regions, "
            f"{a['interval_s']:g} s interval)",
            f"{a['core_percent']:.3f}%",
            f"< {a['goal_core_percent']:g}%",
            f"snapshot+gzip in process, fake NVML: {fake['snapshot_and_gzip_ms']:.1f} ms",
            "-",
            _mark(a["core_percent"] < a["goal_core_percent"]),
        ),
        Row(
            "agent RSS (peak)",
            f"{a['rss_mib']:.1f} MiB ({process['rss_mib_peak']:.1f})",
            f"< {a['goal_rss_mib']:g} MiB",
            f"bare python {process['bare_python_rss_mib']:.1f} MiB",
            f"{a['rss_mib'] / process['bare_python_rss_mib']:.1f}x",
            _mark(a["rss_mib"] < a["goal_rss_mib"]),
        ),
    ]


def status_rows(s: dict[str, Any]) -> list[Row]:
    """The status page's work per request, beside the same page without pagination."""
    peer = s["peer_all_rows"]
    return [
        _figure(
            f"status page GET / at {s['nodes']:,} nodes ({s['sources']:,} sources), {label}: "
            "CPU p50 (wall p50 / p99)",
            f"{p['cpu_p50_ms']:.0f} ms ({p['p50_ms']:.0f} / {p['p99_ms']:.0f} ms)",
            f"every source on one page: {peer['cpu_p50_ms']:.0f} ms CPU",
            f"{peer['cpu_p50_ms'] / p['cpu_p50_ms']:.0f}x less",
        )
        for p, label in ((s["first_page"], "first page"), (s["failing_page_3"], "failing, page 3"))
    ]


def shards_rows(s: dict[str, Any]) -> list[Row]:
    """Nodes over shards x replicas, and a replica killed mid-run (also in ``shards.md``)."""
    layout = f"{s['nodes']:,} nodes, {s['shards']} shards x {s['replicas']} replicas"
    placed = s["every_node_in_exactly_one_shard"] and s["replicas_hold_the_same_nodes"]
    kept = s["peers_hold_every_round"] and s["restarted_holds_every_round_since_the_kill"]
    down = [d["delivered_to_live_replicas_s"] for d in s["delivery"] if d["replica_down"]]
    up = [d["delivered_to_live_replicas_s"] for d in s["delivery"][:1]]
    return [
        Row(
            f"{layout}: every node in exactly one shard",
            ", ".join(f"{n:,}" for n in s["nodes_per_shard"].values()) + " nodes per shard",
            "each node once",
            "-",
            "-",
            _mark(placed and s["placement_agrees_with_the_hash"]),
        ),
        Row(
            f"{layout}: replica {s['killed']} killed for {len(down)} rounds",
            f"peers hold {s['rounds']}/{s['rounds']} rounds of every node; restarted one "
            f"replayed in {s['replay_after_restart_s']} s",
            "no pushed interval lost",
            f"round to live replicas: {up[0]} s all up, {max(down)} s one down",
            "-",
            _mark(kept and s["each_series_once_per_replica"]),
        ),
    ]


def _ms(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"


def _latency(s: dict[str, Any]) -> str:
    return f"{_ms(s['p50_ms'])} / {_ms(s['p99_ms'])} ms (n={s['repeats']})"


def query_rows(q: dict[str, Any]) -> list[Row]:
    """The query surfaces: history, PromQL in process and over HTTP, REST; Prometheus beside."""
    return [*history_rows(q), *surface_rows(q), rest_row(q), agreement_row(q)]


def history_rows(q: dict[str, Any]) -> list[Row]:
    """The history's fill time and its bytes per kept point, beside Prometheus."""
    f, written = q["fill"], q["peer_prometheus"]["remote_write"]
    walk, traced = q["history_walk"], q["history_tracemalloc"]
    prometheus_per_point = written["prometheus_rss_mib"] * 2**20 / q["history_points"]
    return [
        _figure(
            f"history fill: {q['nodes']:,} nodes x {q['rounds']} rounds, {q['step_s']:.0f} s apart "
            f"({q['series']:,} live series, {q['history_points'] / 1e6:.1f}M points)",
            f"{f['wall_s']:.0f} s wall; collector {f['collector_s']:.0f} s "
            f"(normalise {f['normalise_s']:.0f}, put {f['put_s']:.0f})",
            f"Prometheus remote write {written['send_s']:.0f} s",
        ),
        Row(
            f"history bytes per kept point (tracemalloc, {traced['nodes']} nodes)",
            f"{traced['bytes_per_point']:.1f} B",
            f"<= {q['goal_bytes_per_point']:.0f} B",
            "-",
            "-",
            _mark(traced["bytes_per_point"] <= q["goal_bytes_per_point"]),
        ),
        Row(
            "history bytes per kept point (walk of all nodes: with / without series keys)",
            f"{walk['bytes_per_point']:.1f} B / {walk['bytes_per_point_without_keys']:.1f} B",
            f"<= {q['goal_bytes_per_point']:.0f} B",
            f"Prometheus whole-process RSS {prometheus_per_point:.0f} B",
            f"{prometheus_per_point / walk['bytes_per_point']:.1f}x less (with keys)",
            "-",
        ),
    ]


def surface_rows(q: dict[str, Any]) -> list[Row]:
    """One instant and one range query, in process and over HTTP, beside Prometheus over HTTP."""
    surfaces = (
        ("instant", "in process", q["in_process_instant"], q["goal_instant_p99_ms"]),
        ("range", "in process", q["in_process_range"], q["goal_range_p99_ms"]),
        ("instant", "HTTP /prometheus/api/v1/query", q["http_instant"], q["goal_instant_p99_ms"]),
        ("range", "HTTP /prometheus/api/v1/query_range", q["http_range"], q["goal_range_p99_ms"]),
    )
    out: list[Row] = []
    for kind, where, s, goal in surfaces:
        theirs = q["peer_prometheus"][kind]
        what = "now" if kind == "instant" else f"last hour, step {q['step_s']:.0f} s"
        out.append(
            Row(
                f"`{q['query']}` {what}, {where}: p50 / p99",
                _latency(s)
                + (
                    f"; first after the fill {_ms(q['in_process_cold_instant_ms'])} ms"
                    if s is q["in_process_instant"]
                    else ""
                ),
                f"p99 <= {_ms(goal)} ms",
                f"Prometheus 2.42 HTTP {_latency(theirs)}",
                f"{s['p50_ms'] / theirs['p50_ms']:.1f}x / {s['p99_ms'] / theirs['p99_ms']:.1f}x",
                _mark(s["p99_ms"] <= goal),
            )
        )
    return out


def rest_row(q: dict[str, Any]) -> Row:
    """The REST node list's latency, or why it was not measured."""
    rest = q["rest_nodes"]
    if rest is None:
        return Row(
            "REST GET /api/v1/nodes: p50 / p99",
            f"not measured: REST not present ({q['rest_served_by']})",
            f"p99 <= {q['goal_rest_p99_ms']:.0f} ms",
            "-",
            "-",
            "-",
        )
    return Row(
        f"REST GET /api/v1/nodes ({rest['nodes_listed']:,} nodes, "
        f"{rest['bytes'] / 1e6:.1f} MB): p50 / p99",
        f"{_latency(rest)}; first {_ms(rest['first_ms'])} ms",
        f"p99 <= {q['goal_rest_p99_ms']:.0f} ms",
        "-",
        "-",
        _mark(rest["p99_ms"] <= q["goal_rest_p99_ms"]),
    )


def agreement_row(q: dict[str, Any]) -> Row:
    """Whether our answers equal Prometheus', with the first problem of each that does not."""
    checks = q["agreement"]
    return Row(
        "answers equal Prometheus' (label sets; values within 1e-9; in process and HTTP)",
        "yes"
        if q["answers_agree"]
        else "NO: "
        + "; ".join(f"{k}: {v['first_problems'][:1]}" for k, v in checks.items() if not v["agree"]),
        "equal",
        f"instant {checks['instant_http']['series']:,} series, range "
        f"{checks['range_http']['points']:,} points",
        "-",
        _mark(q["answers_agree"]),
    )


def table(rows_: list[Row]) -> str:
    """A markdown table of ``rows_``."""
    head = Row("benchmark", "measured", "goal", "peer (same run)", "ratio", "meets goal")
    lines = [head, Row(*("---",) * 6), *rows_]
    return "\n".join("| " + " | ".join(asdict(row).values()) + " |" for row in lines)


def benches(budget: query.Budget) -> dict[str, Callable[[], dict[str, Any]]]:
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


def foundation_md(
    meta: dict[str, Any], budget: query.Budget, markdown: str, query_markdown: str
) -> str:
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
        "included (written by remote write: see `bench/query.py`).\n\n"
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
    budget = query.QUICK if quick else query.Budget()
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
