"""The soak's report: one table of checks with verdicts, written to ``bench/results/soak.md``."""

from __future__ import annotations

import datetime
import math
import os
import platform
import statistics
from collections import Counter
from typing import Any

from bench.kit.table import write_result
from bench.soak.checks import OWN, slope_per_hour


def _flat(values: list[float], slack: float) -> tuple[bool, str]:
    """Whether the last third's peak stays within ``slack`` of the first third's."""
    if len(values) < 6:
        return True, "too few samples to judge"
    third = len(values) // 3
    first, last = max(values[:third]), max(values[-third:])
    return last <= first + slack, f"first third peak {first:.0f}, last third peak {last:.0f}"


def _memory_row(n: int, warm: list[Any], life: float) -> tuple[str, str, bool]:
    """The RSS of one collector process once its history is full, and its slope."""
    what = f"collector process {n}: RSS once its history is full"
    if len(warm) < 6 or warm[-1].t - warm[0].t < 60:
        return (
            what,
            f"not judged: the process lived {life:.0f} s (a longer SOAK_MINUTES judges it)",
            True,
        )
    rss = [s.rss_mib for s in warm]
    slope = slope_per_hour([(s.t, s.rss_mib) for s in warm])
    grown = statistics.median(rss[-3:]) - statistics.median(rss[:3])
    span = (warm[-1].t - warm[0].t) / 60
    return (
        f"{what} ({span:.1f} min)",
        f"{rss[0]:.0f} -> {rss[-1]:.0f} MiB (peak {max(rss):.0f}); slope {slope:+.1f} MiB/hour",
        grown <= max(4.0, 0.05 * rss[0]),
    )


