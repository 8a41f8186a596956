"""The query endpoints' JSON answers, written as Prometheus 2.42 writes them: a range
query's from the evaluator's arrays, an instant query's through orjson.

Why by hand: a panel of raw series over an hour at 1,000 nodes answers ~95,000
series and 3.5 million points (~75 MB of JSON). Building a list per point for
``json.dumps`` took 4 to 5 s of Python; here each distinct value is formatted
once, each step's time once and each series' labels once, and a compiled loop
(:func:`_laid`) copies the pieces into place: per series its opening, per point
its step's piece (``[<time>,"``) and its value's (``<value>"],``). For 200
nodes' ``rate`` (360,000 points, 11 MB) placing the pieces took 34 ms as a
take from an object array and a ``join``, 15 ms here (the whole body: 60 and
35 ms). The bytes are those Prometheus 2.42 writes for the same answer: its
times, values and label sets' text.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from json.encoder import encode_basestring
from operator import attrgetter
from typing import cast

import numpy as np
import numpy.typing as npt
import orjson

from collector.compiled import compiled, inlined
from collector.promql.arrays import BoolArray, IntArray
from collector.promql.floats import format_float, format_value
from collector.promql.values import Labels, Matrix, MatrixColumns, Scalar, String, Vector

_HEAD = b'{"status":"success","data":{"resultType":"matrix","result":['
_TAIL = b"]}}"
_HEAD_BYTES = np.frombuffer(_HEAD, dtype=np.uint8)
_TAIL_BYTES = np.frombuffer(_TAIL, dtype=np.uint8)
_MORE, _ENDS = b'"],', b'"]]},'
"""What follows a value: another point of the series, or the series' end."""
_MORE_BYTES = np.frombuffer(_MORE, dtype=np.uint8)
_ENDS_BYTES = np.frombuffer(_ENDS, dtype=np.uint8)
_EXACT = 2.0**53
"""Below it in magnitude every whole float is an integer, and Go writes its digits."""
_WORD = 8
"""Bytes :func:`_put` moves at a time."""
_SLACK_BYTES = np.zeros(_WORD, dtype=np.uint8)
_COMMA = ord(",")


def matrix_body(answer: MatrixColumns) -> bytes:
    """The whole response body of a range query answering ``answer``."""
    if not answer.present.any():
        return _HEAD + _TAIL
    bits, which = _distinct(answer.values[answer.present].view(np.uint64))
    steps_blob, step_widths = _step_pieces(answer.at_ms)
    steps = len(step_widths)
    openings = _openings(answer)
    # each step's piece; each value's followed by another point, then ending a series;
    # each series' opening
    texts, text_starts = _texts(bits.view(np.float64))
    widths = np.diff(text_starts)
    opening_widths = np.fromiter(map(len, openings), np.int64, len(openings))
    starts = np.zeros(steps + 2 * bits.size + len(openings) + 1, dtype=np.int64)
    pieces = np.concatenate((step_widths, widths + len(_MORE), widths + len(_ENDS), opening_widths))
    np.cumsum(pieces, out=starts[1:])
    values = np.empty(int(widths.sum()) * 2 + bits.size * (len(_MORE) + len(_ENDS)), np.uint8)
    _suffixed(texts, text_starts, _MORE_BYTES, _ENDS_BYTES, values)
    blob = np.concatenate(
        (
            steps_blob,
            values,
            np.frombuffer(b"".join(openings), dtype=np.uint8),
            _SLACK_BYTES,  # what _put's last word of a piece may read past it
        )
    )
    # room for the longest step's and value's pieces at every point, and every opening:
    # one pass lays the body (counting it first took as long as laying it)
    most = int(step_widths.max()) + int(pieces[steps : steps + 2 * bits.size].max())
    room = len(which) * most + int(opening_widths.sum()) + len(_SLACK_BYTES)
    body = np.empty(len(_HEAD) + room + len(_TAIL), dtype=np.uint8)
    body[: len(_HEAD)] = _HEAD_BYTES
    size = _laid(answer.present, which, blob, starts, steps, bits.size, body[len(_HEAD) :])
    body[len(_HEAD) + size - 1 : len(_HEAD) + size - 1 + len(_TAIL)] = _TAIL_BYTES
    return body[: len(_HEAD) + size - 1 + len(_TAIL)].tobytes()  # over the last series' comma


