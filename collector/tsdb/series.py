"""What the history offers its readers: series with their points, selected by label matchers.

:class:`~collector.tsdb.history.History` implements :class:`Queryable`; tests
use small in-memory ones. Times are Unix seconds (floats).
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

STALE = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000002))[0]
"""Prometheus' staleness marker: a NaN with its own bit pattern, meaning "the series ended here"."""

_STALE_BITS = struct.pack("<d", STALE)


def is_stale(value: float) -> bool:
    """Whether ``value`` is the staleness marker (and not an ordinary NaN)."""
    return math.isnan(value) and struct.pack("<d", value) == _STALE_BITS


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
class SeriesData:
    """One series and its points in the asked window, oldest first.

    ``labels`` includes ``__name__``. A value that :func:`is_stale` says the
    series had ended at that time (it vanished from its source).
    """

    labels: Mapping[str, str]
    times: Sequence[float]
    values: Sequence[float]


class Queryable(Protocol):
    """Series storage as the evaluator sees it."""

    def select(self, matchers: Sequence[Matcher], start: float, end: float) -> Iterable[SeriesData]:
        """Every series matching all ``matchers``, with its points in ``[start, end]``."""

    def label_names(self, matchers: Sequence[Matcher], start: float, end: float) -> set[str]:
        """Label names of the matching series with points in the window."""

    def label_values(
        self, name: str, matchers: Sequence[Matcher], start: float, end: float
    ) -> set[str]:
        """Values of label ``name`` among the matching series with points in the window."""
