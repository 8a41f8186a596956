"""What the heap task's sweep and freeze cost at 1,000 nodes, against a plain full collection.

Why: :mod:`collector.memory.heap` spaces its sweeps by their CPU time (``SWEEP_SHARE``), so
the cost of one sweep at a cluster's size sets how often the frozen heap is
cleared of its dead cycles there. The heap is a store of 1,000 HAMi nodes
ingested over a few passes (history kept), their Normalisers, and a /metrics
page built plain and gzipped. Three timings, CPU seconds of this thread, the
median of :data:`REPEATS`:

* sweep: :func:`collector.memory.heap.sweep` (give the permanent generation back, collect
  everything, freeze again);
* peer: ``gc.collect()`` with nothing frozen, the full collection CPython
  starts on its own and that freezing keeps out of requests;
* freeze: :func:`collector.memory.heap.freeze` after one more pass was ingested (what a
  tick of the task does between sweeps).

Run: ``python -m bench heap [--nodes N]``; prints JSON.
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import time
from collections.abc import Callable
from typing import Any

from bench.kit.cluster import HAMI, NODES, Cluster
from collector.memory import heap
from collector.normalise.bodies import Normaliser
from collector.selfmetrics import SelfMetrics
from collector.store.latest import Store
from collector.web.metrics import MetricsPage

PASSES = 4
REPEATS = 5


def cpu(action: Callable[[], object]) -> float:
    """CPU seconds of this thread that ``action()`` took."""
    began = time.thread_time()
    action()
    return time.thread_time() - began


def filled(nodes: int) -> tuple[Cluster, MetricsPage]:
    """A cluster ingested :data:`PASSES` times and its /metrics page, built both ways."""
    c = Cluster(HAMI, nodes)
    c.store = Store(stale_after=1e9)
    c.normalisers = [Normaliser(n.name) for n in c.nodes]
    for _ in range(PASSES):
        c.tick += 1
        c.ingest(c.advance())
    page = MetricsPage(c.store, SelfMetrics(c.store))

    async def build() -> None:
        await page.body(False, False)
        await page.body(False, True)

    asyncio.run(build())
    return c, page


def measure(nodes: int = NODES) -> dict[str, Any]:
    """Build the heap, then time a sweep, its peer and a freeze."""
    c, page = filled(nodes)
    gc.unfreeze()
    gc.collect()
    tracked = len(gc.get_objects())
    peer = statistics.median(cpu(gc.collect) for _ in range(REPEATS))
    sweep = statistics.median(cpu(heap.sweep) for _ in range(REPEATS))
    freezes = []
    for _ in range(REPEATS):
        bodies = c.advance()
        c.tick += 1
        c.ingest(bodies)
        freezes.append(cpu(heap.freeze))
    freeze = statistics.median(freezes)
    del page
    return {
        "nodes": nodes,
        "live_series": c.live_series(),
        "tracked_objects": tracked,
        "sweep_s": sweep,
        "peer_full_collection_s": peer,
        "sweep_vs_peer": sweep / peer,
        "freeze_s": freeze,
        "freeze_vs_peer": freeze / peer,
        "sweep_interval_s": heap.sweep_interval(sweep),
        "sweep_share_of_time": sweep / heap.sweep_interval(sweep),
    }
