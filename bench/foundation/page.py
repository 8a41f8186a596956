"""/metrics rebuild after one node changes, with the full 1,000-node store.

Why: every scrape of any node changes the store, so the page is rebuilt up to
once per scrape landing; its cost bounds how fresh the page can be. The page is
warm (every node's chunks rendered once), then one node gets a new batch and
``MetricsPage.body`` is timed: plain (the goal) and, after another change, gzip.

Two self-metrics setups: ``bare`` (SelfMetrics with no targets, as the brief
sets it up) and ``with_sources``: SelfMetrics that has recorded one scrape per
node, as in a running collector, whose per-source gauges (4 x 1,000 series) are
re-rendered by prometheus_client on every page build (``selfmetrics_render_ms``
times that part alone).
"""

from __future__ import annotations

import asyncio
from typing import Any

from bench.kit.cluster import HAMI, STEP, Cluster, warm
from bench.kit.timing import median, settle, stopwatch
from collector.selfmetrics import SelfMetrics
from collector.store.latest import Store
from collector.web.metrics import MetricsPage

GOAL_MS = 50.0
REPEATS = 9


def fill(c: Cluster) -> Store:
    """A new store holding the cluster's latest batches (its history starts now: seconds)."""
    store = Store(stale_after=1e9)
    for source, batch in c.held():
        store.put(source, batch, 0.0)
    return store


def record_scrapes(c: Cluster, metrics: SelfMetrics) -> None:
    """Record one good scrape per node, as the scrape stage would."""
    for source, batch in c.held():
        metrics.scraped(source, 0.05, batch, 1.7e9)


def change_one(c: Cluster, store: Store, index: int, later: int) -> None:
    """Give node ``index`` a new batch: its state ``later`` steps after the cluster's."""
    node = c.nodes[index]
    when = c.now + STEP * later
    node.step(when)
    batch = c.normalisers[index].normalise(node.exposition(when))
    store.put(c.sources[index], batch, 1.0)


async def measure(c: Cluster, store: Store, with_sources: bool) -> dict[str, Any]:
    """Full build, then rebuild times after one node changes (plain, then gzip)."""
    metrics = SelfMetrics(store)
    if with_sources:
        record_scrapes(c, metrics)
    page = MetricsPage(store, metrics)
    settle()
    first: list[float] = []
    with stopwatch(first):
        plain = await page.body(False, False)
    with stopwatch(first):
        packed = await page.body(False, True)
    rebuild: list[float] = []
    rebuild_gzip: list[float] = []
    later = 1 + REPEATS * with_sources  # new values in each measure too
    for repeat in range(REPEATS):
        change_one(c, store, 2 * repeat, later + repeat)
        with stopwatch(rebuild):
            plain = await page.body(False, False)
        change_one(c, store, 2 * repeat + 1, later + repeat)
        with stopwatch(rebuild_gzip):
            packed = await page.body(False, True)
    render: list[float] = []
    for _ in range(3):
        with stopwatch(render):
            metrics.render(False)
    ms = median(rebuild) * 1e3
    return {
        "first_build_ms": first[0] * 1e3,
        "first_build_gzip_ms": first[1] * 1e3,
        "rebuild_ms": ms,
        "rebuild_ms_all": [t * 1e3 for t in rebuild],
        "rebuild_gzip_ms": median(rebuild_gzip) * 1e3,
        "selfmetrics_render_ms": median(render) * 1e3,
        "page_bytes": sum(map(len, plain)),
        "page_gzip_bytes": sum(map(len, packed)),
        "page_lines": sum(part.count(b"\n") for part in plain),
        "goal_ms": GOAL_MS,
        "meets_goal": ms <= GOAL_MS,
    }


def run() -> dict[str, Any]:
    """Rebuild times of the all-HAMI cluster's page, bare and with per-source self metrics."""
    c = warm(HAMI)
    store = fill(c)

    async def both() -> dict[str, Any]:
        return {
            "bare": await measure(c, store, with_sources=False),
            "with_sources": await measure(c, store, with_sources=True),
        }

    return asyncio.run(both())
