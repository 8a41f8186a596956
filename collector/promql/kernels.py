"""Range functions over each step's window in a compiled loop (numba): most visit the
window's points; ``rate``/``increase``/``delta`` and the extremes, whose windows overlap
at fine steps, read each row once and look each window up.

Why compiled: in numpy, a range function over every step is a few dozen passes
over ``(series, steps)`` arrays, with prefix sums in extended precision for what
a window adds up. Over 19,000 series x 61 steps of 5-point windows (200 nodes of
the small-query bench), the function itself took, in numpy and here: ``rate``
100-143 and 15 ms, ``deriv`` 159 and 26-44 ms, ``quantile_over_time`` 93 and
15 ms, ``avg_over_time`` 40-49 and 22 ms, ``max_over_time`` 20 and 3-5 ms. The
loops also add in Prometheus' order, with its arithmetic (``promql/functions.go``
of 2.42), so the results are its own, not equal within a tolerance: a window of
equal values has a ``stddev_over_time`` of exactly 0, as in Prometheus, where
a mean taken first and the deviations from it after gave 2e-16.

Every kernel takes a window's arrays (:class:`~.lookup.Window`): ``values`` and
``points`` ``(n, width)`` on the axis ``axis`` (ms from each row's ``origin``,
one per row or one shared), each step's bounds ``[lo, hi)`` on it, and fills
``out`` ``(n, steps)``, and ``present``: where the window has the points the
function needs (Prometheus drops the element elsewhere).
"""

from __future__ import annotations

import numpy as np

from collector.compiled import compiled, inlined

from .arrays import BoolArray, FloatArray, IntArray


@compiled
def _origin(origin: IntArray, row: int) -> int:
    return int(origin[0] if origin.size == 1 else origin[row])


@compiled
def extrapolated(
    values: FloatArray,
    points: BoolArray,
    axis: IntArray,
    origin: IntArray,
    lo: IntArray,
    hi: IntArray,
    refs: IntArray,
    range_ms: int,
    counter: bool,
    rate: bool,
    out: FloatArray,
    present: BoolArray,
) -> None:
    """``rate`` (``counter`` and ``rate``), ``increase`` (``counter``) and ``delta``:
    Prometheus' ``extrapolatedRate`` of each window ending at ``refs``.

    Each row is read once: its points' columns, how many come before each column,
    and its counter resets (the value dropped from, reset by reset); a window's
    count, first and last point are then looked up, and to its last value less its
    first it adds the dropped values of the resets after its first point, in order, as
    Prometheus' loop does (the points without a reset add nothing there). Visiting each window's
    points instead took 176 ms of the fine-step bench's hour of 2,400 containers'
    ``rate`` at step 5 s (12 windows cover each point).
    """
    width = values.shape[1]
    before = np.zeros(width + 1, np.int64)  # points before each column
    column = np.empty(width, np.int64)  # each point's column
    reset = np.zeros(width + 1, np.int64)  # resets before each column
    dropped = np.empty(width)  # what each reset dropped from
    for r in range(values.shape[0]):
        base = _origin(origin, r)
        n, k, previous = 0, 0, 0.0
        for p in range(width):
            if points[r, p]:
                v = values[r, p]
                if counter and n and v < previous:
                    dropped[k] = previous
                    k += 1
                column[n], previous = p, v
                n += 1
            before[p + 1], reset[p + 1] = n, k
        for s in range(lo.size):
            count = before[hi[s]] - before[lo[s]]
            present[r, s] = count >= 2
            if count < 2:
                out[r, s] = np.nan
                continue
            first, last = column[before[lo[s]]], column[before[hi[s]] - 1]
            v0 = values[r, first]
            result = values[r, last] - v0
            for j in range(reset[first + 1], reset[last + 1]):
                result += dropped[j]
            t0, t1 = axis[first] + base, axis[last] + base
            to_start = (t0 - (refs[s] - range_ms)) / 1000
            to_end = (refs[s] - t1) / 1000
            sampled = (t1 - t0) / 1000
            average = sampled / (count - 1)
            if counter and result > 0 and v0 >= 0:
                to_zero = sampled * (v0 / result)
                if to_zero < to_start:
                    to_start = to_zero
            threshold = average * 1.1
            extrapolate_to = sampled
            extrapolate_to += to_start if to_start < threshold else average / 2
            extrapolate_to += to_end if to_end < threshold else average / 2
            factor = extrapolate_to / sampled
            if rate:
                factor /= range_ms / 1000
            out[r, s] = result * factor


@compiled
def _kahan(inc: float, total: float, c: float) -> tuple[float, float]:
    """Go's ``kahanSumInc`` (Neumaier's variant): the new sum and compensation."""
    t = total + inc
    if abs(total) >= abs(inc):
        c += (total - t) + inc
    else:
        c += (inc - t) + total
    return t, c


