"""The two queries of the Prometheus API over a :class:`~collector.tsdb.series.Queryable`.

Each is plan (:mod:`.plan`), select (:mod:`.select`), evaluate (:mod:`.evaluate`).
Semantics follow Prometheus 2.x (checked against 2.42 by
tests/test_promql_vs_prometheus.py).

Supported: selectors with ``= != =~ !~`` and ``offset``; number and string
literals, unary minus; ``+ - * / % ^`` and ``== != > < >= <=`` (with ``bool``)
between scalars and vectors, vector matching with ``on``/``ignoring`` and
``group_left``/``group_right``; ``and or unless``; the aggregations ``sum avg
min max count group stddev stdvar topk bottomk quantile count_values`` with
``by``/``without``; the functions ``abs ceil floor round clamp clamp_min
clamp_max exp ln log2 log10 sqrt label_replace label_join time timestamp vector
scalar sort sort_desc absent``, ``rate irate increase delta deriv`` and
``avg min max sum count last quantile stddev stdvar present _over_time``.
Anything else (``@``, subqueries, other functions...) is refused with an
``execution`` error ``unsupported: <feature>`` before any data is read.
"""

from __future__ import annotations

import math

from collector.tsdb.series import Queryable

from .deadline import Deadline
from .evaluate import Evaluator
from .plan import MatrixNode, Node, StringNode, compile_query
from .select import prefetch
from .values import Element, Labels, Matrix, QueryError, RangeSeries, Scalar, String, Vector

MAX_POINTS_PER_SERIES = 11000


def instant_query(
    query: str,
    time: float,
    storage: Queryable,
    lookback: float = 300.0,
    timeout: float | None = None,
) -> Vector | Scalar | String | Matrix:
    """Evaluate ``query`` at ``time`` (Unix seconds), as ``/api/v1/query`` does.

    A top-level range selector returns its raw points as a :data:`Matrix`.
    ``timeout`` (seconds) bounds the evaluation; past it, ``QueryError("timeout")``.
    """
    root = compile_query(query)
    ts = _to_ms(time)
    ev = _prepare(root, storage, ts, ts, lookback, timeout)
    if root.value_type == "scalar":
        return Scalar(ev.scalar(root, ts))
    if isinstance(root, StringNode):
        return String(root.value)
    if isinstance(root, MatrixNode):
        return [
            RangeSeries(dict(labels), [(t / 1000, v) for t, v in zip(times, values, strict=True)])
            for labels, times, values in ev.selection.matrix(root, ts)
        ]
    return [Element(dict(labels), v) for labels, v in ev.vector(root, ts)]


def range_query(
    query: str,
    start: float,
    end: float,
    step: float,
    storage: Queryable,
    lookback: float = 300.0,
    timeout: float | None = None,
) -> Matrix:
    """Evaluate ``query`` at ``start``, ``start + step``, ... ``<= end``, as ``/api/v1/query_range``.

    Series come sorted by labels; a scalar result is one series without labels.
    """
    start_ms, end_ms, step_ms = _to_ms(start), _to_ms(end), _to_ms(step)
    _check_steps(start_ms, end_ms, step_ms)
    root = compile_query(query)
    if root.value_type in ("matrix", "string"):
        value_type = "range vector" if root.value_type == "matrix" else "string"
        raise QueryError(
            "bad_data",
            f'invalid expression type "{value_type}" for range query, must be Scalar or instant Vector',
        )
    ev = _prepare(root, storage, start_ms, end_ms, lookback, timeout)
    steps = range(start_ms, end_ms + 1, step_ms)
    if root.value_type == "scalar":
        return [RangeSeries({}, [(ts / 1000, ev.scalar(root, ts)) for ts in steps])]
    series: dict[Labels, list[tuple[float, float]]] = {}
    for ts in steps:
        for labels, v in ev.vector(root, ts):
            points = series.get(labels)
            if points is None:
                points = series[labels] = []
            points.append((ts / 1000, v))
    return [RangeSeries(dict(labels), series[labels]) for labels in sorted(series)]


def _check_steps(start_ms: int, end_ms: int, step_ms: int) -> None:
    if end_ms < start_ms:
        raise QueryError("bad_data", "end timestamp must not be before start time")
    if step_ms <= 0:
        raise QueryError(
            "bad_data",
            "zero or negative query resolution step widths are not accepted. Try a positive integer",
        )
    if (end_ms - start_ms) // step_ms > MAX_POINTS_PER_SERIES:
        raise QueryError(
            "bad_data",
            "exceeded maximum resolution of 11,000 points per timeseries. "
            "Try decreasing the query resolution (?step=XX)",
        )


def _prepare(
    root: Node,
    storage: Queryable,
    start_ms: int,
    end_ms: int,
    lookback: float,
    timeout: float | None,
) -> Evaluator:
    """Read what the query needs from ``storage``, then ready its evaluation."""
    lookback_ms = _to_ms(lookback)
    deadline = Deadline(timeout)
    return Evaluator(prefetch(root, storage, start_ms, end_ms, lookback_ms, deadline), deadline)


def _to_ms(seconds: float) -> int:
    if not math.isfinite(seconds):
        raise QueryError("bad_data", f"invalid time {seconds!r}")
    return round(seconds * 1000)
