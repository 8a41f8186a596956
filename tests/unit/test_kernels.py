"""The compiled range functions against Prometheus 2.42's ``promql/functions.go`` written out
point by point in Python: each window's points as a list, the Go loops over them."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.promql.lookup import Window, bounds
from collector.promql.ranges import RANGE_FUNCTIONS

Points = list[tuple[int, float]]


def div(a: float, b: float) -> float:
    """Go's float division: by zero an infinity or NaN."""
    with np.errstate(all="ignore"):
        return float(np.float64(a) / np.float64(b))


def extrapolated_rate(points: Points, start: int, end: int, counter: bool, rate: bool) -> float:
    (t0, v0), (t1, v1) = points[0], points[-1]
    result = v1 - v0
    if counter:
        last = 0.0
        for _, v in points:
            if v < last:
                result += last
            last = v
    to_start, to_end = (t0 - start) / 1000, (end - t1) / 1000
    sampled = (t1 - t0) / 1000
    average = sampled / (len(points) - 1)
    if counter and result > 0 and v0 >= 0:
        to_start = min(to_start, sampled * div(v0, result))
    threshold = average * 1.1
    extrapolate = sampled + (to_start if to_start < threshold else average / 2)
    extrapolate += to_end if to_end < threshold else average / 2
    factor = extrapolate / sampled  # one factor, the range's seconds divided into it first
    if rate:
        factor /= (end - start) / 1000
    return result * factor


def kahan(inc: float, total: float, c: float) -> tuple[float, float]:
    t = total + inc
    c += (total - t) + inc if abs(total) >= abs(inc) else (inc - t) + total
    return t, c


def regression(points: Points, at: int) -> tuple[float, float]:
    initial = points[0][1]
    if all(v == initial for _, v in points[1:]):
        return (math.nan, math.nan) if math.isinf(initial) else (0.0, initial)
    if not all(math.isfinite(v) for _, v in points):
        return math.nan, math.nan
    sums = [(0.0, 0.0)] * 4
    for t, v in points:
        x = (t - at) / 1e3
        sums = [kahan(term, *s) for term, s in zip((x, v, x * v, x * x), sums, strict=True)]
    sx, sy, sxy, sxx = (s + c for s, c in sums)
    n = len(points)
    slope = div(sxy - sx * sy / n, sxx - sx * sx / n)
    return slope, sy / n - slope * sx / n


def quantile(q: float, values: list[float]) -> float:
    if math.isnan(q):
        return math.nan
    if q < 0 or q > 1:
        return -math.inf if q < 0 else math.inf
    ordered = [v for v in values if math.isnan(v)] + sorted(v for v in values if not math.isnan(v))
    rank = q * (len(ordered) - 1)
    lower = max(0.0, math.floor(rank))
    upper = min(len(ordered) - 1.0, lower + 1)
    weight = rank - math.floor(rank)
    return ordered[int(lower)] * (1 - weight) + ordered[int(upper)] * weight


def extreme(values: list[float], most: bool) -> float:
    best = values[0]
    for v in values:
        if (v > best if most else v < best) or math.isnan(best):
            best = v
    return best


def total(values: list[float], mean: bool) -> float:
    result, c = 0.0, 0.0
    for count, v in enumerate(values, 1):
        if not mean:
            result, c = kahan(v, result, c)
        elif not (math.isinf(result) and (math.isfinite(v) or v == result)):
            result, c = kahan(div(v, count) - div(result, count), result, c)
    return result if math.isinf(result) else result + c


def deviation(values: list[float], stddev: bool) -> float:
    """``stdvar_over_time`` / ``stddev_over_time``: Welford's update, both sums Kahan's."""
    count, mean, c_mean, aux, c_aux = 0.0, 0.0, 0.0, 0.0, 0.0
    for v in values:
        count += 1
        delta = v - (mean + c_mean)
        mean, c_mean = kahan(div(delta, count), mean, c_mean)
        aux, c_aux = kahan(delta * (v - (mean + c_mean)), aux, c_aux)
    variance = div(aux + c_aux, count)
    with np.errstate(invalid="ignore"):
        return float(np.sqrt(variance)) if stddev else variance


