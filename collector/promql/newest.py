"""The instant lookback on one time axis: each series' newest point at or before each reference time.

An instant selector at reference time ``r`` takes each series' newest point in
``[r - lookback, r]`` unless that point is a staleness marker (Prometheus 2.x).

Why no pass along time for most rows: a storage's rows are mostly one
unbroken run of points (a series from its first point to its last), and for
those the newest point at a step is the step's column, or the run's last
point once the run has ended. So the answer is one gather of the steps'
columns, fixed where a run ended before a step; only the other rows are
filled along time.
"""

from __future__ import annotations

import numpy as np

from collector.tsdb.series import stale_mask

from .arrays import BoolArray, FloatArray, IntArray


def newest(
    times: IntArray,
    values: FloatArray,
    present: BoolArray,
    at: IntArray,
    lookback_ms: int,
    with_times: bool = False,
) -> tuple[FloatArray, BoolArray, IntArray | None]:
    """Rows of ``values`` (points where ``present``, on axis ``times``) at reference times
    ``at``: each row's value at each step, where one was found, and (``with_times``) its time."""
    pos = np.searchsorted(times, at, side="right") - 1
    oldest = np.searchsorted(times, at - lookback_ms, side="left")
    col = np.maximum(pos, 0)
    first, last, gappy = _runs(present)
    found_values = values[:, col]
    found = (first[:, None] <= pos[None, :]) & ((pos >= oldest) & (pos >= 0))[None, :]
    index = np.broadcast_to(col, found_values.shape) if with_times else None
    ended = last[:, None] < pos[None, :]
    found &= ~ended
    # a run's last point is found by the steps within the lookback after it (it is mostly
    # a staleness marker, found by none)
    rows, steps = np.nonzero(ended & (last[:, None] >= oldest[None, :]))
    if rows.size:
        ends = last[rows]
        found_values[rows, steps] = values[rows, ends]
        found[rows, steps] = True
        if index is not None:
            index = index.copy()
            index[rows, steps] = ends
    if gappy.size:
        point = last_point(present[gappy])[:, col]
        found_values[gappy] = np.take_along_axis(values[gappy], np.maximum(point, 0), axis=1)
        found[gappy] = (point >= oldest[None, :]) & (pos >= 0)[None, :]
        if index is not None:
            index = index.copy()
            index[gappy] = np.maximum(point, 0)
    found &= ~stale_mask(found_values)  # the newest point is a staleness marker: no value
    return found_values, found, times[index] if index is not None else None


def last_point(points: BoolArray) -> IntArray:
    """For each position, the index of the newest point at or before it (-1 if none)."""
    ramp = np.arange(points.shape[1], dtype=np.int64)
    filled: IntArray = np.maximum.accumulate(np.where(points, ramp, -1), axis=1)
    return filled


def _runs(points: BoolArray) -> tuple[IntArray, IntArray, IntArray]:
    """Each row's first and last point (an empty row: past the end, and -1), and the rows
    whose points are not one unbroken run."""
    width = points.shape[1]
    count = points.sum(axis=1)
    first = np.where(count > 0, points.argmax(axis=1), width)
    # argmax along a reversed view is ~50x slower than along a contiguous copy (numpy 2.4)
    last = width - 1 - np.ascontiguousarray(points[:, ::-1]).argmax(axis=1)
    last = np.where(count > 0, last, -1)
    gappy = np.flatnonzero((count > 0) & (last - first + 1 != count))
    return first, last, gappy
