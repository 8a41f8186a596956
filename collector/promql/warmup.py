"""Compile every compiled loop before the first query needs it: the engine's warm-up.

Why: the loops (numba) compile at their first call in a process, 0.3-2.4 s
each, so the first ``rate``, ``topk`` or chargeback report after a start took
0.6-3.2 s where the next took 4-13 ms, in front of every rollout's first
Grafana panels. No on-disk cache: the chart runs the collector on a read-only
root filesystem (see :mod:`collector.compiled`).

:func:`warm` fills a private history with a few nodes of gauges and counters
(series that start late, end early, go stale, or hold one value: every shape
the history stores differently) and runs every range function, aggregation
and selector of the engine over it, instant and range, so each loop is
compiled for the types real queries hand it. A loop compiles once per
argument types, so the size of this data does not matter, only its shapes.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator

from collector.tsdb.history import History

from .plan import AGGREGATIONS, RANGE_FUNCTIONS
from .query import prepare_instant, prepare_range
from .values import MatrixColumns

NODES = 3
"""Nodes of the private history: a lookup of many nodes goes another way than one node's."""
POINTS = 160
"""Points per node, 1 s apart: several packed segments and an open block."""
SELECTOR = "warm"
"""The gauges' name; ``warm_total`` is the counters'."""

_ARGUMENTS = {
    "quantile_over_time": "0.5, {}",
    "predict_linear": "{}, 60",
    "holt_winters": "{}, 0.5, 0.5",
}
_PARAMETERS = {"topk": "2, ", "bottomk": "2, ", "quantile": "0.9, ", "count_values": '"v", '}


def queries() -> Iterator[str]:
    """Every query the warm-up runs: each range function, aggregation and selector shape."""
    yield from (SELECTOR, f"{SELECTOR}[1m]", f"{SELECTOR} offset 10s", f"{SELECTOR}_total")
    for name in sorted(RANGE_FUNCTIONS):
        for series in (f"{SELECTOR}[1m]", f"{SELECTOR}_total[1m]"):
            yield f"{name}({_ARGUMENTS.get(name, '{}').format(series)})"
    for op in sorted(AGGREGATIONS):
        parameter = _PARAMETERS.get(op, "")
        yield f"{op} by (node) ({parameter}{SELECTOR})"
        yield f"{op}({parameter}rate({SELECTOR}_total[1m]))"
    yield f"sum by (card) ({SELECTOR})"  # groups whose rows lie apart (one a node)
    yield f"max_over_time({SELECTOR}[2m:10s])"
    yield f"{SELECTOR} / on (node, card) group_left {SELECTOR}_total"
    yield f'label_replace({SELECTOR}, "c", "$1", "card", "(.*)") > 1'


def history(now: float) -> History:
    """The private history the warm-up reads: :data:`NODES` nodes up to ``now``."""
    kept = History(retention=3 * POINTS, clock=lambda: now)
    for k in range(POINTS):
        t = now - POINTS + 1 + k
        for n in range(NODES):
            kept.record(f"warm-{n}", dict(_batch(n, k)), t, "warm-up")
    return kept


def _batch(node: int, k: int) -> Iterator[tuple[bytes, float]]:
    for card in range(4):
        labels = f'card="{card}"'.encode()
        if card == 1 and not 40 <= k < 120:  # starts late, ends early (stale after)
            continue
        value = 5.0 if card == 2 else float(node + card + math.sin(k / 7))  # a run of one value
        yield b"warm{" + labels + b"}", value
        yield b"warm_total{" + labels + b"}", float(k % 50 + card)  # a counter that resets


def warm(
    body: Callable[[MatrixColumns], object] = lambda columns: columns,
    stop: threading.Event | None = None,
) -> float:
    """Compile the loops: run :func:`queries` instant and range; ``body`` shapes each range
    answer as the API does (its JSON writer has loops of its own). Seconds it took; a set
    ``stop`` (the collector is stopping) ends it after the query under way."""
    began = time.monotonic()
    now = math.floor(time.time())
    kept = history(now)
    for query in queries():
        if stop is not None and stop.is_set():
            break
        instant = prepare_instant(query, now, kept)
        instant.run()
        if instant.result_type in ("vector", "scalar"):  # a range query takes no other
            for step in (1.0, 15.0):
                body(prepare_range(query, now - 120, now, step, kept).columns())
    return time.monotonic() - began
