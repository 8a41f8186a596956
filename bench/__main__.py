"""``python -m bench``: run every benchmark, print a table, save JSON and markdown.

Each figure is printed with its goal (from the issue) and, where there is one,
the peer measured in the same run and the ratio to it. Results are written to
``bench/results/foundation.json`` and ``foundation.md`` (overwritten).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import ingest, memory, page, serve

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


def rows(r: dict[str, Any]) -> list[Row]:
    """The summary table of all results."""
    out: list[Row] = []
    for name in ("hami", "mixed"):
        i = r["ingest"][name]
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
            Row(
                f"ingest cold (first scrape, strict path), {name}",
                _rate(i["cold_samples_per_s"]),
                "-",
                f"prometheus_client {peer}",
                f"{i['cold_ratio_vs_prometheus_client']:.1f}x",
                "-",
            )
        )
        if i["churn_samples_per_s"] is not None:
            out.append(
                Row(
                    f"ingest pass with pod churn, {name}",
                    _rate(i["churn_samples_per_s"]),
                    "-",
                    f"prometheus_client {peer}",
                    f"{i['churn_samples_per_s'] / i['peer_prometheus_client_samples_per_s']:.1f}x",
                    "-",
                )
            )
    for name, label in (
        ("bare", "bare self metrics"),
        ("with_sources", "+1,000 sources' self metrics"),
    ):
        p = r["page"][name]
        out.append(
            Row(
                f"/metrics rebuild after 1 node changed, plain ({label})",
                f"{p['rebuild_ms']:.1f} ms",
                f"<= {p['goal_ms']:.0f} ms",
                "-",
                "-",
                _mark(p["meets_goal"]),
            )
        )
    p = r["page"]["bare"]
    out.append(
        Row(
            "/metrics rebuild after 1 node changed, gzip (bare)",
            f"{p['rebuild_gzip_ms']:.0f} ms",
            "-",
            "-",
            "-",
            "-",
        )
    )
    out.append(
        Row(
            "/metrics page size, plain / gzip",
            f"{p['page_bytes'] / 1e6:.1f} MB / {p['page_gzip_bytes'] / 1e6:.1f} MB",
            "-",
            "-",
            "-",
            "-",
        )
    )
    s = r["serve"]
    out.append(
        Row(
            f"serve cached gzip /metrics ({s['body_bytes'] / 1e6:.1f} MB), {s['connections']} conns",
            f"{s['req_per_s']:.0f} req/s ({s['server_cpu_ms_per_request']:.1f} ms CPU/req)",
            f">= {s['goal_req_per_s']:.0f} req/s",
            f"bare aiohttp {s['peer_bare_aiohttp']['req_per_s']:.0f}, "
            f"chunked {s['peer_chunked_aiohttp']['req_per_s']:.0f} req/s",
            f"{s['ratio_vs_bare_aiohttp']:.2f}x / {s['ratio_vs_chunked_aiohttp']:.2f}x",
            _mark(s["meets_goal"]),
        )
    )
    m = r["memory"]
    out.append(
        Row(
            "memory, store (latest values) + Normalisers, per live series (RSS)",
            f"{m['rss']['bytes_per_series']:.0f} B",
            f"<= {m['goal_bytes_per_series']:.0f} B",
            f"prometheus_client {m['rss']['peer_prometheus_client_bytes_per_series']:.0f} B",
            f"{m['ratio_vs_prometheus_client']:.1f}x less",
            _mark(m["rss"]["bytes_per_series"] <= m["goal_bytes_per_series"]),
        )
    )
    t = m["tracemalloc"]
    out.append(
        Row(
            f"memory, same, tracemalloc ({t['nodes']} nodes)",
            f"{t['bytes_per_series']:.0f} B",
            f"<= {m['goal_bytes_per_series']:.0f} B",
            f"prometheus_client {t['peer_prometheus_client_bytes_per_series']:.0f} B",
            f"{t['peer_prometheus_client_bytes_per_series'] / t['bytes_per_series']:.1f}x less",
            _mark(t["bytes_per_series"] <= m["goal_bytes_per_series"]),
        )
    )
    out.append(
        Row(
            "memory, MetricsPage cache per live series (RSS: chunks / +bodies)",
            f"{m['rss']['page_node_chunks_bytes_per_series']:.0f} B / "
            f"{m['rss']['page_bytes_per_series']:.0f} B",
            "-",
            "-",
            "-",
            "-",
        )
    )
    out.append(
        Row(
            "memory, store's History per live series, 2 points each (RSS / tracemalloc)",
            f"{m['rss']['history_bytes_per_series']:.0f} B / {t['history_bytes_per_series']:.0f} B",
            "-",
            f"prometheus_client {m['rss']['peer_prometheus_client_bytes_per_series']:.0f} B",
            "-",
            "-",
        )
    )
    ch = m["churn_mixed"]
    out.append(
        Row(
            f"memory, mixed flavours over {ch['passes']} scrapes (tracemalloc, peak / final)",
            f"{ch['peak_bytes_per_series']:.0f} B / {ch['final_bytes_per_series']:.0f} B",
            f"<= {m['goal_bytes_per_series']:.0f} B",
            "-",
            "-",
            _mark(ch["peak_bytes_per_series"] <= m["goal_bytes_per_series"]),
        )
    )
    return out


def table(rows_: list[Row]) -> str:
    """A markdown table of ``rows_``."""
    head = Row("benchmark", "measured", "goal", "peer (same run)", "ratio", "meets goal")
    lines = [head, Row(*("---",) * 6), *rows_]
    return "\n".join("| " + " | ".join(asdict(row).values()) + " |" for row in lines)


def main() -> None:
    """Run the benchmarks in order (ingest first: it needs cold caches)."""
    benches: dict[str, Callable[[], dict[str, Any]]] = {
        "ingest": ingest.run,
        "page": page.run,
        "serve": serve.run,
        "memory": memory.run,
    }
    results: dict[str, Any] = {}
    seconds: dict[str, float] = {}
    began = time.perf_counter()
    for name, run in benches.items():
        print(f"running {name} ...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        results[name] = run()
        seconds[name] = round(time.perf_counter() - start, 1)
    summary = rows(results)
    total = round(time.perf_counter() - began, 1)
    load = os.getloadavg()
    meta: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average_after": load,
        "seconds": {**seconds, "total": total},
    }
    RESULTS.mkdir(exist_ok=True)
    document = {"meta": meta, "summary": [asdict(row) for row in summary], "results": results}
    (RESULTS / "foundation.json").write_text(json.dumps(document, indent=2) + "\n")
    markdown = table(summary)
    (RESULTS / "foundation.md").write_text(
        f"# Foundation benchmarks\n\n{meta['date']}, Python {meta['python']}, "
        f"{meta['cpus']} CPUs, {total} s in all "
        f"(load average after: {', '.join(f'{x:.2f}' for x in load)}).\n\n"
        f"{markdown}\n\nDetails, per-repeat figures and peers' own numbers: `foundation.json`.\n"
    )
    print(markdown)
    print(f"\n{meta['seconds']}; written to {RESULTS}/foundation.json and .md")


if __name__ == "__main__":
    main()
