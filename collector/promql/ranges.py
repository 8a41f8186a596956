"""Range-vector functions (``rate``, ``*_over_time``...) over one series' window at one step.

Each range function takes the window's points (times in milliseconds, values;
staleness markers already removed, at least one point) and returns the value,
or None when Prometheus drops the element (for example ``rate`` of one point).
The arithmetic follows Prometheus 2.x's ``promql/functions.go``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from .floats import go_div, go_sqrt, kahan_inc, quantile


@dataclass(frozen=True, slots=True)
class Window:
    """Where a range selection sits: evaluation time, range and offset, all milliseconds."""

    ts: int
    range_ms: int
    offset_ms: int


RangeFn = Callable[[Sequence[int], Sequence[float], Window, float], float | None]


def _extrapolated_rate(
    times: Sequence[int], values: Sequence[float], w: Window, is_counter: bool, is_rate: bool
) -> float | None:
    if len(values) < 2:
        return None
    range_start = w.ts - (w.range_ms + w.offset_ms)
    range_end = w.ts - w.offset_ms
    result = values[-1] - values[0]
    if is_counter:
        last = 0.0
        for v in values:
            if v < last:
                result += last
            last = v
    duration_to_start = (times[0] - range_start) / 1000
    duration_to_end = (range_end - times[-1]) / 1000
    sampled_interval = (times[-1] - times[0]) / 1000
    average_between = sampled_interval / (len(values) - 1)
    if is_counter and result > 0 and values[0] >= 0:
        duration_to_zero = sampled_interval * (values[0] / result)
        if duration_to_zero < duration_to_start:
            duration_to_start = duration_to_zero
    threshold = average_between * 1.1
    extrapolate_to = sampled_interval
    extrapolate_to += duration_to_start if duration_to_start < threshold else average_between / 2
    extrapolate_to += duration_to_end if duration_to_end < threshold else average_between / 2
    result = result * go_div(extrapolate_to, sampled_interval)
    if is_rate:
        result = result / (w.range_ms / 1000)
    return result


def _rate(t: Sequence[int], v: Sequence[float], w: Window, _: float) -> float | None:
    return _extrapolated_rate(t, v, w, True, True)


def _increase(t: Sequence[int], v: Sequence[float], w: Window, _: float) -> float | None:
    return _extrapolated_rate(t, v, w, True, False)


def _delta(t: Sequence[int], v: Sequence[float], w: Window, _: float) -> float | None:
    return _extrapolated_rate(t, v, w, False, False)


def _irate(times: Sequence[int], values: Sequence[float], w: Window, _: float) -> float | None:
    if len(values) < 2:
        return None
    last, previous = values[-1], values[-2]
    result = last if last < previous else last - previous
    interval = times[-1] - times[-2]
    if interval == 0:
        return None
    return result / (interval / 1000)


def _deriv(times: Sequence[int], values: Sequence[float], w: Window, _: float) -> float | None:
    if len(values) < 2:
        return None
    # Least-squares slope, x relative to the first point (as Prometheus, to keep precision).
    t0 = times[0]
    n = 0.0
    sum_x = c_x = sum_y = c_y = sum_xy = c_xy = sum_x2 = c_x2 = 0.0
    init_y = values[0]
    const_y = True
    for i, (t, y) in enumerate(zip(times, values, strict=True)):
        if const_y and i > 0 and y != init_y:
            const_y = False
        n += 1.0
        x = (t - t0) / 1e3
        sum_x, c_x = kahan_inc(x, sum_x, c_x)
        sum_y, c_y = kahan_inc(y, sum_y, c_y)
        sum_xy, c_xy = kahan_inc(x * y, sum_xy, c_xy)
        sum_x2, c_x2 = kahan_inc(x * x, sum_x2, c_x2)
    if const_y:
        return math.nan if math.isinf(init_y) else 0.0
    sum_x += c_x
    sum_y += c_y
    sum_xy += c_xy
    sum_x2 += c_x2
    cov_xy = sum_xy - sum_x * sum_y / n
    var_x = sum_x2 - sum_x * sum_x / n
    return go_div(cov_xy, var_x)


def _avg_over_time(t: Sequence[int], values: Sequence[float], w: Window, _: float) -> float:
    mean = count = c = 0.0
    for v in values:
        count += 1
        if math.isinf(mean):
            if math.isinf(v) and (mean > 0) == (v > 0):
                continue
            if not math.isinf(v) and not math.isnan(v):
                continue
        mean, c = kahan_inc(v / count - mean / count, mean, c)
    if math.isinf(mean):
        return mean
    return mean + c


def _sum_over_time(t: Sequence[int], values: Sequence[float], w: Window, _: float) -> float:
    total = c = 0.0
    for v in values:
        total, c = kahan_inc(v, total, c)
    if math.isinf(total):
        return total
    return total + c


def _max_over_time(t: Sequence[int], values: Sequence[float], w: Window, _: float) -> float:
    best = values[0]
    for v in values:
        if v > best or math.isnan(best):
            best = v
    return best


def _min_over_time(t: Sequence[int], values: Sequence[float], w: Window, _: float) -> float:
    best = values[0]
    for v in values:
        if v < best or math.isnan(best):
            best = v
    return best


def _count_over_time(t: Sequence[int], values: Sequence[float], w: Window, _: float) -> float:
    return float(len(values))


def _last_over_time(t: Sequence[int], values: Sequence[float], w: Window, _: float) -> float:
    return values[-1]


def _present_over_time(t: Sequence[int], values: Sequence[float], w: Window, _: float) -> float:
    return 1.0


def _variance(values: Sequence[float]) -> float:
    count = mean = c_mean = aux = c_aux = 0.0
    for v in values:
        count += 1
        delta = v - (mean + c_mean)
        mean, c_mean = kahan_inc(delta / count, mean, c_mean)
        aux, c_aux = kahan_inc(delta * (v - (mean + c_mean)), aux, c_aux)
    return (aux + c_aux) / count


def _stdvar_over_time(t: Sequence[int], values: Sequence[float], w: Window, _: float) -> float:
    return _variance(values)


def _stddev_over_time(t: Sequence[int], values: Sequence[float], w: Window, _: float) -> float:
    return go_sqrt(_variance(values))


def _quantile_over_time(t: Sequence[int], values: Sequence[float], w: Window, q: float) -> float:
    return quantile(q, list(values))


RANGE_FUNCTIONS: Mapping[str, RangeFn] = MappingProxyType(
    {
        "rate": _rate,
        "increase": _increase,
        "delta": _delta,
        "irate": _irate,
        "deriv": _deriv,
        "avg_over_time": _avg_over_time,
        "sum_over_time": _sum_over_time,
        "max_over_time": _max_over_time,
        "min_over_time": _min_over_time,
        "count_over_time": _count_over_time,
        "last_over_time": _last_over_time,
        "present_over_time": _present_over_time,
        "stdvar_over_time": _stdvar_over_time,
        "stddev_over_time": _stddev_over_time,
        "quantile_over_time": _quantile_over_time,
    }
)
"""The range-vector functions by name (the plan accepts exactly these)."""
