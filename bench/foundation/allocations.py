"""Allocations: one refresh of the pod watch's allocation batches, on one core.

Why: the allocation source remakes every node's batch each interval on the
event loop (in steps of 100 nodes), so its cost per series decides how much
of the loop a large cluster's allocations take.

* measured: :meth:`AllocationSource.refresh` over the shared 1,000-node HAMi
  cluster (its pods read from their Kubernetes objects once, outside the
  timing), into a store that already holds the monitors' series, so the
  stand-ins and idle times look the usage up as in production; the median of
  steady refreshes (keys made) is reported;
* peer: the scrape path's ingest (normalise + ``Store.put``) of the same
  nodes' monitor bodies, measured in the same run, per sample.

``python -m bench.foundation.allocations`` prints the figures as JSON.
"""

from __future__ import annotations

from typing import Any

from bench.kit.cluster import HAMI, Cluster
from bench.kit.timing import median, settle, stopwatch
from collector.sources.allocation_series import AllocationConfig, AllocationSource
from collector.sources.pods import StaticDirectory
from simulator.agents import SimulatedDirectory

NODES = 1000
REPEATS = 5


def measure(nodes: int = NODES) -> dict[str, Any]:
    """Allocation series per second against ingest samples per second, same cluster."""
    c = Cluster(HAMI, nodes)
    c.ingest(c.advance())  # cold: the Normalisers learn every series text
    bodies = c.advance()
    settle()
    ingest: list[float] = []
    with stopwatch(ingest):
        c.ingest(bodies)
    ingest_rate = c.samples() / ingest[0]

    pods = SimulatedDirectory(c.nodes)
    fixed = StaticDirectory({h.pod.uid: h.pod for h in pods.holdings()}, {})  # as watched
    source = AllocationSource(fixed, c.store, AllocationConfig(15.0, 99), lambda _: None)
    source.refresh()  # the first refresh makes every key
    times: list[float] = []
    for _ in range(REPEATS):
        settle()
        with stopwatch(times):
            source.refresh()
    series = 0
    for node in c.store.nodes():
        view = c.store.view(node)
        held = view.sources if view is not None else ()
        series += sum(h.batch.samples for h in held if h.source.kind == "allocation")
    rate = series / median(times)
    return {
        "nodes": nodes,
        "allocation_series": series,
        "refresh_ms": median(times) * 1e3,
        "allocation_series_per_s": rate,
        "peer_ingest_samples_per_s": ingest_rate,
        "ratio_vs_ingest": rate / ingest_rate,
    }
