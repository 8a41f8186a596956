"""Batches: the packed series a normaliser hands over read like the dict they replace."""

from __future__ import annotations

from array import array

import pytest

from collector.batch import Keys, Series


def test_packed_series_read_as_a_mapping() -> None:
    keys = Keys((b"a{}", b'b{l="1"}', b"c{}"))
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
    keys = Keys((b"a{}", b"b{}"))
    first, second = Series(keys, array("d", [1, 2])), Series(keys, array("d", [3, 4]))
    assert (first[b"b{}"], second[b"b{}"]) == (2, 4)
    assert first != second
    assert first.packed()[0] is second.packed()[0]


def test_keys_and_values_of_different_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="2 keys for 1 values"):
        Series(Keys((b"a{}", b"b{}")), array("d", [1]))
