"""A range query's JSON answer written from arrays says what the per-point encoding says."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.promql.floats import format_value
from collector.promql.values import MatrixColumns
from collector.tsdb.series import LabelSet
from collector.web import promjson
from collector.web.promjson import matrix_body

texts = st.text(st.characters(codec="utf-8"), max_size=6)
label_sets = st.lists(st.tuples(st.from_regex(r"[a-z_]{1,4}", fullmatch=True), texts), max_size=3)
values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**54), 2**54).map(float),  # whole numbers: the compiled digits' path
    st.sampled_from([0.0, -0.0, 1e21, 1e-7, 123456789.0, math.nan, 2.0**53, 2.0**53 - 1]),
)


@st.composite
def answers(draw: st.DrawFn) -> MatrixColumns:
    steps = draw(st.integers(1, 6))
    rows = draw(st.integers(0, 5))
    labels = [tuple(sorted(dict(draw(label_sets)).items())) for _ in range(rows)]
    at = np.sort(np.array(draw(st.lists(st.integers(0, 2**41), min_size=steps, max_size=steps))))
    grid = np.array(draw(st.lists(values, min_size=rows * steps, max_size=rows * steps)))
    present = np.array(draw(st.lists(st.booleans(), min_size=rows * steps, max_size=rows * steps)))
    present = present.reshape(rows, steps)
    present[:, 0] = True  # every series of an answer has a point
    return MatrixColumns(labels, at, grid.reshape(rows, steps), present)


def expected(answer: MatrixColumns) -> object:
    """What the point-by-point encoding of the same answer says."""
    result = [
        {"metric": s.labels, "values": [[t, format_value(v)] for t, v in s.points]}
        for s in answer.series()
    ]
    return {"status": "success", "data": {"resultType": "matrix", "result": result}}


@settings(max_examples=300, deadline=None)
@given(answer=answers())
def test_the_packed_body_reads_as_the_point_by_point_encoding(answer: MatrixColumns) -> None:
    assert json.loads(matrix_body(answer)) == expected(answer)


def test_storage_label_sets_read_alike_whole_less_their_name_and_remembered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A storage label set's text is remembered apart for the set whole and less ``__name__``,
    and still right once its generation is forgotten."""
    monkeypatch.setattr(promjson, "SEEN_SERIES", 3)
    monkeypatch.setattr(promjson, "_SEEN", (promjson._Seen(), promjson._Seen()))
    rng = np.random.default_rng(7)
    steps, rows = 9, 8
    values = rng.choice([0.5, -0.0, 3e9, math.inf, 7.25], size=(rows, steps))
    present = rng.random((rows, steps)) < 0.8
    present[:, 0] = True
    stored = [LabelSet({"__name__": "m", "pod": f"p{i}", "zone": 'a"\\é'}) for i in range(rows)]
    at = np.arange(steps, dtype=np.int64) * 15_000
    whole = MatrixColumns([m.pairs for m in stored], at, values, present, stored)
    unnamed = MatrixColumns([m.pairs[1:] for m in stored], at, values, present, stored)
    for answer in (whole, unnamed, whole, unnamed, whole):
        assert json.loads(matrix_body(answer)) == expected(answer)
    assert all(len(seen.young) <= 4 and len(seen.old) <= 4 for seen in promjson._SEEN)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=40),
    st.integers(0, 3000),
    st.integers(0, 2**32),
)
def test_each_point_is_found_among_the_distinct_values(
    drawn: list[int], points: int, seed: int
) -> None:
    """Whatever the bit patterns (colliding in the table or not), each point's index names
    its own pattern among the distinct ones."""
    patterns = np.array(drawn, dtype=np.uint64)
    bits = np.random.default_rng(seed).choice(patterns, points)
    distinct, which = promjson._distinct(bits)
    assert np.array_equal(distinct, np.unique(bits))
    assert np.array_equal(distinct[which], bits)


@pytest.mark.parametrize(
    "value",
    [
        0.0,
        -0.0,
        1.0,
        -1.0,
        9.0,
        10.0,
        99.0,
        100.0,
        2.0**53 - 1,
        -(2.0**53 - 1),
        2.0**53,
        2.0**63,
        1e21,
        0.5,
        -2.5,
        1e-7,
        1e-4,
        -9.5e-5,
        0.1 + 0.2,
        1e15 + 0.5,
        math.nan,
        math.inf,
        -math.inf,
        81559.0 * 2**20,
    ],
)
def test_each_value_is_written_as_go_writes_it(value: float) -> None:
    """Whole numbers through the compiled digits, the rest formatted: Prometheus' text
    either way (``MarshalValue``: an exponent below 1e-6 and from 1e21)."""
    texts, starts = promjson._texts(np.array([value, 3.0, value]))
    written = [texts[a:b].tobytes().decode() for a, b in itertools.pairwise(starts)]
    assert written == [format_value(value), "3", format_value(value)]


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(
        st.floats() | st.floats(1e-8, 1e-3) | st.floats(1e-4, 1e17), min_size=1, max_size=40
    )
)
def test_any_values_are_written_as_go_writes_them(values: list[float]) -> None:
    """Whatever way each value goes (digits, orjson's shortest text, or formatted), its text
    is Prometheus': ratios, tiny, huge, whole, -0 and NaN mixed in one answer."""
    texts, starts = promjson._texts(np.array(values))
    written = [texts[a:b].tobytes().decode() for a, b in itertools.pairwise(starts)]
    assert written == [format_value(v) for v in values]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.integers(-(10**15) + 1, 10**15 - 1),
            st.integers(-2000, 2000),
            st.integers(0, 2**41).map(lambda ms: ms - ms % 1000),  # whole seconds
            st.integers(-(2**62), 2**62),
        ),
        max_size=8,
    )
)
def test_each_steps_time_is_written_as_prometheus_writes_it(at_ms: list[int]) -> None:
    """A step's time as Prometheus 2.42's ``util/jsonutil.MarshalTimestamp`` writes it: a
    sign, the whole seconds, and only off a second a point and three digits of milliseconds
    (``1700000051``, ``1700000000.500``; the real Prometheus' own bodies are compared in
    ``tests/integration/test_promql_vs_prometheus.py``)."""
    blob, widths = promjson._step_pieces(np.array(at_ms, dtype=np.int64))
    ends = np.cumsum(widths).tolist()
    written = [blob[a:b].tobytes().decode() for a, b in itertools.pairwise([0, *ends])]
    assert written == [f'[{marshal_timestamp(ms)},"' for ms in at_ms]


def marshal_timestamp(ms: int) -> str:
    """``MarshalTimestamp`` of Prometheus 2.42, written out."""
    sign, ms = ("-", -ms) if ms < 0 else ("", ms)
    fraction = f".{ms % 1000:03d}" if ms % 1000 else ""
    return f"{sign}{ms // 1000}{fraction}"
