"""Which series of one node carry which label values: where a selection starts.

Why this layout: one column per label name holds each series' value as a small
integer code (a byte while the label has under 256 values on the node), built
when the series is first seen. A matcher is decided once per distinct value of
its label and applied to every series by one numpy lookup, so
``{namespace="team-a"}`` neither walks label sets nor runs a regex per series.
A column is only as long as the newest series that has its label, so the labels
of a few series (build info) cost next to nothing. Code 0 is the empty value,
which is how Prometheus reads a missing label.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

import numpy as np
from numpy.typing import NDArray

from collector.tsdb.series import Matcher

Mask = NDArray[np.bool_]
Codes = NDArray[np.unsignedinteger]
Verdicts = dict[tuple[Matcher, str], bool]
"""Matchers decided on label values, shared by every node of one query."""


def decide(matcher: Matcher, value: str, verdicts: Verdicts) -> bool:
    """Whether ``value`` passes ``matcher``, remembered in ``verdicts``."""
    known = verdicts.get((matcher, value))
    if known is None:
        known = verdicts[(matcher, value)] = matcher.matches({matcher.name: value})
    return known


class _Column:
    """One label name: every series' value code, and the codes' values in code order."""

    __slots__ = ("codes", "lookup")

    def __init__(self) -> None:
        self.codes: Codes = np.zeros(8, np.uint8)
        self.lookup: dict[str, int] = {"": 0}

    def set(self, sids: list[int], values: list[str]) -> int:
        """Give series ``sids`` (ascending) ``values``; return the bytes the column grew by."""
        lookup = self.lookup
        before = self.codes.nbytes
        grown = 0
        codes = []
        for value in values:
            code = lookup.get(value)
            if code is None:
                code = lookup[value] = len(lookup)
                grown += sys.getsizeof(value)
            codes.append(code)
        if len(lookup) > 1 << (8 * self.codes.itemsize):
            self.codes = self.codes.astype(np.min_scalar_type(len(lookup)))
        if sids[-1] >= len(self.codes):
            wider = np.zeros(max(sids[-1] + 1, len(self.codes) * 5 // 4 + 8), self.codes.dtype)
            wider[: len(self.codes)] = self.codes
            self.codes = wider
        self.codes[sids] = codes
        return grown + self.codes.nbytes - before

    def of(self, size: int) -> Codes:
        """The codes of series ``0..size-1``."""
        if len(self.codes) >= size:
            return self.codes[:size]
        out = np.zeros(size, self.codes.dtype)
        out[: len(self.codes)] = self.codes
        return out

    def at(self, sids: NDArray[np.int64]) -> Codes:
        """The codes of ``sids``."""
        inside = sids[sids < len(self.codes)]
        return self.codes[inside]

    @property
    def nbytes(self) -> int:
        """Bytes of its codes, its table and the table's values."""
        return self.codes.nbytes + sys.getsizeof(self.lookup) + sum(map(sys.getsizeof, self.lookup))


class LabelIndex:
    """Label value codes of a node's series, one column per label name."""

    def __init__(self) -> None:
        self._columns: dict[str, _Column] = {}
        self.value_bytes = 0
        """Bytes of the columns' codes and values, kept as they grow (reading it is free)."""

    def add(self, first: int, labels: Iterable[Iterable[tuple[str, str]]]) -> None:
        """Index the labels (``__name__`` included) of new series ``first``, ``first + 1``, ..."""
        by_name: dict[str, tuple[list[int], list[str]]] = {}
        for sid, pairs in enumerate(labels, first):
            for name, value in pairs:
                found = by_name.get(name)
                if found is None:
                    found = by_name[name] = ([], [])
                found[0].append(sid)
                found[1].append(value)
        for name, (sids, values) in by_name.items():
            column = self._columns.get(name)
            if column is None:
                column = self._columns[name] = _Column()
                self.value_bytes += column.nbytes
            self.value_bytes += column.set(sids, values)

    def mask(self, matcher: Matcher, size: int, verdicts: Verdicts) -> Mask | bool:
        """Which of series ``0..size-1`` pass ``matcher``: a mask, or one answer for all."""
        column = self._columns.get(matcher.name)
        if column is None:
            return decide(matcher, "", verdicts)
        if matcher.op in ("=", "!="):
            code = column.lookup.get(matcher.value)
            if code is None:
                return matcher.op == "!="
            hit: Mask = column.of(size) == code
            return hit if matcher.op == "=" else ~hit
        table = np.fromiter(
            (decide(matcher, value, verdicts) for value in column.lookup), bool, len(column.lookup)
        )
        passed: Mask = table[column.of(size)]
        return passed

    def names(self, sids: NDArray[np.int64]) -> set[str]:
        """Label names that any of ``sids`` carries."""
        return {name for name, column in self._columns.items() if column.at(sids).any()}

    def values(self, name: str, sids: NDArray[np.int64]) -> set[str]:
        """Values of label ``name`` among ``sids`` (the empty one left out)."""
        column = self._columns.get(name)
        if column is None:
            return set()
        values = list(column.lookup)
        return {values[code] for code in np.unique(column.at(sids)).tolist() if code}

    def compact(self, alive: NDArray[np.int64], size: int) -> None:
        """Keep series ``alive`` only (ascending), renumbered ``0..``; forget unused values."""
        for name, column in list(self._columns.items()):
            codes = column.of(size)[alive]
            used = np.union1d([0], codes)
            if len(used) == 1:
                del self._columns[name]
                continue
            values = list(column.lookup)
            column.lookup = {values[code]: new for new, code in enumerate(used.tolist())}
            recode = np.zeros(len(values), np.int64)
            recode[used] = np.arange(len(used))
            column.codes = recode[codes].astype(np.min_scalar_type(len(used)))
        self.value_bytes = sum(column.nbytes for column in self._columns.values())
