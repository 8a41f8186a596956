"""Memory per live series: the store and per-target Normalisers, the page cache, and a peer.

Why: a collector holds every live series of the cluster (~249k for 1,000 HAMI
nodes) plus each target's cache of the series texts it has seen; bytes per live
series decide the memory limit to give its pod.

Everything runs in a fresh subprocess (``python -m bench.foundation.memory --child``), so
nothing a previous benchmark left around is counted, and bodies are rendered
before the first reading. Two meters:

* RSS delta (``/proc/self/statm``) over all 1,000 nodes: what the pod's memory
  limit sees, allocator slack included; everything measured earlier stays alive,
  so a later delta cannot reuse memory an earlier step freed;
* ``tracemalloc`` over the first 50 nodes: bytes Python allocated and still
  holds, exact but slow (so a subset; the cost is linear in nodes).

Measured with each meter:

* ours: a Store and one Normaliser per node after ingesting every body twice
  (the second pass with new values), divided by live series: the latest values
  only, so the Store gets a History that keeps nothing (the peer keeps no
  history either);
* history: what the Store's History holds per live series once it has two
  points of each (its fixed per-series cost; each later point adds ~8 bytes);
* page: what a MetricsPage keeps once it has built both the plain and the gzip
  page (every node's rendered chunks, plus the two bodies);
* peer: prometheus_client holding the same series: a CollectorRegistry with one
  Gauge per family (label names: the family's), ``.labels(**labels).set(v)`` per
  series, label strings parsed in the measured region so the peer owns them;
* churn (tracemalloc): mixed flavours, whose Volcano / legacy / KAI bodies carry
  the memory breakdown in label values that change every scrape, so each scrape
  adds series texts to the Normaliser caches until they are pruned; a few nodes
  over many passes, the peak and final bytes per live series.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
import tracemalloc
from collections import defaultdict
from collections.abc import Callable, Container, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Gauge

from bench.kit.cluster import HAMI, MIXED, ROOT, Cluster
from collector.exposition.parse import parse_series
from collector.normalise.bodies import Normaliser
from collector.selfmetrics import SelfMetrics
from collector.store.latest import Store
from collector.tsdb.history import History
from collector.web.metrics import MetricsPage

GOAL_BYTES = 250.0
TRACED_NODES = 50
CHURN_NODES = 4
CHURN_PASSES = 64
CHURN_SAMPLE_EVERY = 4

Meter = Callable[[], int]
Series = list[tuple[str, bytes, float]]


class NoHistory(History):
    """A History that keeps nothing, so the latest values are measured alone."""

    def record(
        self,
        node: str,
        series: Mapping[bytes, float],
        sampled: float | None = None,
        source: str = "",
        kept: Container[bytes] | None = None,
    ) -> None:
        """Keep nothing."""


def rss() -> int:
    """Resident bytes of this process now, after a full collection."""
    gc.collect()
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def traced() -> int:
    """Bytes tracemalloc sees held now, after a full collection."""
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def collector_side(
    c: Cluster, passes: list[list[bytes]], meter: Meter
) -> tuple[dict[str, Any], object]:
    """Ingest ``passes`` into a new store and Normalisers, then build the page; measure both.

    Also returns the page and its bodies, for the caller to keep alive while it
    measures what comes next.
    """
    base = meter()
    c.store = Store(stale_after=1e9, history=NoHistory())
    c.normalisers = [Normaliser(n.name) for n in c.nodes]
    for bodies in passes:
        c.tick += 1
        c.ingest(bodies)
    held = meter() - base
    live = c.live_series()

    before_page = meter()
    page = MetricsPage(c.store, SelfMetrics(c.store))

    async def build() -> tuple[list[bytes], list[bytes]]:
        return await page.body(False, False), await page.body(False, True)

    plain, packed = asyncio.run(build())
    page_total = meter() - before_page
    bodies_size = sys.getsizeof(plain) + sum(map(sys.getsizeof, packed))  # plain: the chunks' list
    return {
        "live_series": live,
        "store_and_normalisers_bytes": held,
        "bytes_per_series": held / live,
        "page_bytes_per_series": page_total / live,
        "page_node_chunks_bytes_per_series": (page_total - bodies_size) / live,
        "page_bodies_bytes": bodies_size,
    }, (page, plain, packed)


def history_side(store: Store, meter: Meter) -> tuple[float, History]:
    """Bytes per series of a History given two points of every live series (kept alive)."""
    views = [v for v in map(store.view, store.nodes()) if v is not None]
    live = sum(len(v.series) for v in views)
    base = meter()
    history = History()
    for at in (1.0, 16.0):
        for view in views:
            history.record(view.node, view.series, at)
    return (meter() - base) / live, history


def series_of(store: Store) -> Series:
    """Every live series as (node, key, value)."""
    out: Series = []
    for node in store.nodes():
        view = store.view(node)
        if view is not None:
            out.extend((node, key, value) for key, value in view.series.items())
    return out


def peer_side(series: Series, meter: Meter) -> tuple[float, CollectorRegistry]:
    """Bytes per series of prometheus_client's registry holding ``series`` (kept alive)."""
    names: dict[str, set[str]] = defaultdict(set)
    for _, key, _ in series:
        name, labels = parse_series(key)
        names[name].update(k for k, _ in labels)
    base = meter()
    registry = CollectorRegistry()
    gauges = {
        name: (Gauge(name, name, [*sorted(labelnames), "node"], registry=registry), labelnames)
        for name, labelnames in names.items()
    }
    for node, key, value in series:
        name, labels = parse_series(key)
        gauge, labelnames = gauges[name]
        values = dict.fromkeys(labelnames, "")
        values.update(labels)
        values["node"] = node
        gauge.labels(**values).set(value)
    return (meter() - base) / len(series), registry


