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
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

from .regex import Regex, matcher_regex

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


Pairs = tuple[tuple[str, str], ...]
"""A label set as sorted ``(name, value)`` pairs, empty values left out: the query engine's form."""


def label_pairs(labels: Mapping[str, str]) -> Pairs:
    """``labels`` as :data:`Pairs` (an empty value is an absent label, as in Prometheus)."""
    pairs = sorted(labels.items())
    if "" in labels.values():
        pairs = [p for p in pairs if p[1]]
    return tuple(pairs)


def pairs_key(pairs: Pairs) -> str:
    """A string that sorts as ``pairs`` do (pair by pair), and sorts much faster.

    Names and values are joined with NUL, which sorts before every other
    character, so a shorter name or value sorts first, as in the tuple.
    """
    return "\0".join([text for pair in pairs for text in pair])


def share_name(first: LabelSet, last: LabelSet) -> bool:
    """Whether every label set that sorts from ``first`` to ``last`` (:func:`pairs_key`)
    has their ``__name__``, told from those two alone.

    Why it holds: sets that start with the same pair ``("__name__", name)`` have
    keys that start with ``__name__``, NUL, the name, then NUL or nothing; a
    key between two such keys starts the same way. Why two: a range function's
    19,000 rows were checked one by one, twice, 7 ms of a 200-node ``rate``.
    """
    return bool(first.pairs) and first.pairs[0][0] == "__name__" and first.pairs[0] == last.pairs[0]


class LabelSet(dict[str, str]):
    """A series' labels as a storage keeps them: a plain dict that also holds its sorted forms.

    ``pairs`` and ``key`` are :func:`label_pairs` and :func:`pairs_key` of it,
    computed once (``unnamed`` once asked for): a storage that hands out the same LabelSet for a series at
    every select spares each query deriving them again (a few microseconds a
    series, most of a query's cost at cluster scale). Never modified once made.
    """

    __slots__ = ("_unnamed", "key", "pairs")

    def __init__(self, labels: Mapping[str, str]) -> None:
        super().__init__(labels)
        self.pairs = label_pairs(self)
        self.key = pairs_key(self.pairs)
        self._unnamed: Pairs | None = None

    @property
    def unnamed(self) -> Pairs:
        """``pairs`` less ``__name__`` (a range function's answer's labels), made once: slicing
        19,000 sets at every query took 15-40 ms of a 200-node ``rate``."""
        if self._unnamed is None:
            self._unnamed = tuple(p for p in self.pairs if p[0] != "__name__")
        return self._unnamed


Op = Literal["=", "!=", "=~", "!~"]


@dataclass(frozen=True, slots=True)
class Matcher:
    """One label matcher; a regex is Go's RE2 syntax, fully anchored, as in Prometheus
    (:mod:`collector.tsdb.regex`)."""

    name: str
    op: Op
    value: str
    _regex: Regex | None = field(default=None, compare=False, repr=False)

    @staticmethod
    def of(name: str, op: Op, value: str) -> Matcher:
        """Build a matcher, compiling its regex once; raise
        :class:`~collector.tsdb.regex.RegexError` for one Prometheus 2.42 rejects."""
        regex = matcher_regex(value) if op in ("=~", "!~") else None
        return Matcher(name, op, value, regex)

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a label set passes; a missing label counts as the empty string."""
        got = labels.get(self.name, "")
        if self.op == "=":
            return got == self.value
        if self.op == "!=":
            return got != self.value
        assert self._regex is not None
        found = self._regex.fullmatch(got)
        return found if self.op == "=~" else not found


@dataclass(frozen=True, slots=True)
class Columns:
    """One group of series sharing a time axis in the asked window.

    ``times`` are float64 Unix seconds, ascending, shape ``(t,)``; ``labels``
    holds one label set per series (``__name__`` and ``node`` included),
    ``n`` of them, best as :class:`LabelSet`; ``values`` has shape ``(n, t)``: row ``i`` is series ``i``,
    with :data:`ABSENT` where it has no point at that time and :data:`STALE`
    where it had ended (vanished from its source). Each series appears in
    exactly one group of a selection. The arrays belong to the reader: the
    storage hands out copies, never views of what it goes on writing.
    """

    times: npt.NDArray[np.float64]
    labels: Sequence[Mapping[str, str]]
    values: npt.NDArray[np.float64]
    looked_up: bool = False
    """The group answers a :class:`Lookup`: ``times`` are its reference times, and each cell
    is the value its lookup finds, :data:`STALE` where it finds none."""


@dataclass(frozen=True, slots=True)
class Lookup:
    """A reader that only looks each series up at reference times ``at`` (integer
    milliseconds, ascending): the newest point at or before each within ``lookback_ms``."""

    at: npt.NDArray[np.int64]
    lookback_ms: int


class Queryable(Protocol):
    """Series storage as the evaluator sees it."""

    def select(
        self,
        matchers: Sequence[Matcher],
        start: float,
        end: float,
        newest: bool = False,
        lookup: Lookup | None = None,
    ) -> Iterable[Columns]:
        """Every series matching all ``matchers`` with points in ``[start, end]``, in groups.

        ``newest``: the reader only looks up each series' newest point at or
        before a millisecond before ``end``, so the storage may leave out the rest.
        ``lookup``: the reader only makes these lookups, so the storage may answer a
        group with them made (:attr:`Columns.looked_up`).
        """

    def label_names(self, matchers: Sequence[Matcher], start: float, end: float) -> set[str]:
        """Label names of the matching series with points in the window."""

    def label_values(
        self, name: str, matchers: Sequence[Matcher], start: float, end: float
    ) -> set[str]:
        """Values of label ``name`` among the matching series with points in the window."""
