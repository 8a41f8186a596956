"""Batches: the packed series a normaliser hands over read like the dict they replace."""

from __future__ import annotations

from array import array

import pytest

from collector.normalise.batch import Series
from collector.normalise.bodies import Normaliser


def test_packed_series_read_as_a_mapping() -> None:
    keys = (b"a{}", b'b{l="1"}', b"c{}")
    series = Series(keys, array("d", [1.0, 2.5, float("inf")]))
    plain = {b"a{}": 1.0, b'b{l="1"}': 2.5, b"c{}": float("inf")}
    assert series == plain
    assert plain == series
    assert list(series) == list(plain)
    assert len(series) == 3
    assert list(series.items()) == list(plain.items())
    assert list(series.values()) == list(plain.values())
    assert series[b'b{l="1"}'] == 2.5
    assert series.get(b"z{}") is None
    assert b"c{}" in series
    assert b"z{}" not in series
    assert series.keys() - {b"a{}"} == {b'b{l="1"}', b"c{}"}
    with pytest.raises(KeyError):
        series[b"z{}"]


def test_batches_of_one_layout_share_their_keys() -> None:
    normaliser = Normaliser("x")
    first = normaliser.normalise(b'a{l="1"} 1\nb 2\n').series
    second = normaliser.normalise(b'a{l="1"} 3\nb 4\n').series
    assert isinstance(first, Series)
    assert isinstance(second, Series)
    assert first.packed()[0] is second.packed()[0]
    assert (first[b"b{}"], second[b"b{}"]) == (2, 4)


def test_keys_and_values_of_different_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="2 keys for 1 values"):
        Series((b"a{}", b"b{}"), array("d", [1]))
