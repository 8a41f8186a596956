"""The whole collector's memory on a 5,000-node cluster holding 15 minutes of history at 15 s.

Why: memory is what decides how much history one collector can hold; the
goal is that 5,000 nodes (~1.25M live series) with 15 minutes at 15 s fit in
2 GiB of RSS for the whole process: store, normalisers, history, app.

Setup: this process builds the real application (``build_app``) and fills its
store as :func:`bench.query.fill.fill` does (the simulated cluster, rendered by
helper processes, normalised and put here, 61 rounds 15 s apart), then
reports its own ``VmRSS`` and ``VmHWM`` (peak) from ``/proc``, with the
history's points and bytes. It runs as a process of its own (``python -m
bench.fleet.rss``), so nothing of another bench is counted. No peer: the goal is
absolute.
"""

from __future__ import annotations

import gc
import json
import math
import os
import time
from typing import Any

from bench.kit.processes import memory_mib
from bench.query.fill import fill
from bench.query.setup import HISTORY_MAX_POINTS, STALE_AFTER
from collector.app import STORE, build_app
from collector.memory.malloc import set_policy
from collector.settings import CollectorSettings

NODES = 5000
STEP = 15.0
SPAN = 900.0
GOAL_MIB = 2048.0


def run(nodes: int = NODES) -> dict[str, Any]:
    """Fill a collector with ``nodes`` nodes over :data:`SPAN` at :data:`STEP`; its memory."""
    began = time.perf_counter()
    set_policy()  # the memory policy the collector's command sets
    settings = CollectorSettings(
        listen="127.0.0.1:0",
        kubernetes=False,
        stale_after=STALE_AFTER,
        history_retention=2 * SPAN,
        history_max_points=HISTORY_MAX_POINTS,
    )
    app = build_app(settings)
    store = app[STORE]
    before = memory_mib(os.getpid())
    now = float(math.floor(time.time()))
    rounds = int(SPAN // STEP) + 1
    filled = fill(store, nodes, now - SPAN, STEP, rounds, traced=0)
    gc.collect()
    after = memory_mib(os.getpid())
    history = store.history
    series = sum(len(v.series) for n in store.nodes() if (v := store.view(n)) is not None)
    return {
        "nodes": nodes,
        "rounds": rounds,
        "step_s": STEP,
        "live_series": series,
        "history_points": history.points,
        "history_bytes": history.bytes,
        "rss_mib_before_fill": before.get("VmRSS", 0.0),
        "rss_mib": after.get("VmRSS", 0.0),
        "peak_rss_mib": after.get("VmHWM", 0.0),
        "goal_mib": GOAL_MIB,
        "meets_goal": after.get("VmHWM", math.inf) <= GOAL_MIB,
        "fill": filled.figures(),
        "load_average_after": os.getloadavg(),
        "wall_s": time.perf_counter() - began,
    }


def main(nodes: int = NODES, as_json: bool = False) -> None:
    """Run it on ``nodes`` nodes and print its figures (all of them with ``as_json``)."""
    result = run(nodes)
    print(
        f"{result['nodes']} nodes, {result['live_series']:,} live series, "
        f"{result['history_points']:,} points: RSS {result['rss_mib']:.0f} MiB, "
        f"peak {result['peak_rss_mib']:.0f} MiB (goal <= {GOAL_MIB:.0f}); "
        f"history {result['history_bytes'] / 2**20:.0f} MiB"
    )
    if as_json:
        print(json.dumps(result, indent=2))
