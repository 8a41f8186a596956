"""The load bench's readers: scrapers of ``/metrics``, REST clients, Grafana-like range queries.

Each surface is driven open loop at its rate: a request's latency counts from
the time it was due, so a collector that falls behind shows it. Scrapers ask
for gzip and do not inflate (a Prometheus inflates on its own cores; here it
would take the collector's).
"""

from __future__ import annotations

import asyncio
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from bench.kit.timing import percentile

SCRAPERS = 10
SCRAPE_EVERY = 15.0
"""Each scraper's interval (Prometheus' default)."""
REST_PER_S = 50.0
QUERIES_PER_S = 5.0
QUERY_RANGE_S = 900.0
QUERY_STEP_S = 15.0
QUERIES = (
    "sum by (node) (hami_vgpu_memory_used_bytes)",
    "avg by (node) (hami_host_gpu_utilization_ratio)",
    "topk(10, sum by (namespace, pod) (hami_vgpu_memory_used_bytes))",
    "sum(hami_vgpu_memory_used_bytes) / sum(hami_vgpu_memory_limit_bytes)",
    'max_over_time(hami_host_gpu_utilization_ratio{{node="{node}"}}[5m])',
)
"""What a Grafana dashboard of vGPU usage asks, one after the other."""


@dataclass
class Surface:
    """One surface's latencies (from due time) and answers."""

    latencies: list[float] = field(default_factory=list)
    statuses: Counter[str] = field(default_factory=Counter)
    bytes: int = 0

    def figures(self, offered: float) -> dict[str, Any]:
        return {
            "offered_per_s": offered,
            "requests": sum(self.statuses.values()),
            "statuses": dict(self.statuses),
            "p50_ms": percentile(self.latencies, 50) * 1e3,
            "p99_ms": percentile(self.latencies, 99) * 1e3,
            "max_ms": max(self.latencies, default=0.0) * 1e3,
            "mean_body_bytes": self.bytes / max(1, len(self.latencies)),
        }


class Readers:
    """Every reading surface at its rate, for one window."""

    def __init__(
        self, session: aiohttp.ClientSession, base: str, nodes: list[str], scale: float
    ) -> None:
        self.session = session
        self.base = base
        self.nodes = nodes
        self.rest_per_s = REST_PER_S * scale
        self.queries_per_s = QUERIES_PER_S * scale

    def _rest(self, i: int) -> str:
        node = self.nodes[i % len(self.nodes)]
        choice = i % 10
        if choice < 6:
            return f"/api/v1/nodes/{node}"
        if choice < 8:
            return f"/api/v1/pods?node={node}"
        if choice < 9:
            return "/api/v1/nodes?limit=100"
        return "/api/v1/pods?namespace=team-a&limit=100"

    def _query(self, i: int) -> str:
        now = time.time()
        expr = QUERIES[i % len(QUERIES)].format(node=self.nodes[i % len(self.nodes)])
        q = urllib.parse.quote(expr, safe="")
        start, step = now - QUERY_RANGE_S, QUERY_STEP_S
        return f"/prometheus/api/v1/query_range?query={q}&start={start:.0f}&end={now:.0f}&step={step:g}"

    async def _paced(
        self,
        session: aiohttp.ClientSession,
        path: Callable[[int], str],
        headers: dict[str, str],
        rate: float,
        seconds: float,
        workers: int,
    ) -> Surface:
        surface = Surface()
        loop = asyncio.get_running_loop()
        start = loop.time() + 0.1
        total = int(rate * seconds)
        cursor = 0

        async def worker() -> None:
            nonlocal cursor
            while cursor < total:
                i = cursor
                cursor += 1
                at = start + i / rate
                if at - loop.time() > 0:
                    await asyncio.sleep(at - loop.time())
                try:
                    async with session.get(self.base + path(i), headers=headers) as r:
                        surface.bytes += len(await r.read())
                        surface.statuses[str(r.status)] += 1
                except (aiohttp.ClientError, TimeoutError) as exc:
                    surface.statuses[type(exc).__name__] += 1
                surface.latencies.append(loop.time() - at)

        await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(workers))), seconds + 120)
        return surface

    async def run(self, seconds: float) -> dict[str, Any]:
        """Drive every surface for ``seconds``; their figures."""
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(auto_decompress=False, timeout=timeout) as raw:
            gzip_only = {"Accept-Encoding": "gzip"}
            scrape_rate = SCRAPERS / SCRAPE_EVERY
            scrapes, rest, queries = await asyncio.gather(
                self._paced(raw, lambda i: "/metrics", gzip_only, scrape_rate, seconds, SCRAPERS),
                self._paced(self.session, self._rest, {}, self.rest_per_s, seconds, 32),
                self._paced(self.session, self._query, {}, self.queries_per_s, seconds, 16),
            )
        return {
            f"/metrics gzip ({SCRAPERS} scrapers, every {SCRAPE_EVERY:g} s)": scrapes.figures(
                scrape_rate
            ),
            "REST /api/v1 (nodes/{node}, pods?node=, nodes?limit=100, pods?namespace=)": rest.figures(
                self.rest_per_s
            ),
            f"range queries /prometheus/api/v1/query_range ({QUERY_RANGE_S / 60:g} min, step {QUERY_STEP_S:g} s)": queries.figures(
                self.queries_per_s
            ),
        }