def expected(name: str, points: Points, start: int, end: int) -> float | None:
    """The element Prometheus answers for one window, None where it drops it."""
    values = [v for _, v in points]
    if name in ("rate", "increase", "delta", "deriv", "predict_linear") and len(points) < 2:
        return None
    if not points:
        return None
    if name in ("rate", "increase", "delta"):
        return extrapolated_rate(points, start, end, name != "delta", name == "rate")
    if name == "deriv":
        return regression(points, points[0][0])[0]
    if name == "predict_linear":
        slope, intercept = regression(points, end)
        return slope * 60.0 + intercept
    if name == "quantile_over_time":
        return quantile(0.8, values)
    if name in ("sum_over_time", "avg_over_time"):
        return total(values, name == "avg_over_time")
    if name in ("stddev_over_time", "stdvar_over_time"):
        return deviation(values, name == "stddev_over_time")
    return extreme(values, name == "max_over_time")


NAMES: tuple[str, ...] = (
    "rate",
    "increase",
    "delta",
    "deriv",
    "predict_linear",
    "quantile_over_time",
)
NAMES += ("max_over_time", "min_over_time", "sum_over_time", "avg_over_time")
NAMES += ("stddev_over_time", "stdvar_over_time")


@settings(max_examples=300, deadline=None)
@given(
    name=st.sampled_from(NAMES),
    rows=st.integers(1, 9),  # four series at a time in some kernels, and the rest
    width=st.integers(1, 14),
    data=st.data(),
    range_ms=st.sampled_from((30_000, 60_000, 150_000, 600_000)),
    backwards=st.booleans(),  # steps whose windows do not slide forward (a kernel may slide)
)
def test_each_window_is_what_the_go_loop_gives(
    name: str, rows: int, width: int, data: st.DataObject, range_ms: int, backwards: bool
) -> None:
    # fractions round, so only additions in Go's order give Go's bits
    fractions = (0.1, 1 / 3, 0.7, 2 / 7)
    cells = st.sampled_from(
        (0.0, 1.0, 2.5, 7.0, -3.0, 1e15, -0.0, math.nan, math.inf, -math.inf, *fractions)
    )
    values = np.array(data.draw(st.lists(cells, min_size=rows * width, max_size=rows * width)))
    values = values.reshape(rows, width)
    points = np.array(
        data.draw(st.lists(st.booleans(), min_size=rows * width, max_size=rows * width))
    ).reshape(rows, width)
    gaps = data.draw(st.lists(st.integers(1, 40_000), min_size=width, max_size=width))
    times = 1_000_000 + np.cumsum(np.array(gaps, dtype=np.int64))
    refs = times[0] + np.arange(-20_000, int(times[-1] - times[0]) + 40_000, 17_000)
    if backwards:
        refs = refs[::-1].copy()
    win = Window(
        times - times[0],
        times[:1, None],
        values,
        points,
        bounds(times, refs, range_ms),
        refs,
        range_ms,
        refs,
    )
    args = {
        "quantile_over_time": [np.full(refs.size, 0.8)],
        "predict_linear": [np.full(refs.size, 60.0)],
    }
    with np.errstate(all="ignore"):
        got, present = RANGE_FUNCTIONS[name](win, args.get(name, []))
    for r in range(rows):
        for s, ref in enumerate(refs.tolist()):
            inside = (times >= ref - range_ms) & (times <= ref) & points[r]
            window = list(zip(times[inside].tolist(), values[r, inside].tolist(), strict=True))
            want = expected(name, window, ref - range_ms, ref)
            assert present[r, s] == (want is not None), (r, s, window)
            if want is not None:
                assert got[r, s] == want or (math.isnan(got[r, s]) and math.isnan(want)), (
                    r,
                    s,
                    window,
                    got[r, s],
                    want,
                )
                if name in ("max_over_time", "min_over_time"):  # which of 0 and -0 comes first
                    assert np.signbit(got[r, s]) == np.signbit(want) or math.isnan(want)


def test_equal_values_deviate_by_exactly_zero() -> None:
    """0.1 or 1/3 seven times: a mean taken as a sum over a count is not exactly them, and the
    deviations from it were 2e-16 (Prometheus answers 0, and ``stddev_over_time(x) > 0`` must
    not hold on flat data)."""
    times = np.arange(7, dtype=np.int64) * 10_000
    refs = np.array([60_000, 70_000], dtype=np.int64)
    values = np.array([[0.1] * 7, [1 / 3] * 7, [1e15 / 7] * 7])
    win = Window(
        times,
        np.zeros((3, 1), dtype=np.int64),
        values,
        np.ones(values.shape, dtype=bool),
        bounds(times, refs, 60_000),
        refs,
        60_000,
        refs,
    )
    for name in ("stddev_over_time", "stdvar_over_time"):
        got, present = RANGE_FUNCTIONS[name](win, [])
        assert present.all()
        assert (got == 0.0).all(), (name, got)