@compiled
def regression(
    values: FloatArray,
    points: BoolArray,
    axis: IntArray,
    origin: IntArray,
    lo: IntArray,
    hi: IntArray,
    at_ms: IntArray,
    at_first: bool,
    slope: FloatArray,
    intercept: FloatArray,
    present: BoolArray,
) -> None:
    """Prometheus' ``linearRegression`` of each window: the least-squares slope, and the
    line's value at the window's first point (``at_first``, ``deriv``) or at ``at_ms``
    (``predict_linear``). Equal values give slope 0 (NaN if infinite); any other window
    holding a non-finite value, NaN."""
    for r in range(values.shape[0]):
        base = _origin(origin, r)
        for s in range(lo.size):
            first, count = -1, 0
            for p in range(lo[s], hi[s]):
                if points[r, p]:
                    first = p if first < 0 else first
                    count += 1
            present[r, s] = count >= 2
            if count < 2:
                slope[r, s] = intercept[r, s] = np.nan
                continue
            at = axis[first] + base if at_first else at_ms[s]
            initial = values[r, first]
            constant, finite = True, True
            sx = cx = sy = cy = sxy = cxy = sxx = cxx = 0.0
            for p in range(first, hi[s]):
                if not points[r, p]:
                    continue
                y = values[r, p]
                if p != first and y != initial:
                    constant = False
                finite = finite and np.isfinite(y)
                x = (axis[p] + base - at) / 1e3
                sx, cx = _kahan(x, sx, cx)
                sy, cy = _kahan(y, sy, cy)
                sxy, cxy = _kahan(x * y, sxy, cxy)
                sxx, cxx = _kahan(x * x, sxx, cxx)
            if constant:
                flat = np.nan if np.isinf(initial) else 0.0
                slope[r, s], intercept[r, s] = flat, initial + flat
                continue
            if not finite:
                slope[r, s] = intercept[r, s] = np.nan
                continue
            sx, sy, sxy, sxx = sx + cx, sy + cy, sxy + cxy, sxx + cxx
            n = float(count)
            b = (sxy - sx * sy / n) / (sxx - sx * sx / n)
            slope[r, s], intercept[r, s] = b, sy / n - b * sx / n


@compiled
def extreme(
    values: FloatArray,
    points: BoolArray,
    lo: IntArray,
    hi: IntArray,
    most: bool,
    out: FloatArray,
    present: BoolArray,
) -> None:
    """``max_over_time`` (``most``) and ``min_over_time``: Prometheus' loop keeps a window's
    first value and takes a later one only if greater (``most``) or smaller, or if what it
    kept is NaN; so the answer is the first of the window's extreme values that are not NaN
    (of ``0`` and ``-0``, whichever comes first), NaN if all are.

    Why a queue: a window slides with the steps, and its candidates (each point no later
    point beats) are kept in order, best first, so each point is taken and dropped once.
    Visiting every window's points took 10 ms of 640 cards' ``max_over_time(...[1m])``
    over 5 minutes at step 1 s (30 points a window). A window that starts or ends before
    the last step's starts the queue again.
    """
    width = values.shape[1]
    before = np.zeros(width + 1, np.int64)  # points before each column
    queue = np.empty(width, np.int64)  # the candidates' columns, from head to tail
    for r in range(values.shape[0]):
        for p in range(width):
            before[p + 1] = before[p] + points[r, p]
        head, tail, taken = 0, 0, 0
        for s in range(lo.size):
            if s and (lo[s] < lo[s - 1] or hi[s] < hi[s - 1]):  # behind the last: start again
                head, tail, taken = 0, 0, lo[s]
            taken = max(taken, lo[s])
            while taken < hi[s]:
                v = values[r, taken]
                if points[r, taken] and not np.isnan(v):
                    while tail > head and (
                        values[r, queue[tail - 1]] < v if most else values[r, queue[tail - 1]] > v
                    ):
                        tail -= 1
                    queue[tail] = taken
                    tail += 1
                taken += 1
            while head < tail and queue[head] < lo[s]:
                head += 1
            present[r, s] = before[hi[s]] > before[lo[s]]
            out[r, s] = values[r, queue[head]] if head < tail else np.nan