def instant_body(result_type: str, result: Vector | Scalar | String | Matrix, at: float) -> bytes:
    """The whole response body of an instant query at ``at`` answering ``result``; a
    range selector's result is a matrix even when empty.

    Times are written as Prometheus writes them: a sample's, in a vector or a matrix, by
    ``MarshalTimestamp`` (``1700000600``, ``1700000600.500``: :func:`_step_pieces`); a
    scalar's or a string's by Go's ``encoding/json`` (``1700000600.5``).
    """
    at_ms = round(at * 1000)
    data: dict[str, object]
    if isinstance(result, Scalar | String):
        at_text = orjson.Fragment(format_value(at_ms / 1000))
        if isinstance(result, Scalar):
            data = {"resultType": "scalar", "result": [at_text, format_float(result.value)]}
        else:
            data = {"resultType": "string", "result": [at_text, result.value]}
    elif result_type == "matrix":
        data = {"resultType": "matrix", "result": _range_series(cast(Matrix, result))}
    else:
        (at_text,) = _timestamps([at_ms])
        samples = [
            {
                "metric": _labelled(s.labels),
                "value": [at_text, format_value(s.value)],
            }
            for s in cast(Vector, result)
        ]
        data = {"resultType": "vector", "result": samples}
    return orjson.dumps({"status": "success", "data": data})


def _range_series(matrix: Matrix) -> list[dict[str, object]]:
    times = iter(_timestamps([round(t * 1000) for s in matrix for t, _ in s.points]))
    return [
        {
            "metric": _labelled(s.labels),
            "values": [[next(times), format_value(v)] for _, v in s.points],
        }
        for s in matrix
    ]


def _labelled(labels: dict[str, str]) -> orjson.Fragment:
    return orjson.Fragment(_metric(sorted(labels.items())))


def _timestamps(at_ms: list[int]) -> list[orjson.Fragment]:
    """Samples' times as ``MarshalTimestamp`` writes them: the step pieces' middles."""
    blob, widths = _step_pieces(np.array(at_ms, dtype=np.int64))
    ends = np.cumsum(widths).tolist()
    text = blob.tobytes()
    return [orjson.Fragment(text[a + 1 : b - 2]) for a, b in pairwise([0, *ends])]


@compiled
def _laid(
    present: BoolArray,
    which: IntArray,
    blob: npt.NDArray[np.uint8],
    starts: IntArray,
    steps: int,
    values: int,
    out: npt.NDArray[np.uint8],
) -> int:
    """Copy into ``out`` per series its opening, then per point its step's piece and its
    value's (``which``: the points' values, row by row), the last of a series ending it;
    the bytes laid.

    ``blob[starts[i]:starts[i + 1]]`` is piece ``i``: the ``steps`` steps' first,
    then the ``values`` values' followed by a point, then the same ending a
    series, then each series' opening.
    """
    at, point = 0, 0
    for row in range(present.shape[0]):
        last = -1
        for col in range(present.shape[1]):
            if present[row, col]:
                last = col
        if last >= 0:
            at = _put(blob, starts, steps + 2 * values + row, out, at)
        for col in range(last + 1):
            if present[row, col]:
                at = _put(blob, starts, col, out, at)
                ends = values if col == last else 0
                at = _put(blob, starts, steps + ends + which[point], out, at)
                point += 1
    return at


@inlined
def _put(
    blob: npt.NDArray[np.uint8], starts: IntArray, piece: int, out: npt.NDArray[np.uint8], at: int
) -> int:
    """Copy piece ``piece`` of ``blob`` to ``out`` at ``at``, by words of :data:`_WORD` bytes
    (a fixed count the compiler makes one move of): the last may write up to a word past the
    piece, which the next piece overwrites, into room :func:`matrix_body` leaves. Byte by
    byte, 4,800 points (108 KB) took 137 us, by words 108."""
    lo, hi = starts[piece], starts[piece + 1]
    for c in range(lo, hi, _WORD):
        to = at + c - lo
        for b in range(_WORD):
            out[to + b] = blob[c + b]
    return int(at + hi - lo)


