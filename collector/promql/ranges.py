"""Range-vector functions (``rate``, ``*_over_time``...) over one block's windows at every step.

Each function takes a :class:`~.lookup.Window` (a block's series, or several
blocks' stacked, and each step's window on them) and its scalar arguments, one value per step, and
returns ``(values, present)``, both ``(n, k)``: ``present`` is false where
Prometheus drops the element (an empty window, ``rate`` of one point...).
Rates, regressions, sums, means, variances, extremes and quantiles are compiled
loops (:mod:`.kernels`): rates and extremes read each row once and look each window
up, the others visit each window's points; counts, first and last points
and counter changes come from prefix arrays in closed form; Holt-Winters from
window tensors a chunk of steps at a time. The arithmetic
follows Prometheus 2.42's ``promql/functions.go``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

import numpy as np

from . import kernels
from .arrays import BoolArray, FloatArray, IntArray
from .floats import go_float_verb_f
from .lookup import Window
from .values import QueryError

Result = tuple[FloatArray, BoolArray]
RangeFn = Callable[[Window, Sequence[FloatArray]], Result]


def _extrapolated(win: Window, counter: bool, rate: bool) -> Result:
    """``rate``, ``increase``, ``delta``: Prometheus' ``extrapolatedRate``."""
    out, present = _out(win)
    kernels.extrapolated(*_axis_args(win), win.refs, win.range_ms, counter, rate, out, present)
    return out, present


def _out(win: Window) -> Result:
    """``(n, k)`` arrays for a kernel's answers and where there is one."""
    shape = (win.values.shape[0], win.lo.size)
    return np.empty(shape), np.empty(shape, dtype=bool)


def _axis_args(win: Window) -> tuple[FloatArray, BoolArray, IntArray, IntArray, IntArray, IntArray]:
    """What a kernel that reads the points' times takes first."""
    return win.values, win.points, win.axis, win.origin[:, 0], win.lo, win.hi


def _instant_value(win: Window, rate: bool) -> Result:
    """``irate``, ``idelta``: the last two points."""
    last, previous = win.value(win.last), win.value(win.previous)
    interval = win.time(win.last) - win.time(win.previous)
    if rate:
        result = np.where(last < previous, last, last - previous) / (interval / 1000)
    else:
        result = last - previous
    return result, (win.count >= 2) & (interval != 0)


def _changes(win: Window, _: Sequence[FloatArray]) -> Result:
    previous, has = win.previous_values()
    current = win.values
    changed = has & (current != previous) & ~(np.isnan(current) & np.isnan(previous))
    return win.pairs(changed.astype(np.float64)), win.count >= 1


def _resets(win: Window, _: Sequence[FloatArray]) -> Result:
    previous, has = win.previous_values()
    return win.pairs((has & (win.values < previous)).astype(np.float64)), win.count >= 1


def _regression(win: Window, at_first: bool) -> tuple[FloatArray, FloatArray, BoolArray]:
    """Each window's least-squares slope and the line's value at its first point
    (``at_first``) or at the step's time: Prometheus' ``linearRegression``."""
    slope, present = _out(win)
    intercept = np.empty(slope.shape)
    kernels.regression(*_axis_args(win), win.at_steps, at_first, slope, intercept, present)
    return slope, intercept, present


def _deriv(win: Window, _: Sequence[FloatArray]) -> Result:
    slope, _intercept, present = _regression(win, True)
    return slope, present


def _predict_linear(win: Window, args: Sequence[FloatArray]) -> Result:
    slope, intercept, present = _regression(win, False)
    return slope * args[0] + intercept, present


def _over_points(kernel: Callable[..., None], variant: bool) -> RangeFn:
    """A range function of a kernel that reads only the windows' values, in one of its two
    variants (max or min, mean or sum, deviation or variance)."""

    def apply(win: Window, _: Sequence[FloatArray]) -> Result:
        out, present = _out(win)
        kernel(win.values, win.points, win.lo, win.hi, variant, out, present)
        return out, present

    return apply


def _count_over_time(win: Window, _: Sequence[FloatArray]) -> Result:
    count = win.count
    return count.astype(np.float64), count >= 1


def _last_over_time(win: Window, _: Sequence[FloatArray]) -> Result:
    return win.value(win.last), win.count >= 1


