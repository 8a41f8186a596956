"""``python -m bench load``: one collector under every surface's load at once.

The shape (a cluster at scale): 5,000 agents pushing every 5 s, 1,000
pulled monitors, 10 scrapers of ``/metrics`` (gzip), 50 REST requests/s and
5 Grafana-like range queries/s, all at once. On this machine (2 cores shared
with other work) the cluster is scaled by ``LOAD_SCALE`` (default
:data:`SCALE`): agents, monitors and the REST and query rates are multiplied
by it, the 10 scrapers are kept; the results say so.

Processes: the real collector (``build_app`` as ``serve`` builds it, its
directory holding every simulated agent's pods, shared-token push auth, the
monitors from a file_sd targets file) in one; the monitors
(:mod:`bench.load.monitors`) in another; the agents (:mod:`bench.load.agents`)
in a third; the readers (scrapers, REST, range queries) here. After a warm-up
(every agent's first push, every monitor scraped) the window of
``LOAD_SECONDS`` is measured: p50/p99 of every surface, the collector's CPU
and RSS, and whether anything was dropped that the limits did not drop,
counted from the collector's own counters.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench.kit.cluster import ROOT
from bench.kit.processes import cpu_seconds, memory_mib, serve_collector
from bench.load.readers import Readers
from bench.soak.checks import OWN, parse_page
from testing.processes import stop

FULL = {"agents": 5000, "monitors": 1000}
SCALE = 0.2
"""Share of the target cluster and of its readers' rates run on this machine (2 cores for the
collector, the agents, the monitors and the readers)."""
INTERVAL = 5.0
"""The agents' push interval."""
SCRAPE_INTERVAL = 15.0
"""The collector's scrape interval of the monitors (its default)."""
WARMUP = 90.0
"""Seconds from the agents' start to the measured window: every node in, caches warm."""
SECONDS = 60.0


def serve(agents: int, targets: str, token_file: str) -> None:
    """Run the real collector on a loopback port (printed first) with every agent's pods known."""
    from bench.push.run import directory

    serve_collector(
        directory(agents),
        targets_file=Path(targets),
        interval=SCRAPE_INTERVAL,
        push_auth="token",
        push_token_file=Path(token_file),
    )


