"""Function bodies: range-vector functions over one series' window, and label helpers.

Each range function takes the window's points (times in milliseconds, values;
staleness markers already removed, at least one point) and returns the value,
or None when Prometheus drops the element (for example ``rate`` of one point).
The arithmetic follows Prometheus 2.x's ``promql/functions.go``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .values import go_div, go_floor, go_sqrt


@dataclass(frozen=True, slots=True)
class Window:
    """Where a range selection sits: evaluation time, range and offset, all milliseconds."""

    ts: int
    range_ms: int
    offset_ms: int


RangeFn = Callable[[Sequence[int], Sequence[float], Window, float], float | None]


def kahan_inc(inc: float, total: float, c: float) -> tuple[float, float]:
    """One step of Kahan-Neumaier summation, as Prometheus' ``kahanSumInc``."""
    t = total + inc
    if abs(total) >= abs(inc):
        c += (total - t) + inc
    else:
        c += (inc - t) + total
    return t, c


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


RANGE_FUNCTIONS: dict[str, RangeFn] = {
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


def _nan_first_key(v: float) -> tuple[bool, float]:
    return (not math.isnan(v), v if not math.isnan(v) else 0.0)


def quantile(q: float, values: list[float]) -> float:
    """Prometheus' ``quantile``: linear interpolation between the closest ranks."""
    if not values:
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    if math.isnan(q):
        return math.nan
    values.sort(key=_nan_first_key)  # Go's vectorByValueHeap puts NaN first
    n = float(len(values))
    rank = q * (n - 1)
    lower = max(0.0, go_floor(rank))
    upper = min(n - 1, lower + 1)
    weight = rank - go_floor(rank)
    return values[int(lower)] * (1 - weight) + values[int(upper)] * weight


def round_to(v: float, to_nearest: float) -> float:
    """``round(v, to_nearest)``: ties go up, as Prometheus."""
    inverse = go_div(1.0, to_nearest)
    return go_div(go_floor(v * inverse + 0.5), inverse)


LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def _extract(template: str) -> tuple[str, int, str] | None:
    """Go's ``regexp.extract``: the name after a ``$``, its group number (or -1), the rest."""
    if not template:
        return None
    brace = template[0] == "{"
    body = template[1:] if brace else template
    i = 0
    while i < len(body) and (body[i].isalnum() or body[i] == "_"):
        i += 1
    if i == 0:
        return None
    name = body[:i]
    if brace:
        if i >= len(body) or body[i] != "}":
            return None
        i += 1
    num = -1
    if name.isascii() and name.isdigit() and not (name[0] == "0" and len(name) > 1):
        num = int(name) if len(name) < 9 else -1
    return name, num, body[i:]


def expand_template(template: str, match: re.Match[str]) -> str:
    """Go's ``Regexp.ExpandString``: ``$1``, ``${1}``, ``$name``, ``${name}``, ``$$``."""
    out: list[str] = []
    groups = match.re.groupindex
    while template:
        before, sep, after = template.partition("$")
        if not sep:
            break
        out.append(before)
        template = after
        if template.startswith("$"):
            out.append("$")
            template = template[1:]
            continue
        found = _extract(template)
        if found is None:
            out.append("$")
            continue
        name, num, template = found
        index = num if num >= 0 else groups.get(name, -1)
        if 0 <= index <= match.re.groups:
            out.append(match.group(index) or "")
    out.append(template)
    return "".join(out)