def resource_rows(results: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """RSS slope, tasks and descriptors of each collector process, after its warm-up."""
    plan, rows = results["plan"], []
    by_pid: dict[int, list[Any]] = {}
    for s in results["samples"]:
        by_pid.setdefault(s.pid, []).append(s)
    for n, samples in enumerate(by_pid.values(), 1):
        began, life = samples[0].t, samples[-1].t - samples[0].t
        rows.append(_memory_row(n, [s for s in samples if s.t - began >= plan.memory_warmup], life))
        warm = [s for s in samples if s.t - began >= min(plan.warmup, 0.3 * life)]
        if len(warm) < 3:
            continue
        spare = [s.tasks - s.targets for s in warm if not math.isnan(s.tasks)]
        ok, how = _flat(spare, 8)
        rows.append(
            (
                f"collector process {n}: asyncio tasks minus targets",
                f"{min(spare, default=0):.0f}..{max(spare, default=0):.0f}; {how}",
                ok,
            )
        )
        fds = [float(s.fds) - s.targets for s in warm]
        ok, how = _flat(fds, 12)
        rows.append(
            (
                f"collector process {n}: open descriptors minus targets",
                f"{min(fds):.0f}..{max(fds):.0f}; {how}",
                ok,
            )
        )
    return rows


def check_rows(results: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """The oracle's findings, by kind of problem."""
    kinds: Counter[str] = Counter()
    for _, text in results["problems"]:
        kinds[_kind(text)] += 1
    rows = [
        (
            f"oracle reads of /metrics ({results['reads']})",
            f"{len(results['problems'])} problems",
            not results["problems"],
        )
    ]
    for kind in (
        "missing",
        "ghost",
        "duplicate",
        "fed by",
        "series",
        "refused",
        "no such node",
        "replay",
        "read failed",
        "other",
    ):
        rows.append((f"  {_LABELS[kind]}", str(kinds.get(kind, 0)), kinds.get(kind, 0) == 0))
    for kind, n in sorted(results["judged"].items()):
        rows.append((f"  node-reads judged: {kind}", str(n), n > 0))
    refused = results["refused"]
    answered: Counter[str] = Counter()
    for (kind, status), n in refused.items():
        answered[f"{kind} {status}"] += n
    rows.append(
        (
            "pushes sent to be refused (kind status: count)",
            ", ".join(f"{k}: {n}" for k, n in sorted(answered.items())) or "none",
            all(not 200 <= status < 300 for (_, status) in refused),
        )
    )
    for replay in results["replays"]:
        rows.append(
            (
                f"backlog replay across the collector restart, {replay['node']}",
                f"largest gap {replay['gap_s']:.1f} s (allowed {replay['allowed_s']:g}; "
                f"{replay['points']} points; closed {replay['closed_after_s']:.0f} s after the restart)",
                replay["gap_s"] <= replay["allowed_s"],
            )
        )
    if not results["replays"]:
        rows.append(
            ("backlog replay across the collector restart", "not checked (no restart)", False)
        )
    rows.append(
        (
            "collector log: tracebacks / ERROR lines",
            f"{results['tracebacks']} / {results['error_lines']}",
            results["tracebacks"] == 0,
        )
    )
    page = results.get("last_page")
    if page is not None:
        restarts = page.value(OWN + "task_restarts_total")
        rows.append(("task restarts (last process, its counter)", f"{restarts:.0f}", restarts == 0))
    return rows


_LABELS = {
    "missing": "live node missing (after its grace)",
    "ghost": "ghost node kept past stale_after + grace",
    "duplicate": "duplicate series",
    "fed by": "node fed by two sources at once",
    "series": "series differ from the oracle (two reads in a row)",
    "refused": "data of a refused push shown",
    "no such node": "node shown that does not exist",
    "replay": "pushed interval lost across a restart",
    "read failed": "/metrics read failed",
    "other": "other",
}


def _kind(text: str) -> str:
    for kind, needle in (
        ("missing", " missing ("),
        ("ghost", "ghost:"),
        ("duplicate", "duplicate series"),
        ("fed by", "fed by"),
        ("refused", "refused push"),
        ("no such node", "no such node"),
        ("replay", "backlog replay"),
        ("read failed", "read failed"),
        ("series", "series missing"),
        ("series", "pods "),
    ):
        if needle in text:
            return kind
    return "other"


def render(results: dict[str, Any]) -> tuple[str, bool]:
    """The report's markdown and whether every check passed."""
    plan = results["plan"]
    rows = check_rows(results) + resource_rows(results)
    passed = all(ok for _, _, ok in rows)
    lines = [
        "# Soak with faults",
        "",
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, {plan.minutes:g} minutes "
        f"(`SOAK_MINUTES`), Python {platform.python_version()}, {os.cpu_count()} CPUs shared "
        f"with other work. {plan.monitors} monitor nodes live of {plan.monitors + plan.spares} "
        f"(mixed flavours, {plan.cards} cards, {plan.allocations} vGPUs each) + {plan.agents} "
        f"agent-only nodes; scrape every {plan.interval:g} s (timeout {plan.timeout:g} s, "
        f"stale_after {plan.stale_after:g} s), agents push every {plan.agent_interval:g} s; "
        f"the API server down {plan.outage:g} s; a change is judged {plan.grace:g} s after it "
        f"happened (a missing node at once, a ghost after stale_after more). "
        f"Collector started {results['collector_starts']} times, agents {results['agent_starts']}.",
        "",
        f"**Verdict: {'PASS' if passed else 'FAIL'}**",
        "",
        "| check | measured | ok |",
        "|---|---|---|",
        *(f"| {what} | {measured} | {'yes' if ok else 'NO'} |" for what, measured, ok in rows),
        "",
        "## Faults and churn injected",
        "",
        "| event | count |",
        "|---|---|",
        *(f"| {what} | {n} |" for what, n in sorted(results["events"].items())),
        "",
    ]
    if results["problems"]:
        lines += ["## First problems", ""]
        lines += [f"- {t:.0f} s: {text}" for t, text in results["problems"][:30]]
        lines.append("")
    return "\n".join(lines), passed


def write_report(results: dict[str, Any]) -> bool:
    """Write ``soak.md``, print it, and return whether every check passed."""
    text, passed = render(results)
    write_result("soak", text)
    print(text)
    return passed