def _child(*args: str, log: Path) -> subprocess.Popen[str]:
    with log.open("a") as err:
        return subprocess.Popen(
            [sys.executable, "-m", *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True
        )


def _first_line(process: subprocess.Popen[str], what: str) -> str:
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if not line:
        raise RuntimeError(f"{what} exited before it was ready (rc {process.poll()})")
    return line


async def _own(session: aiohttp.ClientSession, base: str) -> dict[str, Any]:
    """The collector's own counters and gauges that tell what it dropped and why."""
    async with session.get(base + "/metrics") as r:
        page = parse_page(await r.text())

    def by(name: str, label: str) -> dict[str, float]:
        return {labels.get(label, ""): v for labels, v in page.own.get(OWN + name, [])}

    return {
        "push_refused": by("push_refused_total", "reason"),
        "scrape_errors": by("scrape_errors_total", "reason"),
        "dropped_samples": page.value(OWN + "dropped_samples_total"),
        "push_unowned_regions": page.value(OWN + "push_unowned_regions_total"),
        "live_series": page.value(OWN + "live_series"),
        "nodes": len(page.series),
        "sources_down": sum(1 for _, v in page.own.get(OWN + "source_up", []) if v == 0),
    }


async def _measure(
    base: str, pid: int, agents: int, scale: float, seconds: float
) -> dict[str, Any]:
    """Run the readers for the window; the collector's CPU, RSS and counters at its end."""
    async with aiohttp.ClientSession() as session:
        nodes = [f"bench-node-{n:05d}" for n in range(0, agents, max(1, agents // 50))]
        readers = Readers(session, base, nodes, scale)
        cpu0, wall0 = cpu_seconds(pid), time.monotonic()
        rss: list[float] = []

        async def sample() -> dict[str, Any]:
            for _ in range(int(seconds)):  # one sample a second, the window long
                rss.append(memory_mib(pid)["VmRSS"])
                await asyncio.sleep(1.0)
            cpu, wall = cpu_seconds(pid) - cpu0, time.monotonic() - wall0
            return {"cpu_cores": cpu / wall, "own": await _own(session, base)}

        counted, surfaces = await asyncio.gather(sample(), readers.run(seconds))
    return {
        "surfaces": surfaces,
        "collector_cpu_cores": counted["cpu_cores"],
        "collector_rss_mib": {"start": rss[0], "end": rss[-1], "peak": max(rss)},
        "collector": counted["own"],
    }


async def _wait_warm(base: str, nodes: int, limit: float) -> tuple[float, int]:
    """Wait (at most ``limit`` s) until every node is on the page; seconds taken, nodes seen."""
    began = time.monotonic()
    seen = 0
    async with aiohttp.ClientSession() as session:
        while time.monotonic() - began < limit:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                seen = (await _own(session, base))["nodes"]
            if seen >= nodes:
                break
            await asyncio.sleep(2.0)
    return time.monotonic() - began, seen


def run(scale: float = SCALE, seconds: float = SECONDS) -> dict[str, Any]:
    """Start the three processes, warm up, measure, stop everything; the figures."""
    agents, monitors = (max(1, round(FULL[k] * scale)) for k in ("agents", "monitors"))
    with tempfile.TemporaryDirectory(prefix="hami-load-") as tmp:
        log, token = Path(tmp) / "children.log", Path(tmp) / "token"
        token.write_text(os.urandom(16).hex())
        targets = Path(tmp) / "targets.json"
        children: list[subprocess.Popen[str]] = []
        try:
            farm = _child("bench.load.monitors", str(monitors), str(targets), log=log)
            children.append(farm)
            _first_line(farm, "the monitors")
            collector = _child(
                "bench.load.run", "serve", str(agents), str(targets), str(token), log=log
            )
            children.append(collector)
            base = f"http://127.0.0.1:{_first_line(collector, 'the collector')}"
            pushers = _child(
                "bench.load.agents",
                base + "/api/v1/push",
                str(token),
                str(agents),
                str(INTERVAL),
                str(WARMUP),
                str(seconds),
                log=log,
            )
            children.append(pushers)
            began = time.monotonic()
            warm, warm_nodes = asyncio.run(_wait_warm(base, agents + monitors, WARMUP - 5))
            time.sleep(max(0.0, WARMUP - (time.monotonic() - began)))  # the agents' warm-up too
            result = asyncio.run(_measure(base, collector.pid, agents, scale, seconds))
            assert pushers.stdout is not None
            pushed = json.loads(pushers.stdout.readline() or "{}")
            pushers.wait(60)
            farm.terminate()
            assert farm.stdout is not None
            served = json.loads(farm.stdout.readline() or "{}")
        finally:
            for child in children:
                stop(child)
            log_text = log.read_text(errors="replace")
    return {
        "scale": scale,
        "agents": agents,
        "monitors": monitors,
        "scrape_interval_s": SCRAPE_INTERVAL,
        "push_interval_s": INTERVAL,
        "seconds": seconds,
        "warm_s": warm,
        "warm_nodes": warm_nodes,
        "push": pushed,
        "monitors_served": served,
        "tracebacks": log_text.count("Traceback (most recent call last)"),
        **result,
    }


if __name__ == "__main__":  # the collector's own process; the bench is `python -m bench load`
    cli = argparse.ArgumentParser(prog="python -m bench.load.run")
    helpers = cli.add_subparsers(dest="helper", required=True)
    one = helpers.add_parser("serve")
    one.add_argument("agents", type=int)
    one.add_argument("targets")
    one.add_argument("token_file")
    a = cli.parse_args()
    serve(a.agents, a.targets, a.token_file)
