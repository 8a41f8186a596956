"""Summary rows of the query surfaces (:mod:`bench.query.run`), beside Prometheus."""

from __future__ import annotations

from typing import Any

from bench.kit.table import Row, figure, mark


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
        figure(
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
            mark(traced["bytes_per_point"] <= q["goal_bytes_per_point"]),
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
        ("instant", "in process", "in_process_instant"),
        ("range", "in process", "in_process_range"),
        ("instant", "HTTP /prometheus/api/v1/query", "http_instant"),
        ("range", "HTTP /prometheus/api/v1/query_range", "http_range"),
    )
    out: list[Row] = []
    for kind, where, name in surfaces:
        s, goal = q[name], q["p99_goals"][name]
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
                f"p99 <= {_ms(goal['goal_p99_ms'])} ms"
                + (
                    f" and <= {goal['goal_ratio_p99']:g}x Prometheus'"
                    if goal["goal_ratio_p99"] is not None
                    else ""
                ),
                f"Prometheus 2.42 HTTP {_latency(theirs)}",
                f"{s['p50_ms'] / theirs['p50_ms']:.1f}x / {s['p99_ms'] / theirs['p99_ms']:.1f}x",
                mark(goal["met"]),
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
        mark(rest["p99_ms"] <= q["goal_rest_p99_ms"]),
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
        mark(q["answers_agree"]),
    )
