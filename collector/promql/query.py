"""The two queries of the Prometheus API over a :class:`~collector.tsdb.series.Queryable`.

Each is plan (:mod:`.plan`), select (:mod:`.select`), evaluate
(:mod:`.evaluate`), in two calls: :func:`prepare_instant` /
:func:`prepare_range` plan the query and read the storage, and
:meth:`Prepared.run` evaluates what was read without touching the storage, so
a server reads where the storage is safe to read and evaluates anywhere.
Semantics follow Prometheus 2.42 (checked against it by
tests/integration/test_promql_vs_prometheus.py).

Answered: every function, aggregation, operator and modifier of Prometheus
2.42 over float samples. Selectors with ``= != =~ !~``, ``offset`` and ``@``
(a time, ``start()``, ``end()``); subqueries; number and string literals,
unary minus; ``+ - * / % ^ atan2`` and ``== != > < >= <=`` (with ``bool``)
between scalars and vectors, vector matching with ``on``/``ignoring`` and
``group_left``/``group_right``; ``and or unless``; the aggregations ``sum avg
min max count group stddev stdvar topk bottomk quantile count_values`` with
``by``/``without``; the functions ``abs ceil floor round sgn clamp clamp_min
clamp_max exp ln log2 log10 sqrt``, the trigonometric ``sin cos tan asin acos
atan sinh cosh tanh asinh acosh atanh deg rad pi``, ``label_replace
label_join time timestamp vector scalar sort sort_desc absent``,
``day_of_month day_of_week day_of_year days_in_month hour minute month
year``, ``rate irate increase delta idelta changes resets deriv
predict_linear holt_winters``, ``avg min max sum count last quantile stddev
stdvar present absent _over_time``, and ``histogram_quantile`` over classic
``_bucket`` series. Prometheus' own engine tests of 2.42 run against it too
(tests/unit/promql_engine/).

Refused with an ``execution`` error ``unsupported: <feature>`` before any
data is read: the native-histogram functions (``histogram_count``,
``histogram_sum``, ``histogram_fraction``: the storage holds floats only),
functions and aggregations newer than 2.42 that the parser knows, ``or``
inside label matchers, ``fill`` modifiers, and an ``@`` time before 1970.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from collector.tsdb.series import Queryable, pairs_key, share_name

from .arrays import IntArray, Vec
from .evaluate import Evaluator
from .limits import Limits
from .plan import MatrixNode, Node, StringNode, SubqueryNode, compile_query, restrict
from .select import prefetch
from .timing import QueryTimes, steps
from .values import (
    Element,
    Matrix,
    MatrixColumns,
    QueryError,
    RangeSeries,
    Scalar,
    String,
    Vector,
)

MAX_POINTS_PER_SERIES = 11000
PLANS = 256
"""Plans kept by query text (:func:`_shared_plan`)."""
PLANNED_TEXT = 4096
"""Characters of the longest query text whose plan is kept: a dashboard's are far shorter."""


@dataclass(frozen=True, slots=True)
class Prepared:
    """A planned query and everything it read from the storage; ``run`` evaluates it."""

    root: Node
    at_steps: IntArray
    instant: bool
    evaluator: Evaluator

    @property
    def result_type(self) -> str:
        """The API's ``resultType`` of the answer: ``vector``, ``matrix``, ``scalar`` or ``string``."""
        return self.root.value_type if self.instant else "matrix"

    def cancel(self) -> None:
        """Make a running :meth:`run` stop at its next check (from any thread)."""
        self.evaluator.limits.cancel()

    def run(self) -> Vector | Scalar | String | Matrix:
        """Evaluate: an instant query's value, or a range query's series sorted by labels."""
        with np.errstate(all="ignore"):  # Go's float arithmetic raises nothing either
            if self.instant:
                return self._instant()
            return self._range()

    def _instant(self) -> Vector | Scalar | String | Matrix:
        root, ev, at = self.root, self.evaluator, self.at_steps
        if isinstance(root, StringNode):
            return String(root.value)
        if root.value_type == "scalar":
            return Scalar(float(ev.scalar(root, at)[0]))
        if isinstance(root, MatrixNode | SubqueryNode):
            return [
                RangeSeries(dict(labels), list(zip((t / 1000).tolist(), v.tolist(), strict=True)))
                for labels, t, v in ev.matrix(root, int(at[0]))
            ]
        vec = ev.vector(root, at).ordered()
        values = vec.values[:, 0].tolist()
        return [
            Element(dict(labels), value)
            for labels, value, present in zip(
                vec.labels, values, vec.present[:, 0].tolist(), strict=True
            )
            if present
        ]

    def _range(self) -> Matrix:
        return self.columns().series()

    def columns(self) -> MatrixColumns:
        """Evaluate a range query into arrays (what ``run`` gives as series), sorted by labels."""
        root, ev, at = self.root, self.evaluator, self.at_steps
        assert not self.instant
        with np.errstate(all="ignore"):
            if root.value_type == "scalar":
                values = ev.scalar(root, at)[None, :]
                return MatrixColumns([()], at, values, np.ones(values.shape, dtype=bool))
            vec = ev.vector(root, at)
        index = _label_order(vec)
        kept = vec.present[index].any(axis=1)
        index = index[kept]
        rows = index.tolist()
        labels = [vec.labels[row] for row in rows]
        maps = None if vec.maps is None else [vec.maps[row] for row in rows]
        return MatrixColumns(labels, at, vec.values[index], vec.present[index], maps)


