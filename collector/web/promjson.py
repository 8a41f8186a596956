"""A range query's JSON answer, written from the evaluator's arrays.

Why by hand: a panel of raw series over an hour at 1,000 nodes answers ~95,000
series and 3.5 million points (~75 MB of JSON). Building a list per point for
``json.dumps`` took 4 to 5 s of Python; here each distinct value is formatted
once, and the body is one ``join`` of small byte strings picked by index: per
point its step's piece (``[<time>,"``) and its value's (``<value>"],``), per
series its labels' piece, so the per-point cost stays in C (a take from an
object array, and ``join``; 200 nodes' ``rate``, 360,000 points: 25 ms, where
packing the pieces with numpy masks took 45). The bytes are the same JSON
``json.dumps`` writes for the same answer (the envelope of
:mod:`collector.web.promapi`).
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring_ascii

import numpy as np
import numpy.typing as npt

from collector.promql.arrays import IntArray
from collector.promql.floats import format_float
from collector.promql.values import Labels, MatrixColumns

_HEAD = b'{"status":"success","data":{"resultType":"matrix","result":['
_TAIL = b"]}}"


def matrix_body(answer: MatrixColumns) -> bytes:
    """The whole response body of a range query answering ``answer``."""
    rows, cols = np.nonzero(answer.present)
    if not rows.size:
        return _HEAD + _TAIL
    bits, which = _distinct(answer.values[rows, cols].view(np.uint64))
    values = [format_float(v).encode() + b'"]' for v in bits.view(np.float64).tolist()]
    steps = [b"[" + json.dumps(t).encode() + b',"' for t in (answer.at_ms / 1000).tolist()]
    # the head; each step's piece; each value's followed by another point, then ending a
    # series; each series' opening; the last point's value, ending the body
    pieces = [_HEAD, *steps, *(v + b"," for v in values), *(v + b"]}," for v in values)]
    pieces += _openings(answer)
    pieces.append(values[int(which[-1])] + b"]}" + _TAIL)
    order = _order(rows, cols, which, len(steps), len(values), len(answer.labels))
    return b"".join(np.array(pieces, dtype=object)[order].tolist())


def _order(
    rows: IntArray, cols: IntArray, which: IntArray, steps: int, values: int, series: int
) -> IntArray:
    """Which piece goes where: the head, then per series its opening, then per point its
    step's piece and its value's (``rows``, ``cols``: the points' series and steps)."""
    value_at = 1 + steps
    opening_at = value_at + 2 * values
    counts = np.bincount(rows, minlength=series)
    before = np.cumsum(counts) - counts
    value = value_at + which
    value[before + counts - 1] += values  # a series' last point ends it
    value[-1] = opening_at + series  # the last of all ends the body
    order = np.empty(1 + series + 2 * rows.size, dtype=np.int64)
    order[0] = 0
    order[1 + np.arange(series) + 2 * before] = opening_at + np.arange(series)
    slot = 2 + rows + 2 * np.arange(rows.size)
    order[slot] = 1 + cols
    order[slot + 1] = value
    return order


def _distinct(bits: npt.NDArray[np.uint64]) -> tuple[npt.NDArray[np.uint64], IntArray]:
    """The distinct bit patterns, ascending, and each point's index among them.

    Bit patterns, not values: -0 and 0 are written apart, as Go writes them.
    Why not ``np.unique(return_inverse=True)``: it argsorts every point; an answer
    holds few distinct values (1,103 among 394,000 points of ``avg_over_time`` at
    200 nodes), and a plain sort, then a search of each point among the distinct
    ones took 30 ms where the argsort took 74.
    """
    ordered = np.sort(bits)
    distinct = ordered[np.r_[True, ordered[1:] != ordered[:-1]]] if ordered.size else ordered
    return distinct, np.searchsorted(distinct, bits)


def _openings(answer: MatrixColumns) -> list[bytes]:
    """Each series' ``{"metric":{...},"values":[``; a storage label set's from :data:`_SEEN`
    where it was written lately.

    Why remembered: a dashboard asks for the same series every refresh, and
    writing 19,000 label sets of seven pairs took 60 ms, a third of the body at
    200 nodes; looked up by the set's key (its hash kept, unlike a tuple's), 3 ms.
    """
    if answer.maps is None:
        return [_opening(labels) for labels in answer.labels]
    named, unnamed = _SEEN
    out = []
    for labels, stored in zip(answer.labels, answer.maps, strict=True):
        seen = named if labels is stored.pairs else unnamed  # else its pairs less __name__
        found = seen.young.get(stored.key)
        if found is None:
            found = seen.old.get(stored.key) or _opening(labels)
            seen.young[stored.key] = found
            seen.age()
        out.append(found)
    return out


def _opening(labels: Labels) -> bytes:
    pairs = [encode_basestring_ascii(k) + ":" + encode_basestring_ascii(v) for k, v in labels]
    return ('{"metric":{' + ",".join(pairs) + '},"values":[').encode()


class _Seen:
    """Openings by label set key, in two generations: one asked for while in either stays."""

    def __init__(self) -> None:
        self.young: dict[str, bytes] = {}
        self.old: dict[str, bytes] = {}

    def age(self) -> None:
        """Forget the older generation once the younger holds :data:`SEEN_SERIES`."""
        if len(self.young) > SEEN_SERIES:
            self.old, self.young = self.young, {}


SEEN_SERIES = 32_768
"""Openings kept in each generation: at most 4 x 32,769 are held (about 40 MB for label
sets of seven pairs)."""
_SEEN = (_Seen(), _Seen())
"""Of label sets written whole, and less ``__name__``."""
