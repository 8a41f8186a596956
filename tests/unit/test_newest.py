"""The instant lookback on one axis, against a point-by-point search."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.promql.newest import newest
from collector.tsdb.series import STALE, stale_mask

# A row: a run of points (readings and staleness markers) somewhere in 12 times, sometimes
# with a gap: the storage's usual rows, and the others.
point = st.sampled_from((1.0, 2.0, float("nan"), STALE))


@st.composite
def a_row(draw: st.DrawFn) -> list[float | None]:
    first = draw(st.integers(0, 11))
    last = draw(st.integers(first, 11))
    row: list[float | None] = [None] * 12
    for i in range(first, last + 1):
        row[i] = draw(point)
    if draw(st.booleans()) and last - first > 1:
        row[draw(st.integers(first + 1, last - 1))] = None
    return row


cells = st.lists(a_row(), min_size=1, max_size=6)


def by_search(
    times: list[int], row: list[float | None], at: int, lookback: int
) -> tuple[float, int] | None:
    """The newest point at or before ``at`` within the lookback, unless it is a marker."""
    for t, value in reversed(list(zip(times, row, strict=True))):
        if t > at or value is None:
            continue
        if t < at - lookback or bool(stale_mask(np.array([value]))[0]):
            return None
        return value, t
    return None


@settings(max_examples=200, deadline=None)
@given(
    rows=cells,
    gaps=st.lists(st.integers(1, 30), min_size=12, max_size=12),
    at=st.lists(st.integers(-10, 250), min_size=1, max_size=8, unique=True),
    lookback=st.integers(0, 60),
)
def test_each_step_finds_what_a_search_of_every_point_finds(
    rows: list[list[float | None]], gaps: list[int], at: list[int], lookback: int
) -> None:
    """Runs that end, start, have gaps and markers; steps before, between and after points."""
    times = np.cumsum(gaps).astype(np.int64)
    values = np.array([[0.0 if v is None else v for v in row] for row in rows])
    present = np.array([[v is not None for v in row] for row in rows])
    steps = np.array(sorted(at), dtype=np.int64)
    got, found, when = newest(times, values, present, steps, lookback, with_times=True)
    assert when is not None
    for r, row in enumerate(rows):
        for s, step in enumerate(steps.tolist()):
            want = by_search(times.tolist(), row, step, lookback)
            assert bool(found[r, s]) == (want is not None), (r, step)
            if want is not None:
                value, t = want
                assert np.array_equal(got[r, s], value, equal_nan=True)
                assert when[r, s] == t
