"""The query bench's sizes, limits and goals (see :mod:`bench.query.run`)."""

from __future__ import annotations

import sys

from bench.kit.cluster import ROOT

NODES = 1000
SEED = 1
MONITORS: tuple[str, ...] = ("hami",)
"""The monitor versions the benchmark's simulated nodes run (see simulator.families)."""
SPAN = 3600.0
"""Seconds of history filled: one hour."""
STEP = 60.0
"""Seconds between two filled points by default (``--step``), and the range query's step always
(the dashboard's queries take the data's step, as Grafana's minimum interval)."""
ROUNDS = int(SPAN // STEP) + 1
QUERY = "sum by (node) (hami_vgpu_memory_used_bytes)"
REPEATS = 30
"""Timed runs of each query surface, unless its :data:`BUDGET_S` runs out first."""
BUDGET_S = 25.0
"""Seconds of timed runs one surface may take before it stops repeating (at :data:`MIN_REPEATS`
or more): 30 runs of a query that misses its goal tenfold would take many minutes."""
MIN_REPEATS = 2
RENDERERS = 2
"""Helper processes rendering the simulated bodies ahead of the fill."""
TRACE_NODES = 40
"""Nodes whose batches are replayed into a fresh History under tracemalloc."""
TRACE_ROUNDS = 241
"""Rounds of those nodes fed to the traced history: an hour at 15 s."""
HISTORY_RETENTION = 2 * SPAN
HISTORY_MAX_POINTS = 100_000_000
"""Above the hour at 15 s (60.5M points): the app's trim must not cut the queried hour."""
STALE_AFTER = 86_400.0
REMOTE_WRITE_BYTES = 8 << 20
"""Encoded WriteRequest size at which it is sent."""
STARTUP_TIMEOUT = 60.0
CLIENT_TIMEOUT = 1800.0
HTTP_TIMEOUT = 120.0

GOAL_INSTANT_P99_MS = 100.0
GOAL_RANGE_P99_MS = 1000.0
GOAL_RANGE_P99_VS_PROMETHEUS = 0.5
"""The range query's p99 may be at most this times Prometheus' p99, besides its ms goal."""
GOAL_REST_P99_MS = 50.0
GOAL_BYTES_PER_POINT = 10.0

DASHBOARD = ROOT / "dashboards" / "hami-usage.json"
TOOLS = ROOT / ".tools" / "prometheus" / "usr" / "bin"
PREFIX = "/prometheus/api/v1"
HELPER = (sys.executable, "-m", "bench.query.run")
"""How this bench starts its helper processes."""
