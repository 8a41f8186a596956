"""Range-vector functions (``rate``, ``*_over_time``...) over one block's windows at every step.

Each function takes a :class:`~.lookup.Window` (a block's series, or several
blocks' stacked, and each step's window on them) and its scalar arguments, one value per step, and
returns ``(values, present)``, both ``(n, k)``: ``present`` is false where
Prometheus drops the element (an empty window, ``rate`` of one point...).
Sums, counts, first and last points and counter corrections come from prefix
arrays in closed form; min, max, quantiles, variances and Holt-Winters, which
have none, from window tensors a chunk of steps at a time. The arithmetic
follows Prometheus 2.42's ``promql/functions.go``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

import numpy as np

from .arrays import BoolArray, FloatArray
from .floats import go_float_verb_f
from .lookup import Window
from .values import QueryError

Result = tuple[FloatArray, BoolArray]
RangeFn = Callable[[Window, Sequence[FloatArray]], Result]


def _extrapolated(win: Window, counter: bool, rate: bool) -> Result:
    """``rate``, ``increase``, ``delta``: Prometheus' ``extrapolatedRate``."""
    count = win.count
    first, last = win.first, win.last
    v0, v1 = win.value(first), win.value(last)
    t0, t1 = win.time(first), win.time(last)
    result = v1 - v0
    if counter:
        previous, has = win.previous_values()
        result = result + win.pairs(np.where(has & (win.values < previous), previous, 0.0))
    to_start = (t0 - (win.refs - win.range_ms)) / 1000
    to_end = (win.refs - t1) / 1000
    sampled = (t1 - t0) / 1000
    average = sampled / np.maximum(count - 1, 1)
    if counter:
        to_zero = sampled * (v0 / result)
        zero_first = (result > 0) & (v0 >= 0) & (to_zero < to_start)
        to_start = np.where(zero_first, to_zero, to_start)
    threshold = average * 1.1
    extrapolate_to = sampled + np.where(to_start < threshold, to_start, average / 2)
    extrapolate_to = extrapolate_to + np.where(to_end < threshold, to_end, average / 2)
    factor = extrapolate_to / sampled
    if rate:
        factor = factor / (win.range_ms / 1000)
    return result * factor, count >= 2


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


DIRECT_WIDTH = 32
"""Windows spanning at most this many axis positions are regressed point by point."""


def _regression(win: Window, intercept_ms: np.ndarray) -> tuple[FloatArray, FloatArray]:
    """Least-squares slope and intercept at ``intercept_ms``, as Prometheus' ``linearRegression``:
    over each window's points laid out (:meth:`Window.spans`) where windows are narrow, from
    prefix sums otherwise."""
    if win.widest <= DIRECT_WIDTH:
        return _regression_direct(win, intercept_ms)
    return _regression_prefix(win, intercept_ms)


def _regression_direct(win: Window, intercept_ms: np.ndarray) -> tuple[FloatArray, FloatArray]:
    """The regression summed over each window's points in float64, ``x`` relative to the
    intercept as Prometheus takes it: no long prefix to cancel, so no extended precision."""
    axis, origin, values, points = win.axis, win.origin[:, :, None], win.values, win.points
    shape = win.count.shape
    intercept_ms = np.broadcast_to(intercept_ms, shape)
    initial = win.value(win.first)
    slope, at = np.empty(shape), np.empty(shape)
    count = win.count
    for steps, index, inside in win.spans():
        # (n, w, steps): a window's points lie along axis 1, each of them a contiguous slice
        index, inside = index.T, inside.T
        mask = points[:, index] & inside[None]
        y_all = values[:, index]
        x = (axis[index][None] + origin - intercept_ms[:, None, steps]) / 1000
        x = np.where(mask, x, 0.0)
        y = np.where(mask, y_all, 0.0)
        n = count[:, steps]
        sx, sy = x.sum(axis=1), y.sum(axis=1)
        sxy, sxx = (x * y).sum(axis=1), (x * x).sum(axis=1)
        s = (sxy - sx * sy / n) / (sxx - sx * sx / n)
        i = sy / n - s * sx / n
        first = initial[:, steps]
        constant = ~(mask & (y_all != first[:, None])).any(axis=1)
        spoilt = (mask & ~np.isfinite(y_all)).any(axis=1)
        flat = np.where(np.isinf(first), np.nan, 0.0)
        slope[:, steps] = np.where(constant, flat, np.where(spoilt, np.nan, s))
        at[:, steps] = np.where(constant, first + flat, np.where(spoilt, np.nan, i))
    return slope, at