def prepared(
    flavours: tuple[str, ...], nodes: int, passes: int
) -> tuple[Cluster, list[list[bytes]]]:
    """A cluster and its bodies for ``passes`` passes, rendered now; its tick rewound."""
    c = Cluster(flavours, nodes)
    bodies = [c.advance() for _ in range(passes)]
    c.tick -= passes
    return c, bodies


def churn() -> dict[str, Any]:
    """Trace a few mixed-flavour nodes' store and caches over many passes."""
    c, passes = prepared(MIXED, CHURN_NODES, CHURN_PASSES)
    tracemalloc.start()
    base = traced()
    c.store = Store(stale_after=1e9, history=NoHistory())
    c.normalisers = [Normaliser(n.name) for n in c.nodes]
    per_series: list[float] = []
    for number, bodies in enumerate(passes, 1):
        c.tick += 1
        c.ingest(bodies)
        if number % CHURN_SAMPLE_EVERY == 0 or number == 2:
            per_series.append((traced() - base) / c.live_series())
    known = (
        sum(len(n._layout.texts if n._layout else ()) + len(n._shapes) for n in c.normalisers)
        / c.live_series()
    )
    tracemalloc.stop()
    return {
        "nodes": CHURN_NODES,
        "passes": CHURN_PASSES,
        "after_2_passes_bytes_per_series": per_series[0],
        "peak_bytes_per_series": max(per_series),
        "final_bytes_per_series": per_series[-1],
        "final_known_texts_per_live_series": known,
    }


def child() -> dict[str, Any]:
    """Everything, in this (fresh) process."""
    c, passes = prepared(HAMI, 1000, 2)
    ours, kept = collector_side(c, passes, rss)
    del passes
    history, kept_history = history_side(c.store, rss)
    peer, registry = peer_side(series_of(c.store), rss)
    del c, kept, kept_history, registry

    c, passes = prepared(HAMI, TRACED_NODES, 2)
    tracemalloc.start()
    ours_traced, kept = collector_side(c, passes, traced)
    history_traced, kept_history = history_side(c.store, traced)
    peer_traced, registry = peer_side(series_of(c.store), traced)
    tracemalloc.stop()
    del c, passes, kept, kept_history, registry

    per = ours["bytes_per_series"]
    return {
        "rss": {
            **ours,
            "history_bytes_per_series": history,
            "peer_prometheus_client_bytes_per_series": peer,
        },
        "tracemalloc": {
            **ours_traced,
            "nodes": TRACED_NODES,
            "history_bytes_per_series": history_traced,
            "peer_prometheus_client_bytes_per_series": peer_traced,
        },
        "bytes_per_series": per,
        "page_bytes_per_series": ours["page_bytes_per_series"],
        "history_bytes_per_series": history,
        "peer_prometheus_client_bytes_per_series": peer,
        "ratio_vs_prometheus_client": peer / per,
        "churn_mixed": churn(),
        "goal_bytes_per_series": GOAL_BYTES,
        "meets_goal": per <= GOAL_BYTES and ours_traced["bytes_per_series"] <= GOAL_BYTES,
    }


def run() -> dict[str, Any]:
    """Run :func:`child` in a fresh interpreter and return its figures."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.foundation.memory", "--child"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=300,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


if __name__ == "__main__":  # the measured process run() starts
    cli = argparse.ArgumentParser(prog="python -m bench.foundation.memory")
    cli.add_argument("--child", action="store_true", required=True)
    cli.parse_args()
    print(json.dumps(child()))