@compiled
def quantile(
    values: FloatArray,
    points: BoolArray,
    lo: IntArray,
    hi: IntArray,
    q: FloatArray,
    out: FloatArray,
    present: BoolArray,
) -> None:
    """``quantile_over_time`` at ``q`` (one per step): Prometheus' ``quantile``, NaNs
    sorted first, linear interpolation between ranks; below 0 -Inf, above 1 +Inf."""
    ordered = np.empty(max(values.shape[1], 1))
    for r in range(values.shape[0]):
        for s in range(lo.size):
            count, nans = 0, 0
            for p in range(lo[s], hi[s]):
                if points[r, p]:
                    v = values[r, p]
                    if np.isnan(v):
                        nans += 1
                    else:
                        ordered[count - nans] = v
                    count += 1
            present[r, s] = count > 0
            if count == 0 or np.isnan(q[s]):
                out[r, s] = np.nan
                continue
            if q[s] < 0 or q[s] > 1:
                out[r, s] = -np.inf if q[s] < 0 else np.inf
                continue
            ordered[: count - nans].sort()
            rank = q[s] * (count - 1)
            lower = max(0.0, np.floor(rank))
            upper = min(count - 1.0, lower + 1)
            weight = rank - np.floor(rank)
            below = np.nan if lower < nans else ordered[int(lower) - nans]
            above = np.nan if upper < nans else ordered[int(upper) - nans]
            out[r, s] = below * (1 - weight) + above * weight


@compiled
def total(
    values: FloatArray,
    points: BoolArray,
    lo: IntArray,
    hi: IntArray,
    mean: bool,
    out: FloatArray,
    present: BoolArray,
) -> None:
    """``sum_over_time``, or ``avg_over_time`` (``mean``): Kahan sums as Prometheus adds, the
    mean kept as a running mean that an infinity holds.

    Four series at a time: each sum is a chain of dependent divisions and additions, and
    four chains side by side keep the CPU busy where one waits on its last result
    (640 series x 720 steps of 30 points, an hour's avg_over_time[1m] at 5 s: 68 -> 33 ms).
    """
    rows = values.shape[0]
    for r in range(0, rows - rows % 4, 4):
        for s in range(lo.size):
            n0, n1, n2, n3 = 0, 0, 0, 0
            a0, a1, a2, a3 = 0.0, 0.0, 0.0, 0.0
            c0, c1, c2, c3 = 0.0, 0.0, 0.0, 0.0
            for p in range(lo[s], hi[s]):
                if points[r, p]:
                    n0, a0, c0 = _added(values[r, p], n0, a0, c0, mean)
                if points[r + 1, p]:
                    n1, a1, c1 = _added(values[r + 1, p], n1, a1, c1, mean)
                if points[r + 2, p]:
                    n2, a2, c2 = _added(values[r + 2, p], n2, a2, c2, mean)
                if points[r + 3, p]:
                    n3, a3, c3 = _added(values[r + 3, p], n3, a3, c3, mean)
            _total_at(out, present, r, s, n0, a0, c0)
            _total_at(out, present, r + 1, s, n1, a1, c1)
            _total_at(out, present, r + 2, s, n2, a2, c2)
            _total_at(out, present, r + 3, s, n3, a3, c3)
    for r in range(rows - rows % 4, rows):
        for s in range(lo.size):
            count, result, c = 0, 0.0, 0.0
            for p in range(lo[s], hi[s]):
                if points[r, p]:
                    count, result, c = _added(values[r, p], count, result, c, mean)
            _total_at(out, present, r, s, count, result, c)


@inlined
def _added(v: float, count: int, result: float, c: float, mean: bool) -> tuple[int, float, float]:
    """One point more of :func:`total`'s sum or running mean: its count, sum and compensation."""
    count += 1
    if not mean:
        result, c = _kahan(v, result, c)
    elif not (
        np.isinf(result) and ((np.isinf(v) and (result > 0) == (v > 0)) or np.isfinite(v))
    ):  # an infinite mean stays what it is: Inf - Inf would be NaN
        result, c = _kahan(v / count - result / count, result, c)
    return count, result, c


@inlined
def _total_at(
    out: FloatArray, present: BoolArray, r: int, s: int, count: int, result: float, c: float
) -> None:
    present[r, s] = count > 0
    out[r, s] = result if np.isinf(result) else result + c


@compiled
def variance(
    values: FloatArray,
    points: BoolArray,
    lo: IntArray,
    hi: IntArray,
    stddev: bool,
    out: FloatArray,
    present: BoolArray,
) -> None:
    """``stdvar_over_time``, or ``stddev_over_time`` (``stddev``): Welford's running mean and
    sum of squared deviations, each a Kahan sum, as Prometheus 2.42 updates them point by point."""
    for r in range(values.shape[0]):
        for s in range(lo.size):
            count, mean, c_mean, aux, c_aux = 0.0, 0.0, 0.0, 0.0, 0.0
            for p in range(lo[s], hi[s]):
                if not points[r, p]:
                    continue
                v = values[r, p]
                count += 1
                delta = v - (mean + c_mean)
                mean, c_mean = _kahan(delta / count, mean, c_mean)
                aux, c_aux = _kahan(delta * (v - (mean + c_mean)), aux, c_aux)
            present[r, s] = count > 0
            result = (aux + c_aux) / count
            out[r, s] = np.sqrt(result) if stddev else result