def _texts(values: npt.NDArray[np.float64]) -> tuple[npt.NDArray[np.uint8], IntArray]:
    """Each value as Prometheus writes a sample's (:func:`format_value`), laid end to end:
    value ``i``'s text is ``texts[starts[i]:starts[i + 1]]``.

    Why three ways: a whole number below 2**53 is its integer's digits, which a compiled
    loop writes (memory in bytes: 32,627 distinct values in the answer of 640 cards'
    ``max_over_time`` over 5 minutes at step 1 s took 37 ms in Python, 0.6 ms here).
    Another finite value from 1e-4 to under 1e16 is its shortest round-trip digits
    without an exponent, as orjson writes a float there (the same text as Python's
    ``repr``; ``tests/unit/test_promjson.py`` holds it to Prometheus' for any float): the
    58,000 distinct ratios of 80 nodes' mean over an hour at step 5 s took 8-25 ms
    through ``repr``, 1.1 ms through orjson. The rest (-0, huge, tiny, NaN,
    infinities) go through :func:`format_value`.
    """
    whole = (np.floor(values) == values) & (np.abs(values) < _EXACT)
    whole &= ~((values == 0) & np.signbit(values))  # -0: Go writes "-0"
    others = np.flatnonzero(~whole)
    left = values[others]
    odd = ~np.isfinite(left) | (np.floor(left) == left) | ((np.abs(left) < 1e-4) & (left != 0))
    plain, rare = others[~odd], others[odd]
    # the values of a JSON array: the texts with a comma between two (none holds one)
    listed = np.frombuffer(orjson.dumps(left[~odd], option=orjson.OPT_SERIALIZE_NUMPY), np.uint8)
    listed = listed[1:-1]
    commas = np.flatnonzero(listed == _COMMA)
    formatted = [format_value(float(v)) for v in left[odd].tolist()]
    lengths = np.zeros(values.size, dtype=np.int64)
    if plain.size:
        lengths[plain] = np.diff(commas, prepend=-1, append=listed.size) - 1
    lengths[rare] = np.fromiter(map(len, formatted), np.int64, len(formatted))
    _digit_counts(values, whole, lengths)
    starts = np.zeros(values.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    texts = np.empty(int(starts[-1]), dtype=np.uint8)
    _digits(values, whole, starts, texts)
    if plain.size:
        _scattered(np.delete(listed, commas), plain, starts, texts)
    if formatted:  # Go's texts are ASCII: a character is a byte
        _scattered(np.frombuffer("".join(formatted).encode(), np.uint8), rare, starts, texts)
    return texts, starts


def _step_pieces(at_ms: IntArray) -> tuple[npt.NDArray[np.uint8], IntArray]:
    """Each step's piece ``[<time>,"`` laid end to end, and each one's width; the time as
    Prometheus 2.42 writes it (``util/jsonutil``'s ``MarshalTimestamp``): the whole
    seconds, then, unless the time is on a second, a point and the three digits of its
    milliseconds (``1700000051``, ``1700000000.500``).

    Why compiled: written in Python, 300 steps took 71-80 us of the 0.3 ms a 16-series
    answer took to write, 11 us here.
    """
    out = np.empty(at_ms.size * _STEP_PIECE, dtype=np.uint8)
    widths = np.empty(at_ms.size, dtype=np.int64)
    size = _step_texts(at_ms, out, widths)
    return out[:size], widths


_STEP_PIECE = 28
"""The widest step piece: ``[``, a sign, 19 digits, ``.``, 3 digits, ``,"``."""


@compiled
def _step_texts(at_ms: IntArray, out: npt.NDArray[np.uint8], widths: IntArray) -> int:
    """Write each step's piece (see :func:`_step_pieces`) into ``out`` and its width into
    ``widths``; the bytes written."""
    at = 0
    for i in range(at_ms.size):
        began = at
        ms = at_ms[i]
        out[at] = 91  # [
        at += 1
        if ms < 0:
            out[at] = 45  # -
            at += 1
            ms = -ms
        seconds, fraction = ms // 1000, ms % 1000
        at = _written(seconds, _width(seconds), out, at)
        if fraction:
            out[at] = 46  # .
            at = _written(fraction, 3, out, at + 1)
        out[at] = 44  # ,
        out[at + 1] = 34  # "
        at += 2
        widths[i] = at - began
    return at


@compiled
def _digit_counts(values: npt.NDArray[np.float64], whole: BoolArray, out: IntArray) -> None:
    """The length of each whole value's text (its sign and digits) into ``out``."""
    for i in range(values.size):
        if whole[i]:
            out[i] = _width(int(abs(values[i]))) + (1 if values[i] < 0 else 0)


@compiled
def _digits(
    values: npt.NDArray[np.float64], whole: BoolArray, starts: IntArray, out: npt.NDArray[np.uint8]
) -> None:
    """Write each whole value's sign and digits at its start in ``out``."""
    for i in range(values.size):
        if whole[i]:
            sign = 1 if values[i] < 0 else 0
            if sign:
                out[starts[i]] = 45  # -
            _written(int(abs(values[i])), starts[i + 1] - starts[i] - sign, out, starts[i] + sign)


@inlined
def _width(n: int) -> int:
    """How many decimal digits ``n`` (0 or more) has."""
    count = 1
    while n >= 10:
        n //= 10
        count += 1
    return count


@inlined
def _written(n: int, width: int, out: npt.NDArray[np.uint8], at: int) -> int:
    """Write the last ``width`` decimal digits of ``n`` (0 or more; zeros before it to fill)
    at ``at`` in ``out``; where they end."""
    for k in range(width - 1, -1, -1):
        out[at + k] = 48 + n % 10
        n //= 10
    return at + width


@compiled
def _scattered(
    joined: npt.NDArray[np.uint8], which: IntArray, starts: IntArray, out: npt.NDArray[np.uint8]
) -> None:
    """Copy the texts laid end to end in ``joined`` to the places of values ``which``."""
    at = 0
    for i in which:
        for b in range(starts[i], starts[i + 1]):
            out[b] = joined[at]
            at += 1


@compiled
def _suffixed(
    texts: npt.NDArray[np.uint8],
    starts: IntArray,
    more: npt.NDArray[np.uint8],
    ends: npt.NDArray[np.uint8],
    out: npt.NDArray[np.uint8],
) -> None:
    """Each value's text followed by ``more``, then each followed by ``ends``, into ``out``."""
    at = 0
    for suffix in (more, ends):
        for i in range(starts.size - 1):
            for b in range(starts[i], starts[i + 1]):
                out[at] = texts[b]
                at += 1
            for b in range(suffix.size):
                out[at] = suffix[b]
                at += 1


def _distinct(bits: npt.NDArray[np.uint64]) -> tuple[npt.NDArray[np.uint64], IntArray]:
    """The distinct bit patterns, ascending, and each point's index among them.

    Bit patterns, not values: -0 and 0 are written apart, as Go writes them.
    Why not ``np.unique(return_inverse=True)``: it argsorts every point; an answer
    holds few distinct values (1,103 among 394,000 points of ``avg_over_time`` at
    200 nodes), and a plain sort, then finding each point among the distinct
    ones took 30 ms where the argsort took 74.
    """
    ordered = np.sort(bits)
    distinct = ordered[np.r_[True, ordered[1:] != ordered[:-1]]] if ordered.size else ordered
    which = np.empty(bits.size, dtype=np.int64)
    _indexed(distinct, bits, which)
    return distinct, which


@compiled
def _indexed(distinct: npt.NDArray[np.uint64], bits: npt.NDArray[np.uint64], out: IntArray) -> None:
    """Each of ``bits``' index in ``distinct`` (which holds every one), into ``out``.

    From a hash table (Fibonacci hashing, linear probing) rather than a binary
    search: numpy's ``searchsorted`` of 360,000 points among 453 values (200
    nodes' ``deriv``) took 10.6 ms, among 1,216 (``rate``) 2.4 ms; the table
    3.6 and 0.5 ms.
    """
    shift = 63
    while (1 << (64 - shift)) < 2 * distinct.size:
        shift -= 1
    size = 1 << (64 - shift)
    keys = np.zeros(size, dtype=np.uint64)
    index = np.full(size, -1, dtype=np.int64)
    for i in range(distinct.size):
        slot = _slot(distinct[i], shift)
        while index[slot] >= 0:
            slot = (slot + 1) & (size - 1)
        keys[slot], index[slot] = distinct[i], i
    for i in range(bits.size):
        slot = _slot(bits[i], shift)
        while index[slot] < 0 or keys[slot] != bits[i]:
            slot = (slot + 1) & (size - 1)
        out[i] = index[slot]


@inlined
def _slot(bits: np.uint64, shift: int) -> np.int64:
    return np.int64((bits * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(shift))


def _openings(answer: MatrixColumns) -> list[bytes]:
    """Each series' ``{"metric":{...},"values":[``; a storage label set's from :data:`_SEEN`
    where it was written lately.

    Why remembered: a dashboard asks for the same series every refresh, and
    writing 19,000 label sets of seven pairs took 60 ms, a third of the body at
    200 nodes; looked up by the set's key (its hash kept, unlike a tuple's), 3 ms.
    Looked up in ``map`` calls rather than a loop of Python: 10 ms became 7.
    """
    if answer.maps is None:
        return [_opening(labels) for labels in answer.labels]
    if not answer.maps:
        return []
    # every row is labelled with its set's pairs, or every row with them less __name__
    seen = _SEEN[0] if answer.labels[0] is answer.maps[0].pairs else _SEEN[1]
    keys = list(map(_KEY, answer.maps))
    found: list[bytes | None] = list(map(seen.young.get, keys))
    for i in [i for i, opening in enumerate(found) if opening is None]:
        key = keys[i]
        found[i] = seen.young[key] = seen.old.get(key) or _opening(answer.labels[i])
        seen.age()
    return cast(list[bytes], found)


def _opening(labels: Labels) -> bytes:
    return ('{"metric":' + _metric(labels) + ',"values":[').encode()


def _metric(labels: Sequence[tuple[str, str]]) -> str:
    """A label set as Prometheus 2.42 writes it (Go's ``encoding/json``): UTF-8 as it is,
    ``"``, ``\\``, control characters, HTML's ``<``, ``>`` and ``&`` and the line
    separators U+2028 and U+2029 escaped.

    Python's C writer makes it, and only a set it writes otherwise (:data:`_NOT_GO`) is
    written again character by character: 19,000 sets of seven pairs took 28 ms
    through the C writer, 14 more to look for what Go writes otherwise, and 200 ms
    through ``str.translate``.
    """
    text = "{" + ",".join([encode_basestring(k) + ":" + encode_basestring(v) for k, v in labels])
    if not any(piece in text for piece in _NOT_GO):
        return text + "}"
    return "{" + ",".join([_go_string(k) + ":" + _go_string(v) for k, v in labels]) + "}"


def _go_string(text: str) -> str:
    return '"' + text.translate(_GO_ESCAPES) + '"'


_GO_ESCAPES = {
    **{c: f"\\u{c:04x}" for c in range(0x20)},
    **{ord(c): f"\\u{ord(c):04x}" for c in "<>&\u2028\u2029"},
    ord("\n"): "\\n",
    ord("\r"): "\\r",
    ord("\t"): "\\t",
    ord('"'): '\\"',
    ord("\\"): "\\\\",
}
"""How Go's ``encoding/json`` writes each character it escapes."""
_NOT_GO = ("<", ">", "&", "\u2028", "\u2029", "\\b", "\\f")
"""What Python's writer leaves otherwise than Go's: HTML's characters and the line separators
as they are, backspace and form feed as ``\\b`` and ``\\f`` (a ``\\\\`` before a ``b``
matches too, and is written again the same). Looked for one by one: a regular expression
took 2.4 us a set, more than writing it."""


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
_KEY = attrgetter("key")
"""Of label sets written whole, and less ``__name__``."""
