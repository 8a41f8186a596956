"""The load bench's report: ``bench/results/load.md`` (and ``load.json``)."""

from __future__ import annotations

import datetime
import os
import platform
from typing import Any

from bench.kit.table import write_result


def accounted(r: dict[str, Any]) -> tuple[bool, str]:
    """Whether every push not accepted was refused by a limit the collector counted.

    Pushes answered neither 204 nor a counted refusal (a connection error, a
    timeout, a 5xx), or never sent, are losses no limit explains; so are
    failed scrapes and sources down.
    """
    push, own = r["push"], r["collector"]
    statuses: dict[str, int] = push.get("statuses", {})
    accepted = sum(n for k, n in statuses.items() if k.endswith(" 204"))
    refused_seen = sum(n for k, n in statuses.items() if k.split()[-1] in ("429", "413"))
    counted = sum(own["push_refused"].values())
    lost = sum(statuses.values()) - accepted - refused_seen
    scrape_errors = sum(own["scrape_errors"].values())
    unsent = push.get("late_unsent", 0)
    ok = (
        lost == 0
        and unsent == 0
        and refused_seen <= counted
        and scrape_errors == 0
        and own["sources_down"] == 0
    )
    return ok, (
        f"pushes: {accepted:,} accepted, {refused_seen:,} refused by a limit "
        f"(collector counted {counted:,.0f}: {own['push_refused'] or 'none'}), {lost:,} lost, "
        f"{unsent:,} never sent (the collector fell {30:g}+ s behind); "
        f"scrape errors {scrape_errors:,.0f} ({own['scrape_errors'] or 'none'}), "
        f"sources down {own['sources_down']}, unowned regions {own['push_unowned_regions']:,.0f}"
    )


def summary(r: dict[str, Any]) -> list[tuple[str, str, str, bool | None]]:
    """Rows for ``python -m bench``'s table: (what, measured, goal, met)."""
    push, ok = r["push"], accounted(r)[0]
    out: list[tuple[str, str, str, bool | None]] = [
        (
            f"load x{r['scale']:g}: push accept p50 / p99 ({push['offered_per_s']:,.0f}/s offered)",
            f"{push['p50_ms']:,.1f} / {push['p99_ms']:,.1f} ms",
            "-",
            None,
        )
    ]
    for name, s in r["surfaces"].items():
        out.append(
            (
                f"load x{r['scale']:g}: {name}",
                f"{s['p50_ms']:,.1f} / {s['p99_ms']:,.1f} ms",
                "-",
                None,
            )
        )
    rss = r["collector_rss_mib"]
    out.append(
        (
            f"load x{r['scale']:g}: collector CPU / peak RSS; nothing dropped beyond the limits",
            f"{r['collector_cpu_cores']:.2f} cores / {rss['peak']:,.0f} MiB; {'yes' if ok else 'NO'}",
            "nothing lost",
            ok,
        )
    )
    return out


def render(r: dict[str, Any]) -> str:
    """The markdown report."""
    push = r["push"]
    rows = [
        (
            f"push accept ({r['agents']:,} agents every {r['push_interval_s']:g} s = "
            f"{push['offered_per_s']:,.0f}/s offered)",
            f"{push['p50_ms']:,.1f} / {push['p99_ms']:,.1f} ms (max {push['max_ms']:,.0f}, n={push['measured']:,})",
        )
    ]
    for name, s in r["surfaces"].items():
        bad = {k: v for k, v in s["statuses"].items() if k != "200"}
        rows.append(
            (
                f"{name}, {s['offered_per_s']:g}/s",
                f"{s['p50_ms']:,.1f} / {s['p99_ms']:,.1f} ms (max {s['max_ms']:,.0f}, n={s['requests']:,}"
                f"{', not 200: ' + str(bad) if bad else ''}; {s['mean_body_bytes'] / 1e3:,.0f} kB each)",
            )
        )
    rss = r["collector_rss_mib"]
    ok, how = accounted(r)
    own = r["collector"]
    lines = [
        "# Cluster-scale load",
        "",
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, Python "
        f"{platform.python_version()}, {os.cpu_count()} CPUs shared with other work "
        f"(load average {', '.join(f'{x:.1f}' for x in os.getloadavg())} at the end).",
        "",
        f"**Scaled to {r['scale']:g} of the target cluster** (5,000 agents, 1,000 monitors): "
        f"{r['agents']:,} agents pushing every {r['push_interval_s']:g} s and {r['monitors']:,} "
        f"monitors scraped every {r['scrape_interval_s']:g} s, "
        f"{50 * r['scale']:g} REST requests/s and {5 * r['scale']:g} range queries/s (the shape "
        "kept, every rate scaled), 10 scrapers of `/metrics` (gzip) as the target shape has: one 2-core "
        "machine runs the collector, the monitors, the agents and the readers at once, with "
        f"other work. Measured for {r['seconds']:g} s after a warm-up "
        f"({r['warm_nodes']:,} of {r['agents'] + r['monitors']:,} nodes on the page after {r['warm_s']:.0f} s). Latency counts from when a "
        "request was due (open loop); p99 of fewer than 100 requests is their maximum.",
        "",
        "| surface | p50 / p99 |",
        "|---|---|",
        *(f"| {what} | {measured} |" for what, measured in rows),
        "",
        "| collector | measured |",
        "|---|---|",
        f"| CPU | {r['collector_cpu_cores']:.2f} cores |",
        f"| RSS (start / end / peak of the window) | {rss['start']:,.0f} / {rss['end']:,.0f} / {rss['peak']:,.0f} MiB |",
        f"| live series / nodes on the page | {own['live_series']:,.0f} / {own['nodes']:,} |",
        f"| nothing dropped that the limits did not drop | {'yes' if ok else 'NO'}: {how} |",
        f"| tracebacks in the children's logs | {r['tracebacks']} |",
        f"| monitors' requests served (whole run) | {r['monitors_served'].get('requests', 0):,} |",
        f"| agents' process CPU | {push['cpu_s']:.1f} s |",
        "",
        "Details: `load.json`. Run: `python -m bench load` (`LOAD_SCALE`, `LOAD_SECONDS`).",
        "",
    ]
    return "\n".join(lines)


def write_report(r: dict[str, Any]) -> None:
    """Write ``load.md`` and ``load.json`` and print the markdown."""
    text = render(r)
    write_result("load", text, r)
    print(text)