def _present_over_time(win: Window, _: Sequence[FloatArray]) -> Result:
    count = win.count
    return np.ones(count.shape), count >= 1


def _tensor_fn(
    reduce: Callable[[FloatArray, BoolArray, int, Sequence[FloatArray]], FloatArray],
) -> RangeFn:
    """A range function computed over window tensors, chunk by chunk of steps."""

    def apply(win: Window, args: Sequence[FloatArray]) -> Result:
        count = win.count
        out = np.full(count.shape, np.nan)
        for steps, values, mask in win.tensors():
            chunk_args = [a[steps][None, :] for a in args]
            out[:, steps] = reduce(values, mask, win.range_ms, chunk_args)
        return out, count >= 1

    return apply


def _quantile(win: Window, args: Sequence[FloatArray]) -> Result:
    out, present = _out(win)
    kernels.quantile(win.values, win.points, win.lo, win.hi, args[0], out, present)
    return out, present


def _holt_winters(
    values: FloatArray, mask: BoolArray, _: int, args: Sequence[FloatArray]
) -> FloatArray:
    """Prometheus' double exponential smoothing, over each window's points in order."""
    sf, tf = args
    order = np.argsort(~mask, axis=2, kind="stable")
    points = np.take_along_axis(values, order, axis=2)
    count = mask.sum(axis=2)
    s1 = points[..., 0]
    b = points[..., min(1, points.shape[2] - 1)] - s1
    s0 = np.zeros(s1.shape)
    for i in range(1, points.shape[2]):
        live = i < count
        x = sf * points[..., i]
        if i > 1:
            b = np.where(live, tf * (s1 - s0) + (1 - tf) * b, b)
        y = (1 - sf) * (s1 + b)
        s0, s1 = np.where(live, s1, s0), np.where(live, x + y, s1)
    return np.where(count >= 2, s1, np.nan)


def _holt_winters_present(win: Window, args: Sequence[FloatArray]) -> Result:
    values, _ = _tensor_fn(_holt_winters)(win, args)
    return values, win.count >= 2


def check_smoothing(count: np.ndarray, sf: FloatArray, tf: FloatArray) -> None:
    """holt_winters' argument checks, made where Prometheus makes them: at the first series and
    step (series in selection order) whose window has points."""
    bad = ~((sf > 0) & (sf < 1)) & ~np.isnan(sf) | ~((tf > 0) & (tf < 1)) & ~np.isnan(tf)
    cells = (count >= 1) & bad[None, :]
    if not cells.any():
        return
    row = int(np.flatnonzero(cells.any(axis=1))[0])
    step = int(np.flatnonzero(cells[row])[0])
    if not (0 < sf[step] < 1) and not np.isnan(sf[step]):
        message = (
            f"invalid smoothing factor. Expected: 0 < sf < 1, got: {go_float_verb_f(sf[step])}"
        )
    else:
        message = f"invalid trend factor. Expected: 0 < tf < 1, got: {go_float_verb_f(tf[step])}"
    raise QueryError("execution", message)


TIMED = frozenset(("rate", "increase", "delta", "irate", "idelta", "deriv", "predict_linear"))
"""The functions that read their points' times, not only their order in the window."""

RANGE_FUNCTIONS: Mapping[str, RangeFn] = MappingProxyType(
    {
        "rate": lambda w, _: _extrapolated(w, True, True),
        "increase": lambda w, _: _extrapolated(w, True, False),
        "delta": lambda w, _: _extrapolated(w, False, False),
        "irate": lambda w, _: _instant_value(w, True),
        "idelta": lambda w, _: _instant_value(w, False),
        "changes": _changes,
        "resets": _resets,
        "deriv": _deriv,
        "predict_linear": _predict_linear,
        "holt_winters": _holt_winters_present,
        "avg_over_time": _over_points(kernels.total, True),
        "sum_over_time": _over_points(kernels.total, False),
        "count_over_time": _count_over_time,
        "last_over_time": _last_over_time,
        "present_over_time": _present_over_time,
        "max_over_time": _over_points(kernels.extreme, True),
        "min_over_time": _over_points(kernels.extreme, False),
        "stdvar_over_time": _over_points(kernels.variance, False),
        "stddev_over_time": _over_points(kernels.variance, True),
        "quantile_over_time": _quantile,
    }
)
"""The range-vector functions by name (``absent_over_time`` is the evaluator's: it looks across
series)."""
