"""Evaluate PromQL (the supported subset) over a :class:`~collector.tsdb.series.Queryable`.

Semantics follow Prometheus 2.x (checked against 2.42 by
tests/test_promql_vs_prometheus.py): an instant selector at ``t`` takes each
series' newest point in ``[t - lookback, t]`` unless that point is a staleness
marker; a range selector ``x[r]`` at ``t`` takes the points in ``[t - r, t]``
without staleness markers; ``offset`` shifts both. Times are whole
milliseconds inside, as in Prometheus.

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

Every selector is read from storage once per query, over the whole window
the query needs; each step then finds its points by bisection. The tree is
evaluated step by step (Prometheus' ``rangeEval``), so a range query costs
steps x tree size in CPU, never steps x storage reads.
"""

from __future__ import annotations

import math
import re
import time as _time
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from collector.tsdb.series import Matcher, Queryable, is_stale

from . import aggregate as agg
from . import binary
from .functions import LABEL_NAME, RANGE_FUNCTIONS, Window, expand_template, round_to
from .plan import (
    SET_OPERATORS,
    AggNode,
    BinaryNode,
    CallNode,
    MatrixNode,
    NegNode,
    Node,
    NumberNode,
    SelectorNode,
    StringNode,
    compile_query,
    selectors,
)
from .values import (
    METRIC_NAME,
    Labels,
    Matrix,
    QueryError,
    RangeSeries,
    Sample,
    Scalar,
    String,
    Vector,
    drop_name,
    go_ceil,
    go_exp,
    go_floor,
    go_ln,
    go_log2,
    go_log10,
    go_max,
    go_min,
    go_sqrt,
    labels_of,
)

__all__ = [
    "Matrix",
    "QueryError",
    "RangeSeries",
    "Sample",
    "Scalar",
    "String",
    "Vector",
    "instant_query",
    "range_query",
]

StepVector = list[tuple[Labels, float]]

MAX_POINTS_PER_SERIES = 11000

_SIMPLE: dict[str, Callable[[float], float]] = {
    "abs": math.fabs,
    "ceil": go_ceil,
    "floor": go_floor,
    "exp": go_exp,
    "ln": go_ln,
    "log2": go_log2,
    "log10": go_log10,
    "sqrt": go_sqrt,
}

_SAME_LABELSET = "vector cannot contain metrics with the same labelset"


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
    ev = _Evaluator(storage, ts, ts, _to_ms(lookback), timeout)
    ev.prefetch(root)
    if root.kind == "scalar":
        return Scalar(ev.scalar(root, ts))
    if root.kind == "string":
        assert isinstance(root, StringNode)
        return String(root.value)
    if isinstance(root, MatrixNode):
        return [
            RangeSeries(dict(labels), [(t / 1000, v) for t, v in zip(times, values, strict=True)])
            for labels, times, values in ev.matrix(root, ts)
        ]
    return [Sample(dict(labels), v) for labels, v in ev.vector(root, ts)]


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
    root = compile_query(query)
    if root.kind in ("matrix", "string"):
        kind = "range vector" if root.kind == "matrix" else "string"
        raise QueryError(
            "bad_data",
            f'invalid expression type "{kind}" for range query, must be Scalar or instant Vector',
        )
    ev = _Evaluator(storage, start_ms, end_ms, _to_ms(lookback), timeout)
    ev.prefetch(root)
    steps = range(start_ms, end_ms + 1, step_ms)
    if root.kind == "scalar":
        return [RangeSeries({}, [(ts / 1000, ev.scalar(root, ts)) for ts in steps])]
    series: dict[Labels, list[tuple[float, float]]] = {}
    for ts in steps:
        for labels, v in ev.vector(root, ts):
            points = series.get(labels)
            if points is None:
                points = series[labels] = []
            points.append((ts / 1000, v))
    return [RangeSeries(dict(labels), series[labels]) for labels in sorted(series)]


def _to_ms(seconds: float) -> int:
    if not math.isfinite(seconds):
        raise QueryError("bad_data", f"invalid time {seconds!r}")
    return round(seconds * 1000)


@dataclass(slots=True)
class _Series:
    labels: Labels
    times: list[int]
    values: list[float]