def _regression_prefix(win: Window, intercept_ms: np.ndarray) -> tuple[FloatArray, FloatArray]:
    """Least-squares slope and intercept at ``intercept_ms``, as Prometheus' ``linearRegression``.

    Sums come from extended-precision prefix sums with ``x`` relative to each
    row's first time, shifted to the intercept afterwards; a window of equal
    values has slope 0 (NaN for infinities), any other non-finite value NaN.
    """
    x = (win.axis / 1000).astype(np.float64)
    y = win.values
    n = win.count.astype(np.longdouble)
    sx, sy = win.sums(np.broadcast_to(x, y.shape)), win.sums(y)
    sxy, sxx = win.sums(x * y), win.sums(np.broadcast_to(x * x, y.shape))
    c = ((intercept_ms - win.origin) / 1000).astype(np.longdouble)
    lx = sx.astype(np.longdouble) - n * c
    lxy = sxy.astype(np.longdouble) - c * sy
    lxx = sxx.astype(np.longdouble) - 2 * c * sx + n * c * c
    slope = (lxy - lx * sy / n) / (lxx - lx * lx / n)
    intercept = sy / n - slope * lx / n
    previous, has = win.previous_values()
    constant = win.pairs((has & (y != previous)).astype(np.float64)) == 0
    initial = win.value(win.first)
    spoilt = win.sums((~np.isfinite(y)).astype(np.float64)) > 0
    flat = np.where(np.isinf(initial), np.nan, 0.0)
    slope64 = np.where(constant, flat, np.where(spoilt, np.nan, slope.astype(np.float64)))
    at = np.where(constant, initial + flat, np.where(spoilt, np.nan, intercept.astype(np.float64)))
    return slope64, at


def _deriv(win: Window, _: Sequence[FloatArray]) -> Result:
    slope = _regression(win, win.time(win.first))[0]
    return slope, win.count >= 2


def _predict_linear(win: Window, args: Sequence[FloatArray]) -> Result:
    slope, intercept = _regression(win, np.broadcast_to(win.at_steps, win.count.shape))
    return slope * args[0] + intercept, win.count >= 2


def _sum_over_time(win: Window, _: Sequence[FloatArray]) -> Result:
    return win.sums(win.values), win.count >= 1


def _avg_over_time(win: Window, _: Sequence[FloatArray]) -> Result:
    count = win.count
    return win.sums(win.values) / np.maximum(count, 1), count >= 1


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


def _max(values: FloatArray, mask: BoolArray, _: int, __: Sequence[FloatArray]) -> FloatArray:
    # NaN only where every value is NaN: Prometheus replaces a NaN maximum by any value.
    found: FloatArray = np.fmax.reduce(np.where(mask, values, np.nan), axis=2)
    return found


def _min(values: FloatArray, mask: BoolArray, _: int, __: Sequence[FloatArray]) -> FloatArray:
    found: FloatArray = np.fmin.reduce(np.where(mask, values, np.nan), axis=2)
    return found


def _variance(values: FloatArray, mask: BoolArray, _: int, __: Sequence[FloatArray]) -> FloatArray:
    count = np.maximum(mask.sum(axis=2), 1)
    mean = np.where(mask, values, 0.0).sum(axis=2) / count
    deviation = np.where(mask, values - mean[..., None], 0.0)
    variance: FloatArray = (deviation * deviation).sum(axis=2) / count
    return variance


def _stddev(values: FloatArray, mask: BoolArray, r: int, args: Sequence[FloatArray]) -> FloatArray:
    return np.sqrt(_variance(values, mask, r, args))


def _quantile(
    values: FloatArray, mask: BoolArray, _: int, args: Sequence[FloatArray]
) -> FloatArray:
    """Prometheus' ``quantile``: NaNs sort first, then linear interpolation between ranks."""
    (q,) = args
    nan = mask & np.isnan(values)
    ordered = np.sort(np.where(mask & ~nan, values, np.inf), axis=2)
    count = mask.sum(axis=2)
    nans = nan.sum(axis=2)
    rank = q * (count - 1)
    lower = np.maximum(0, np.floor(rank))
    upper = np.minimum(count - 1, lower + 1)
    weight = rank - np.floor(rank)

    def at(position: FloatArray) -> FloatArray:
        index = np.clip(position.astype(np.int64) - nans, 0, values.shape[2] - 1)
        picked = np.take_along_axis(ordered, index[..., None], axis=2)[..., 0]
        return np.where(position < nans, np.nan, picked)

    result = at(lower) * (1 - weight) + at(upper) * weight
    result = np.where(q < 0, -np.inf, np.where(q > 1, np.inf, result))
    return np.where(np.isnan(q), np.nan, result)


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
        "avg_over_time": _avg_over_time,
        "sum_over_time": _sum_over_time,
        "count_over_time": _count_over_time,
        "last_over_time": _last_over_time,
        "present_over_time": _present_over_time,
        "max_over_time": _tensor_fn(_max),
        "min_over_time": _tensor_fn(_min),
        "stdvar_over_time": _tensor_fn(_variance),
        "stddev_over_time": _tensor_fn(_stddev),
        "quantile_over_time": _tensor_fn(_quantile),
    }
)
"""The range-vector functions by name (``absent_over_time`` is the evaluator's: it looks across
series)."""
