"""What the history offers its readers: groups of series on a shared time axis, selected by matchers.

:class:`~collector.tsdb.history.History` implements :class:`Queryable`; tests
use small in-memory ones. Times are Unix seconds (floats).

Why columns: the query engine (:mod:`collector.promql`) evaluates whole arrays,
so the storage hands it arrays, one :class:`Columns` per group of series that
share their sample times (a node's series are recorded together). A series that
has no point at one of its group's times holds :data:`ABSENT` there; a
staleness marker is :data:`STALE`. Both are NaNs with their own bit patterns,
told apart from each other and from a NaN reading by :func:`absent_mask` and
:func:`stale_mask`.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

_STALE_BITS = 0x7FF0000000000002
_ABSENT_BITS = 0x7FF800000000AB5E


def _from_bits(bits: int) -> float:
    value: float = struct.unpack("<d", struct.pack("<Q", bits))[0]
    return value


STALE = _from_bits(_STALE_BITS)
"""Prometheus' staleness marker: a NaN with its own bit pattern, meaning "the series ended here"."""

ABSENT = _from_bits(_ABSENT_BITS)
"""No point of this series at this time of its group: a quiet NaN whose payload nothing else uses
(not numpy's or Go's NaN, not :data:`STALE`)."""


def is_stale(value: float) -> bool:
    """Whether ``value`` is the staleness marker (and not an ordinary NaN)."""
    return math.isnan(value) and struct.pack("<d", value) == struct.pack("<Q", _STALE_BITS)


def stale_mask(values: npt.NDArray[np.float64]) -> npt.NDArray[np.bool_]:
    """Where ``values`` holds the staleness marker (compared bit for bit)."""
    found: npt.NDArray[np.bool_] = values.view(np.uint64) == np.uint64(_STALE_BITS)
    return found


def absent_mask(values: npt.NDArray[np.float64]) -> npt.NDArray[np.bool_]:
    """Where ``values`` holds :data:`ABSENT` (compared bit for bit)."""
    found: npt.NDArray[np.bool_] = values.view(np.uint64) == np.uint64(_ABSENT_BITS)
    return found


Op = Literal["=", "!=", "=~", "!~"]


@dataclass(frozen=True, slots=True)
class Matcher:
    """One label matcher; regexes are fully anchored, as in Prometheus."""

    name: str
    op: Op
    value: str
    _regex: re.Pattern[str] | None = field(default=None, compare=False, repr=False)

    @staticmethod
    def of(name: str, op: Op, value: str) -> Matcher:
        """Build a matcher, compiling its regex once."""
        regex = re.compile(f"(?:{value})", re.DOTALL) if op in ("=~", "!~") else None
        return Matcher(name, op, value, regex)

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a label set passes; a missing label counts as the empty string."""
        got = labels.get(self.name, "")
        if self.op == "=":
            return got == self.value
        if self.op == "!=":
            return got != self.value
        assert self._regex is not None
        found = self._regex.fullmatch(got) is not None
        return found if self.op == "=~" else not found


@dataclass(frozen=True, slots=True)
class Columns:
    """One group of series sharing a time axis in the asked window.

    ``times`` are float64 Unix seconds, ascending, shape ``(t,)``; ``labels``
    holds one label set per series (``__name__`` and ``node`` included),
    ``n`` of them; ``values`` has shape ``(n, t)``: row ``i`` is series ``i``,
    with :data:`ABSENT` where it has no point at that time and :data:`STALE`
    where it had ended (vanished from its source). Each series appears in
    exactly one group of a selection. The arrays belong to the reader: the
    storage hands out copies, never views of what it goes on writing.
    """

    times: npt.NDArray[np.float64]
    labels: Sequence[Mapping[str, str]]
    values: npt.NDArray[np.float64]


class Queryable(Protocol):
    """Series storage as the evaluator sees it."""

    def select(self, matchers: Sequence[Matcher], start: float, end: float) -> Iterable[Columns]:
        """Every series matching all ``matchers`` with points in ``[start, end]``, in groups."""

    def label_names(self, matchers: Sequence[Matcher], start: float, end: float) -> set[str]:
        """Label names of the matching series with points in the window."""

    def label_values(
        self, name: str, matchers: Sequence[Matcher], start: float, end: float
    ) -> set[str]:
        """Values of label ``name`` among the matching series with points in the window."""
