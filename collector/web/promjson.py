"""A range query's JSON answer, written from the evaluator's arrays.

Why by hand: a panel of raw series over an hour at 1,000 nodes answers ~95,000
series and 3.5 million points (~75 MB of JSON). Building a list per point for
``json.dumps`` took 4 to 5 s of Python; here each distinct value is formatted
once, and the points' bytes are laid out by numpy: each point is its step's
piece (``[<time>,"``) then its value's piece (``<value>"],``), copied out of
two small byte tables and packed without their padding, so the per-point cost
stays in C. The bytes are the same JSON ``json.dumps`` writes for the same
answer (the envelope of :mod:`collector.web.promapi`).
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring_ascii

import numpy as np
import numpy.typing as npt

from collector.promql.floats import format_float
from collector.promql.values import Labels, MatrixColumns

_HEAD = b'{"status":"success","data":{"resultType":"matrix","result":['
_TAIL = b"]}}"


def matrix_body(answer: MatrixColumns) -> bytes:
    """The whole response body of a range query answering ``answer``."""
    rows, cols = np.nonzero(answer.present)
    bits, which = _distinct(answer.values[rows, cols].view(np.uint64))
    steps = [b"[" + json.dumps(t).encode() + b',"' for t in (answer.at_ms / 1000).tolist()]
    values = [format_float(v).encode() + b'"],' for v in bits.view(np.float64).tolist()]
    points, ends = _packed(_table(steps), cols, _table(values), which)
    bounds = np.r_[0, ends][np.r_[0, np.cumsum(np.bincount(rows, minlength=len(answer.labels)))]]
    at = bounds.tolist()
    view = memoryview(points)
    parts: list[bytes | memoryview] = [_HEAD]
    for labels, a, b in zip(answer.labels, at[:-1], at[1:], strict=True):
        parts += (b'{"metric":', _metric(labels), b',"values":[', view[a : b - 1], b"]},")
    if len(parts) > 1:
        parts[-1] = b"]}"
    parts.append(_TAIL)
    return b"".join(parts)


def _distinct(bits: npt.NDArray[np.uint64]) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.intp]]:
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


def _metric(labels: Labels) -> bytes:
    pairs = [encode_basestring_ascii(k) + ":" + encode_basestring_ascii(v) for k, v in labels]
    return ("{" + ",".join(pairs) + "}").encode()


Table = tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]
"""Byte strings as rows of a zero-padded matrix, and their lengths."""


def _table(pieces: list[bytes]) -> Table:
    width = max(map(len, pieces), default=0)
    joined = b"".join(piece.ljust(width, b"\0") for piece in pieces)
    matrix = np.frombuffer(joined, np.uint8).reshape(len(pieces), width)
    return matrix, np.array([len(piece) for piece in pieces], dtype=np.int64)


def _packed(
    first: Table, a: npt.NDArray[np.intp], second: Table, b: npt.NDArray[np.intp]
) -> tuple[bytes, npt.NDArray[np.int64]]:
    """Piece ``a[i]`` of ``first`` then piece ``b[i]`` of ``second``, for every ``i``, as one
    byte string, and where each ``i``'s bytes end in it.

    Done :data:`CHUNK` points at a time, so the padded copies stay small.
    """
    (left, left_len), (right, right_len) = first, second
    left_cols, right_cols = np.arange(left.shape[1]), np.arange(right.shape[1])
    parts = []
    for at in range(0, len(a), CHUNK):
        i, j = a[at : at + CHUNK], b[at : at + CHUNK]
        cells = np.concatenate([left[i], right[j]], axis=1)
        keep = np.concatenate(
            [left_cols < left_len[i, None], right_cols < right_len[j, None]], axis=1
        )
        parts.append(cells[keep].tobytes())
    return b"".join(parts), np.cumsum(left_len[a] + right_len[b])


CHUNK = 1 << 16
"""Points packed at once: their padded copies take a few MiB."""