class _Evaluator:
    def __init__(
        self,
        storage: Queryable,
        start_ms: int,
        end_ms: int,
        lookback_ms: int,
        timeout: float | None,
    ) -> None:
        self.storage = storage
        self.start_ms = start_ms
        self.end_ms = end_ms
        self.lookback_ms = lookback_ms
        self.deadline = None if timeout is None else _time.monotonic() + timeout
        self.data: dict[int, list[_Series]] = {}
        self.group_keys: dict[int, agg.GroupKeys] = {}
        self.matchings: dict[int, binary.Matching] = {}
        self.provenance: dict[int, dict[Labels, Labels]] = {}
        self.label_maps: dict[int, dict[Labels, Labels]] = {}

    # --- storage ---

    def prefetch(self, root: Node) -> None:
        """Read every selector once, over the window the whole query needs."""
        reads: dict[tuple[tuple[Matcher, ...], int, int, bool], list[_Series]] = {}
        for sel, range_ms in selectors(root):
            width = range_ms if range_ms else self.lookback_ms
            lo = self.start_ms - sel.offset_ms - width
            hi = self.end_ms - sel.offset_ms
            key = (sel.matchers, lo, hi, bool(range_ms))
            series = reads.get(key)
            if series is None:
                series = reads[key] = self._read(sel, lo, hi, bool(range_ms))
            self.data[id(sel)] = series

    def _read(self, sel: SelectorNode, lo: int, hi: int, for_range: bool) -> list[_Series]:
        # Read a millisecond wider either side; the exact bounds are applied per step.
        found = self.storage.select(list(sel.matchers), (lo - 1) / 1000, (hi + 1) / 1000)
        series: list[_Series] = []
        for sd in found:
            times = [round(t * 1000) for t in sd.times]
            values = list(sd.values)
            if for_range:  # range selections never see staleness markers
                keep = [i for i, v in enumerate(values) if not (v != v and is_stale(v))]
                if len(keep) != len(values):
                    times = [times[i] for i in keep]
                    values = [values[i] for i in keep]
            series.append(_Series(labels_of(dict(sd.labels)), times, values))
        series.sort(key=lambda s: s.labels)
        self._check_deadline()
        return series

    def _check_deadline(self) -> None:
        if self.deadline is not None and _time.monotonic() > self.deadline:
            raise QueryError("timeout", "query timed out in expression evaluation")

    # --- dispatch by kind ---

    def scalar(self, node: Node, ts: int) -> float:
        if isinstance(node, NumberNode):
            return node.value
        if isinstance(node, NegNode):
            return -self.scalar(node.expr, ts)
        if isinstance(node, BinaryNode):
            return binary.scalar_binop(
                node.op, self.scalar(node.lhs, ts), self.scalar(node.rhs, ts)
            )
        if isinstance(node, CallNode):
            if node.name == "time":
                return ts / 1000
            if node.name == "scalar":
                vec = self.vector(node.args[0], ts)
                return vec[0][1] if len(vec) == 1 else math.nan
        raise AssertionError(f"not a scalar expression: {node!r}")

    def string(self, node: Node) -> str:
        assert isinstance(node, StringNode)
        return node.value

    def vector(self, node: Node, ts: int) -> StepVector:
        self._check_deadline()
        if isinstance(node, SelectorNode):
            return self._select(node, ts)
        if isinstance(node, AggNode):
            return self._aggregate(node, ts)
        if isinstance(node, BinaryNode):
            return self._binary(node, ts)
        if isinstance(node, CallNode):
            return self._call(node, ts)
        if isinstance(node, NegNode):
            inner = self.vector(node.expr, ts)
            out = [(drop_name(labels), -v) for labels, v in inner]
            self._record_provenance(node, out, [labels for labels, _ in inner])
            return out
        raise AssertionError(f"not a vector expression: {node!r}")

    def matrix(self, node: MatrixNode, ts: int) -> list[tuple[Labels, list[int], list[float]]]:
        """The raw points of a range selector at ``ts`` (series without points left out)."""
        ref = ts - node.selector.offset_ms
        lo = ref - node.range_ms
        out: list[tuple[Labels, list[int], list[float]]] = []
        for s in self.data[id(node.selector)]:
            i0 = bisect_left(s.times, lo)
            i1 = bisect_right(s.times, ref)
            if i1 > i0:
                out.append((s.labels, s.times[i0:i1], s.values[i0:i1]))
        return out

    # --- nodes ---

    def _select_points(self, node: SelectorNode, ts: int) -> list[tuple[Labels, int, float]]:
        ref = ts - node.offset_ms
        oldest = ref - self.lookback_ms
        out: list[tuple[Labels, int, float]] = []
        for s in self.data[id(node)]:
            i = bisect_right(s.times, ref) - 1
            if i >= 0 and s.times[i] >= oldest:
                v = s.values[i]
                if v != v and is_stale(v):
                    continue
                out.append((s.labels, s.times[i], v))
        return out

    def _select(self, node: SelectorNode, ts: int) -> StepVector:
        return [(labels, v) for labels, _, v in self._select_points(node, ts)]

    def _aggregate(self, node: AggNode, ts: int) -> StepVector:
        keys = self.group_keys.get(id(node))
        if keys is None:
            keys = self.group_keys[id(node)] = agg.GroupKeys(node.grouping, node.without)
        param: float | str | None = None
        if node.param is not None:
            param = (
                self.string(node.param)
                if node.param.kind == "string"
                else self.scalar(node.param, ts)
            )
        return agg.aggregate(node.op, self.vector(node.expr, ts), keys, param)

    def _binary(self, node: BinaryNode, ts: int) -> StepVector:
        if node.lhs.kind == "scalar":
            out = binary.vector_scalar(
                node, self.vector(node.rhs, ts), self.scalar(node.lhs, ts), swap=True
            )
        elif node.rhs.kind == "scalar":
            out = binary.vector_scalar(
                node, self.vector(node.lhs, ts), self.scalar(node.rhs, ts), swap=False
            )
        else:
            m = self.matchings.get(id(node))
            if m is None:
                m = self.matchings[id(node)] = binary.Matching(node)
            lhs, rhs = self.vector(node.lhs, ts), self.vector(node.rhs, ts)
            if node.op in SET_OPERATORS:
                return binary.set_operation(m, lhs, rhs)
            out = binary.vector_vector(m, lhs, rhs)
        _check_unique(out)
        return out

    def _call(self, node: CallNode, ts: int) -> StepVector:
        name = node.name
        if name in RANGE_FUNCTIONS:
            return self._range_call(node, ts)
        if name == "vector":
            return [((), self.scalar(node.args[0], ts))]
        if name == "timestamp" and isinstance(node.args[0], SelectorNode):
            # On a plain selector, the sample's own timestamp (not the evaluation time).
            out = [
                (drop_name(labels), t / 1000)
                for labels, t, _ in self._select_points(node.args[0], ts)
            ]
            _check_unique(out)
            return out
        vec = self.vector(node.args[0], ts)
        out = self._vector_function(node, vec, ts)
        _check_unique(out)
        return out

    def _vector_function(self, node: CallNode, vec: StepVector, ts: int) -> StepVector:
        name = node.name
        simple = _SIMPLE.get(name)
        if simple is not None:
            return [(drop_name(labels), simple(v)) for labels, v in vec]
        if name == "timestamp":
            return [(drop_name(labels), ts / 1000) for labels, _ in vec]
        if name == "round":
            nearest = self.scalar(node.args[1], ts) if len(node.args) > 1 else 1.0
            return [(drop_name(labels), round_to(v, nearest)) for labels, v in vec]
        if name == "clamp":
            lo, hi = self.scalar(node.args[1], ts), self.scalar(node.args[2], ts)
            if hi < lo:
                return []
            return [(drop_name(labels), go_max(lo, go_min(hi, v))) for labels, v in vec]
        if name == "clamp_min":
            lo = self.scalar(node.args[1], ts)
            return [(drop_name(labels), go_max(lo, v)) for labels, v in vec]
        if name == "clamp_max":
            hi = self.scalar(node.args[1], ts)
            return [(drop_name(labels), go_min(hi, v)) for labels, v in vec]
        if name == "sort":
            return sorted(vec, key=lambda s: (math.isnan(s[1]), 0.0 if math.isnan(s[1]) else s[1]))
        if name == "sort_desc":
            return sorted(vec, key=lambda s: (math.isnan(s[1]), 0.0 if math.isnan(s[1]) else -s[1]))
        if name == "absent":
            return [] if vec else [(_absent_labels(node.args[0]), 1.0)]
        if name == "label_replace":
            return self._label_replace(node, vec)
        if name == "label_join":
            return self._label_join(node, vec)
        raise AssertionError(f"function {name} not dispatched")

    def _label_replace(self, node: CallNode, vec: StepVector) -> StepVector:
        dst, repl, src, regex = (self.string(a) for a in node.args[1:5])
        cache = self.label_maps.get(id(node))
        if cache is None:
            if not LABEL_NAME.fullmatch(dst):
                raise QueryError(
                    "execution", f"invalid destination label name in label_replace(): {dst}"
                )
            cache = self.label_maps[id(node)] = {}
        try:
            pattern = _compile_label_regex(regex)
        except Exception:
            raise QueryError(
                "execution", f"invalid regular expression in label_replace(): {regex}"
            ) from None
        out: StepVector = []
        for labels, v in vec:
            result = cache.get(labels)
            if result is None:
                current = dict(labels)
                match = pattern.fullmatch(current.get(src, ""))
                if match is None:
                    result = labels
                else:
                    value = expand_template(repl, match)
                    current.pop(dst, None)
                    if value:
                        current[dst] = value
                    result = tuple(sorted(current.items()))
                cache[labels] = result
            out.append((result, v))
        return out

    def _label_join(self, node: CallNode, vec: StepVector) -> StepVector:
        dst, sep = self.string(node.args[1]), self.string(node.args[2])
        sources = [self.string(a) for a in node.args[3:]]
        cache = self.label_maps.get(id(node))
        if cache is None:
            if not LABEL_NAME.fullmatch(dst):
                raise QueryError(
                    "execution", f"invalid destination label name in label_join(): {dst}"
                )
            for src in sources:
                if not LABEL_NAME.fullmatch(src):
                    raise QueryError(
                        "execution", f"invalid source label name in label_join(): {src}"
                    )
            cache = self.label_maps[id(node)] = {}
        out: StepVector = []
        for labels, v in vec:
            result = cache.get(labels)
            if result is None:
                current = dict(labels)
                joined = sep.join(current.get(src, "") for src in sources)
                current.pop(dst, None)
                if joined:
                    current[dst] = joined
                result = tuple(sorted(current.items()))
                cache[labels] = result
            out.append((result, v))
        return out

    def _range_call(self, node: CallNode, ts: int) -> StepVector:
        fn = RANGE_FUNCTIONS[node.name]
        arg = 0.0
        mat_node = node.args[-1]
        if len(node.args) > 1:  # quantile_over_time(q, x[r])
            arg = self.scalar(node.args[0], ts)
        assert isinstance(mat_node, MatrixNode)
        window = Window(ts, mat_node.range_ms, mat_node.selector.offset_ms)
        keep_name = node.name == "last_over_time"
        out: StepVector = []
        sources: list[Labels] = []
        for labels, times, values in self.matrix(mat_node, ts):
            value = fn(times, values, window, arg)
            if value is not None:
                out.append((labels if keep_name else drop_name(labels), value))
                sources.append(labels)
        self._record_provenance(node, out, sources)
        return out

    def _record_provenance(self, node: Node, out: StepVector, sources: Sequence[Labels]) -> None:
        """Prometheus checks these nodes' whole result matrix: two input series mapping to the
        same output labels fail the query even when they never share a step."""
        seen = self.provenance.get(id(node))
        if seen is None:
            seen = self.provenance[id(node)] = {}
        for (labels, _), source in zip(out, sources, strict=True):
            first = seen.setdefault(labels, source)
            if first != source:
                raise QueryError("execution", _SAME_LABELSET)


def _check_unique(vec: StepVector) -> None:
    if len(vec) > 1 and len({labels for labels, _ in vec}) != len(vec):
        raise QueryError("execution", _SAME_LABELSET)


def _absent_labels(arg: Node) -> Labels:
    """Prometheus' ``createLabelsForAbsentFunction``: the selector's equality matchers."""
    sel = arg.selector if isinstance(arg, MatrixNode) else arg
    if not isinstance(sel, SelectorNode):
        return ()
    result: dict[str, str] = {}
    seen: set[str] = set()
    for m in sel.matchers:
        if m.name == METRIC_NAME:
            continue
        if m.op == "=" and m.name not in seen:
            result[m.name] = m.value
            seen.add(m.name)
        else:
            result.pop(m.name, None)
    return tuple(sorted((k, v) for k, v in result.items() if v != ""))


_REGEX_CACHE: dict[str, re.Pattern[str]] = {}


def _compile_label_regex(regex: str) -> re.Pattern[str]:
    cached = _REGEX_CACHE.get(regex)
    if cached is not None:
        return cached
    pattern = re.compile(f"(?:{regex})")
    if len(_REGEX_CACHE) > 256:
        _REGEX_CACHE.clear()
    _REGEX_CACHE[regex] = pattern
    return pattern