def _label_order(vec: Vec) -> IntArray:
    """The rows of ``vec`` sorted by label set.

    Rows still labelled as the storage keeps them (a raw selector's), or less a
    ``__name__`` they all share (a range function's of one metric), are in that
    order already by rank: the storage's order is by label set too.
    """
    maps, rank = vec.maps, vec.rank
    if rank is not None and maps:
        # Vec.maps: every row is labelled with its set's pairs, or every row with them less
        # __name__ (which a storage label set always has)
        whole = vec.labels[0] is maps[0].pairs
        if whole or share_name(maps[int(rank.argmin())], maps[int(rank.argmax())]):
            return np.argsort(rank, kind="stable")
    keys = [pairs_key(labels) for labels in vec.labels]
    return np.array(sorted(range(len(keys)), key=keys.__getitem__), dtype=np.int64)


def prepare_instant(
    query: str,
    time: float,
    storage: Queryable,
    lookback: float = 300.0,
    timeout: float | None = None,
    max_samples: int | None = None,
    namespaces: frozenset[str] | None = None,
) -> Prepared:
    """Plan ``query`` at ``time`` (Unix seconds) and read what it needs, as ``/api/v1/query``.

    A top-level range selector or subquery gives its raw points as a :data:`Matrix`.
    ``timeout`` (seconds) bounds reading and evaluating; past it, ``QueryError("timeout")``.
    ``namespaces``: a tenant's, which every selector is restricted to
    (:func:`~.plan.restrict`); None, a cluster reader's: every series.
    """
    limits = Limits(timeout, max_samples)
    root = _planned(query, namespaces)
    ts = _to_ms(time)
    return _prepare(root, storage, steps(ts, ts, 1), QueryTimes(ts, ts), lookback, limits, True)


def prepare_range(
    query: str,
    start: float,
    end: float,
    step: float,
    storage: Queryable,
    lookback: float = 300.0,
    timeout: float | None = None,
    max_samples: int | None = None,
    namespaces: frozenset[str] | None = None,
) -> Prepared:
    """Plan a range query and read what it needs, as ``/api/v1/query_range``.

    Its steps are ``start``, ``start + step``, ... ``<= end``; a scalar result
    is one series without labels. ``namespaces`` as :func:`prepare_instant`'s.
    """
    limits = Limits(timeout, max_samples)
    start_ms, end_ms, step_ms = _to_ms(start), _to_ms(end), _to_ms(step)
    _check_steps(start_ms, end_ms, step_ms)
    root = _planned(query, namespaces)
    if root.value_type in ("matrix", "string"):
        value_type = "range vector" if root.value_type == "matrix" else "string"
        raise QueryError(
            "bad_data",
            f'invalid expression type "{value_type}" for range query, must be Scalar or instant Vector',
        )
    at = steps(start_ms, end_ms, step_ms)
    times = QueryTimes(start_ms, end_ms)
    return _prepare(root, storage, at, times, lookback, limits, False)


def instant_query(
    query: str,
    time: float,
    storage: Queryable,
    lookback: float = 300.0,
    timeout: float | None = None,
    max_samples: int | None = None,
) -> Vector | Scalar | String | Matrix:
    """Plan, read and evaluate an instant query (see :func:`prepare_instant`)."""
    return prepare_instant(query, time, storage, lookback, timeout, max_samples).run()


def range_query(
    query: str,
    start: float,
    end: float,
    step: float,
    storage: Queryable,
    lookback: float = 300.0,
    timeout: float | None = None,
    max_samples: int | None = None,
) -> Matrix:
    """Plan, read and evaluate a range query (see :func:`prepare_range`); series sorted by labels."""
    prepared = prepare_range(query, start, end, step, storage, lookback, timeout, max_samples)
    result = prepared.run()
    assert isinstance(result, list)
    return result  # type: ignore[return-value]


def _planned(query: str, namespaces: frozenset[str] | None) -> Node:
    """The plan of ``query``, restricted to a tenant's ``namespaces`` (None: not at all)."""
    if namespaces is not None:  # restrict changes the tree it is given: a fresh one
        return restrict(compile_query(query), namespaces)
    return _shared_plan(query) if len(query) <= PLANNED_TEXT else compile_query(query)


@functools.lru_cache(maxsize=PLANS)
def _shared_plan(query: str) -> Node:
    """The plan of ``query``, one for every query of that text.

    Why kept: a dashboard asks the same texts at every refresh, and planning a
    selector took 60-200 us back to back, 260-450 us after the process sat idle
    a third of a second (the fine-step bench's 16-series query took 0.8 ms in all).
    A plan is never changed once made (:func:`~.plan.restrict` changes only the
    fresh trees of tenants' queries), and evaluation keys what it reads by each
    query's own :class:`~.select.Selection`, so queries at once may share one.
    A query that fails to plan raises each time: failures are not kept.
    """
    return compile_query(query)


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
    at: IntArray,
    times: QueryTimes,
    lookback: float,
    limits: Limits,
    instant: bool,
) -> Prepared:
    """Read what the query needs from ``storage`` and ready its evaluation."""
    lookback_ms = _to_ms(lookback)
    selection = prefetch(root, storage, at, times, lookback_ms, limits)
    return Prepared(root, at, instant, Evaluator(selection, times, lookback_ms, limits))


def _to_ms(seconds: float) -> int:
    if not math.isfinite(seconds):
        raise QueryError("bad_data", f"invalid time {seconds!r}")
    return round(seconds * 1000)
