"""Ingest: parse + normalise + ``Store.put`` of every node's body, on one core.

Why: one collector ingests every monitor of the cluster each scrape interval
(1,000 nodes are ~248k samples per round), so samples per second on one core
decides how many nodes one collector can take.

* cold: the first pass, every series text new (the strict parser builds each
  Normaliser's cache), timed in slices of nodes;
* steady: later passes, new values each pass (every node stepped and its body
  re-rendered outside the timed region); the median pass is reported, and a pass
  that crossed a pod-churn point (some nodes' bodies hold new series, so those
  bodies take the strict path) is reported on its own;
* peer: ``prometheus_client.parser.text_string_to_metric_families`` over the same
  bodies (decoded outside the timing), every sample consumed, on a subset of
  bodies and compared per sample.

Every rate is given twice: per wall-clock second, and per second of this
thread's CPU time (``*_cpu_*``: what one core does, whatever else the machine
runs; on a shared machine the wall-clock rates move with its load).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from bench.kit.cluster import HAMI, MIXED, cluster
from bench.kit.timing import median, settle, stopwatch

GOAL_RATE = 1_000_000.0
"""Steady-state samples per second on one core."""
GOAL_RATIO = 35.0
"""Steady-state rate over prometheus_client's parser rate."""
PASSES = {HAMI: 5, MIXED: 4}
"""Timed passes; pass 3 crosses a churn point and is reported on its own."""
COLD_SLICES = 5
PEER_BODIES = 100
PEER_REPEATS = 3


@contextmanager
def timed(wall: list[float], cpu: list[float]) -> Iterator[None]:
    """Append the block's wall-clock seconds to ``wall`` and its thread CPU seconds to ``cpu``."""
    start = time.thread_time()
    with stopwatch(wall):
        yield
    cpu.append(time.thread_time() - start)


def peer_rate(bodies: list[bytes]) -> tuple[float, float, int]:
    """prometheus_client's samples per wall and per CPU second over ``bodies`` (medians), and samples."""
    texts = [b.decode() for b in bodies]
    settle()
    times: list[float] = []
    cpu: list[float] = []
    samples = 0
    for _ in range(PEER_REPEATS):
        samples = 0
        with timed(times, cpu):
            for text in texts:
                for family in text_string_to_metric_families(text):
                    for _sample in family.samples:
                        samples += 1
    return samples / median(times), samples / median(cpu), samples


def measure(flavours: tuple[str, ...]) -> dict[str, Any]:
    """Cold, steady and peer rates for the shared cluster of ``flavours``."""
    c = cluster(flavours)
    if c.tick >= 0:
        raise RuntimeError("ingest must run first: it needs cold Normalisers")
    bodies = c.advance()
    settle()
    width = len(bodies) // COLD_SLICES
    cold: list[float] = []
    cold_cpu: list[float] = []
    for first in range(0, len(bodies), width):
        times: list[float] = []
        cpu: list[float] = []
        with timed(times, cpu):
            c.ingest(bodies[first : first + width], first)
        cold.append(c.samples(first, first + width) / times[0])
        cold_cpu.append(c.samples(first, first + width) / cpu[0])

    steady: list[float] = []
    churn: list[float] = []
    steady_cpu: list[float] = []
    churn_cpu: list[float] = []
    for _ in range(PASSES[flavours]):
        bodies = c.advance()
        settle()
        times, cpu = [], []
        with timed(times, cpu):
            c.ingest(bodies)
        churned = c.churns()
        (churn if churned else steady).append(c.samples() / times[0])
        (churn_cpu if churned else steady_cpu).append(c.samples() / cpu[0])

    samples = c.samples()
    peer, peer_cpu, peer_samples = peer_rate(bodies[:PEER_BODIES])
    rate = median(steady)
    rate_cpu = median(steady_cpu)
    return {
        "flavours": list(flavours),
        "nodes": len(c.nodes),
        "samples_per_pass": samples,
        "live_series": c.live_series(),
        "cold_samples_per_s": median(cold),
        "steady_samples_per_s": rate,
        "steady_pass_ms": samples / rate * 1e3,
        "steady_passes": len(steady),
        "steady_rates": steady,
        "churn_samples_per_s": median(churn) if churn else None,
        "peer_prometheus_client_samples_per_s": peer,
        "peer_samples": peer_samples,
        "ratio_vs_prometheus_client": rate / peer,
        "cold_ratio_vs_prometheus_client": median(cold) / peer,
        "cold_cpu_samples_per_s": median(cold_cpu),
        "steady_cpu_samples_per_s": rate_cpu,
        "steady_cpu_rates": steady_cpu,
        "churn_cpu_samples_per_s": median(churn_cpu) if churn_cpu else None,
        "peer_prometheus_client_cpu_samples_per_s": peer_cpu,
        "cpu_ratio_vs_prometheus_client": rate_cpu / peer_cpu,
        "goal_samples_per_s": GOAL_RATE,
        "goal_ratio": GOAL_RATIO,
        "meets_goal": rate >= GOAL_RATE and rate / peer >= GOAL_RATIO,
    }


def run() -> dict[str, Any]:
    """Ingest rates of the all-HAMi cluster and of the mixed-flavour one."""
    return {"hami": measure(HAMI), "mixed": measure(MIXED)}
