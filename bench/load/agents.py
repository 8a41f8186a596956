"""The load bench's agents: N simulated agents pushing every INTERVAL s, in a process of their own.

``python -m bench.load.agents URL TOKEN_FILE AGENTS INTERVAL WARMUP SECONDS``
pushes each agent's snapshot (8 cards, 32 regions: :func:`bench.push.run.template`,
gzipped as the agent's pusher does, a shared bearer token) every INTERVAL
seconds at its own offset, open loop: a push's latency counts from the time
it was due, so a collector that falls behind shows it. Pushes due in the
first WARMUP seconds (every agent's first, which creates its series) are
counted apart. Prints one JSON object at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp

from bench.kit.timing import percentile
from bench.push.run import body, template

WORKERS = 128
"""Pushes in flight at most (5,000 agents each keep at most one)."""
GIVE_UP_S = 30.0
"""Pushes still unsent this long after the window are counted as not sent (the run ends)."""


async def run(
    url: str, token: str, agents: int, interval: float, warmup: float, seconds: float
) -> dict[str, Any]:
    """Push for ``warmup + seconds``; the measured window's figures."""
    now = time.time()
    templates = [template(n, now) for n in range(agents)]
    loop = asyncio.get_running_loop()
    start = loop.time() + 0.5
    measure_from, end = start + warmup, start + warmup + seconds
    due = sorted(
        (start + (n / agents + k) * interval, n, k + 1)
        for k in range(int((warmup + seconds) / interval) + 1)
        for n in range(agents)
    )
    due = [d for d in due if d[0] < end]
    latencies: list[float] = []
    statuses: Counter[str] = Counter()
    late_unsent = 0
    cursor = 0
    headers = {
        "Content-Type": "application/json",
        "Content-Encoding": "gzip",
        "Authorization": f"Bearer {token}",
    }
    cpu0 = time.process_time()

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal cursor, late_unsent
        while cursor < len(due):
            at, node, sequence = due[cursor]
            cursor += 1
            if at - loop.time() > 0:
                await asyncio.sleep(at - loop.time())
            if loop.time() > end + GIVE_UP_S:
                late_unsent += 1  # the collector fell this far behind: counted, not sent
                continue
            data = body(templates[node], sequence, time.time())
            phase = "measured" if at >= measure_from else "warmup"
            try:
                async with session.post(url, data=data, headers=headers) as r:
                    await r.read()
                    statuses[f"{phase} {r.status}"] += 1
            except (aiohttp.ClientError, TimeoutError) as exc:
                statuses[f"{phase} {type(exc).__name__}"] += 1
            if phase == "measured":
                latencies.append(loop.time() - at)

    timeout = aiohttp.ClientTimeout(total=30)
    connector = aiohttp.TCPConnector(limit=WORKERS)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        workers = [worker(session) for _ in range(WORKERS)]
        await asyncio.wait_for(asyncio.gather(*workers), warmup + seconds + 120)
    return {
        "agents": agents,
        "interval_s": interval,
        "offered_per_s": agents / interval,
        "measured_seconds": seconds,
        "sent": sum(statuses.values()),
        "late_unsent": late_unsent,
        "statuses": dict(statuses),
        "p50_ms": percentile(latencies, 50) * 1e3,
        "p99_ms": percentile(latencies, 99) * 1e3,
        "max_ms": max(latencies, default=0.0) * 1e3,
        "measured": len(latencies),
        "cpu_s": time.process_time() - cpu0,
    }


def main(argv: list[str]) -> None:
    """Parse the arguments, push, print the figures as JSON."""
    cli = argparse.ArgumentParser(prog="python -m bench.load.agents")
    for name, kind in (
        ("url", str),
        ("token_file", Path),
        ("agents", int),
        ("interval", float),
        ("warmup", float),
        ("seconds", float),
    ):
        cli.add_argument(name, type=kind)
    a = cli.parse_args(argv)
    token = a.token_file.read_text().strip()
    result = asyncio.run(run(a.url, token, a.agents, a.interval, a.warmup, a.seconds))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
