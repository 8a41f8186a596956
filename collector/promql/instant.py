"""Instant-vector functions over a whole :class:`~.arrays.Vec`: math, rounding, dates, order.

Their scalar arguments come evaluated (one value per step); ``vector``,
``scalar``, ``time``, ``timestamp`` of a plain selector and the label
rewrites (:mod:`.relabel`) need more of the query and stay with the evaluator.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from . import ranking
from .arrays import BoolArray, FloatArray, IntArray, Vec
from .floats import MATH_FUNCTIONS, go_max, go_min, round_to
from .plan import DATE_FUNCTIONS, MatrixNode, Node, SelectorNode
from .values import METRIC_NAME, Labels

_DATE_LIMIT = 1e17
"""Seconds past which a date is not computed (NaN): far beyond any year numpy can name."""


def apply(name: str, vec: Vec, args: Sequence[FloatArray], at_steps: IntArray) -> Vec:
    """The function ``name`` over ``vec``, given its scalar arguments after the vector."""
    if name in ("sort", "sort_desc"):
        return _sorted(vec, name == "sort_desc")
    present = vec.present
    if name == "clamp":
        present = present & ~(args[1] < args[0])[None, :]
    values = _values(name, vec.values, args, at_steps)
    return vec.unnamed(values, present)


def _values(
    name: str, values: FloatArray, args: Sequence[FloatArray], at_steps: IntArray
) -> FloatArray:
    math_fn = MATH_FUNCTIONS.get(name)
    if math_fn is not None:
        return math_fn(values)
    if name in DATE_FUNCTIONS:
        return date_function(name, values)
    if name == "timestamp":
        return np.broadcast_to(at_steps / 1000, values.shape).copy()
    if name == "round":
        return round_to(values, args[0][None, :] if args else np.ones(1))
    if name == "clamp":
        return go_max(args[0][None, :], go_min(args[1][None, :], values))
    if name == "clamp_min":
        return go_max(args[0][None, :], values)
    if name == "clamp_max":
        return go_min(args[0][None, :], values)
    raise AssertionError(f"function {name} not dispatched")


def _sorted(vec: Vec, descending: bool) -> Vec:
    """``sort``, ``sort_desc``: order only shows in an instant query, a single step, where
    the elements are ordered as Prometheus' Go sort orders them (:mod:`.ranking`)."""
    if vec.steps != 1 or len(vec.labels) < 2:
        return vec
    vec = vec.ordered()
    rows = np.flatnonzero(vec.present[:, 0]).astype(np.int64)
    whole = np.zeros(1, dtype=np.int64), np.array([rows.size], dtype=np.int64)
    ranking.go_sort(np.ascontiguousarray(vec.values[:, 0]), rows, *whole, descending)
    return vec.take(rows)


def date_function(name: str, seconds: FloatArray) -> FloatArray:
    """A date function of Unix times in seconds (UTC), as Go's ``time`` computes them.

    The time is truncated to whole seconds, as Prometheus' ``time.Unix(int64(v), 0)``.
    """
    usable = np.isfinite(seconds) & (np.abs(seconds) < _DATE_LIMIT)
    t = np.trunc(np.where(usable, seconds, 0)).astype(np.int64)
    moment = t.astype("datetime64[s]")
    days = moment.astype("datetime64[D]")
    months = moment.astype("datetime64[M]")
    years = moment.astype("datetime64[Y]")
    if name == "day_of_month":
        out = (days - months.astype("datetime64[D]")).astype(np.int64) + 1
    elif name == "day_of_week":
        out = (days.astype(np.int64) + 4) % 7  # 1970-01-01 was a Thursday; Sunday is 0
    elif name == "day_of_year":
        out = (days - years.astype("datetime64[D]")).astype(np.int64) + 1
    elif name == "days_in_month":
        out = ((months + 1).astype("datetime64[D]") - months.astype("datetime64[D]")).astype(
            np.int64
        )
    elif name == "hour":
        out = (t // 3600) % 24
    elif name == "minute":
        out = (t // 60) % 60
    elif name == "month":
        out = months.astype(np.int64) % 12 + 1
    else:
        out = years.astype(np.int64) + 1970
    return np.where(usable, out.astype(np.float64), np.nan)


def absent(vec: Vec, arg: Node) -> Vec:
    """``absent(arg)``: at each step, nothing if ``vec`` has elements, else one of value 1."""
    present: BoolArray = ~np.logical_or.reduce(vec.present, axis=0)
    return Vec([absent_labels(arg)], np.ones((1, vec.steps)), present[None, :])


def absent_labels(arg: Node) -> Labels:
    """Prometheus' ``createLabelsForAbsentFunction``: the equality matchers the query wrote
    in the selector (a tenant's added one is not among them)."""
    sel = arg.selector if isinstance(arg, MatrixNode) else arg
    if not isinstance(sel, SelectorNode):
        return ()
    result: dict[str, str] = {}
    seen: set[str] = set()
    for m in sel.own_matchers:
        if m.name == METRIC_NAME:
            continue
        if m.op == "=" and m.name not in seen:
            result[m.name] = m.value
            seen.add(m.name)
        else:
            result.pop(m.name, None)
    return tuple(sorted((k, v) for k, v in result.items() if v != ""))
