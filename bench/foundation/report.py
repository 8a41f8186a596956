"""Summary rows of the foundation benches: ingest, the /metrics page, serving it, memory."""

from __future__ import annotations

from typing import Any

from bench.kit.table import Row, figure, mark, rate


def ingest_rows(ingest: dict[str, Any]) -> list[Row]:
    """Ingest rates, steady, cold and with churn, of each flavour mix beside prometheus_client."""
    out: list[Row] = []
    for name in ("hami", "mixed"):
        i = ingest[name]
        peer = rate(i["peer_prometheus_client_samples_per_s"])
        out.append(
            Row(
                f"ingest steady, {name} ({i['samples_per_pass']:,} samples/pass)",
                rate(i["steady_samples_per_s"]),
                f">= {rate(i['goal_samples_per_s'])}, >= {i['goal_ratio']:.0f}x",
                f"prometheus_client {peer}",
                f"{i['ratio_vs_prometheus_client']:.1f}x",
                mark(i["meets_goal"]),
            )
        )
        out.append(
            figure(
                f"ingest cold (first scrape, strict path), {name}",
                rate(i["cold_samples_per_s"]),
                f"prometheus_client {peer}",
                f"{i['cold_ratio_vs_prometheus_client']:.1f}x",
            )
        )
        if i["churn_samples_per_s"] is not None:
            out.append(
                figure(
                    f"ingest pass with pod churn, {name}",
                    rate(i["churn_samples_per_s"]),
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
            mark(p["meets_goal"]),
        )
        for p, label in (
            (page["bare"], "bare self metrics"),
            (page["with_sources"], "+1,000 sources' self metrics"),
        )
    ]
    bare = page["bare"]
    return [
        *out,
        figure(
            "/metrics rebuild after 1 node changed, gzip (bare)",
            f"{bare['rebuild_gzip_ms']:.0f} ms",
        ),
        figure(
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
            mark(s["meets_goal"]),
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
            mark(rss["bytes_per_series"] <= goal),
        ),
        Row(
            f"memory, same, tracemalloc ({t['nodes']} nodes)",
            f"{t['bytes_per_series']:.0f} B",
            f"<= {goal:.0f} B",
            f"prometheus_client {t['peer_prometheus_client_bytes_per_series']:.0f} B",
            f"{t['peer_prometheus_client_bytes_per_series'] / t['bytes_per_series']:.1f}x less",
            mark(t["bytes_per_series"] <= goal),
        ),
        figure(
            "memory, MetricsPage cache per live series (RSS: chunks / +bodies)",
            f"{rss['page_node_chunks_bytes_per_series']:.0f} B / "
            f"{rss['page_bytes_per_series']:.0f} B",
        ),
        figure(
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
            mark(ch["peak_bytes_per_series"] <= goal),
        ),
    ]
