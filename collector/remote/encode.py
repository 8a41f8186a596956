"""Prometheus remote-write 1.0 bodies: a protobuf ``WriteRequest``, snappy block format.

The protobuf is written by hand. Measured on this machine (2,000 series of
seven labels plus an external one, one sample each, warm): the ``protobuf``
7.36 runtime (upb) building the ``WriteRequest`` and serialising it took
12.1 µs a sample, this encoder 0.31 µs, 40 times less. A series' labels never
change, so they are encoded once and reused as bytes for every later sample;
the runtime rebuilds every label message each time. Only three messages of a
stable, versioned schema are written (never read), so the hand-written part
is small.

A series' encoded head (field tag, length, labels, the sample's tag) is cached
per (node, key); a sample is then its head, eight bytes of value and the
batch's timestamp bytes. Labels are sorted by name, as the protocol requires.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from itertools import chain, repeat

import cramjam

from collector.normalise.labelsets import key_labels

STALE_MARKER = struct.pack("<Q", 0x7FF0000000000002)
"""Prometheus' staleness marker: a NaN with this exact bit pattern ends a series."""

_DOUBLE = struct.Struct("<d").pack
_TIMESTAMP_BYTES = 6
"""Varint bytes of a millisecond timestamp from 2004 to 2109: every head assumes it."""

METRIC_TYPES = {"counter": 1, "gauge": 2, "histogram": 3, "summary": 5, "info": 6, "stateset": 7}
"""``MetricMetadata.MetricType`` numbers; anything else is UNKNOWN (0)."""

Labels = Sequence[tuple[str, str]]


def varint(value: int) -> bytes:
    """Protobuf base-128 varint of a non-negative integer."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(tag: int, payload: bytes) -> bytes:
    return bytes((tag,)) + varint(len(payload)) + payload


def encode_labels(labels: Iterable[tuple[str, str]]) -> bytes:
    """The ``Label`` fields (field 1 of ``TimeSeries``) of ``labels``, sorted by name."""
    return b"".join(
        _field(0x0A, _field(0x0A, name.encode()) + _field(0x12, value.encode()))
        for name, value in sorted(labels)
    )


def series_head(labels: bytes) -> bytes:
    """A ``TimeSeries`` field up to its one sample's value: tag, length, labels, sample tags."""
    sample_length = 1 + 8 + 1 + _TIMESTAMP_BYTES
    return (
        b"\x0a"
        + varint(len(labels) + 2 + sample_length)
        + labels
        + bytes((0x12, sample_length, 0x09))
    )


def timestamp_tail(millis: int) -> bytes | None:
    """What follows every value of a batch at ``millis``: the timestamp field.

    None for a time outside the years 2004-2109, which no head fits.
    """
    tail = b"\x10" + varint(millis) if millis >= 0 else b""
    return tail if len(tail) == 1 + _TIMESTAMP_BYTES else None


def samples(heads: Sequence[bytes], values: Iterable[float], tail: bytes) -> Iterator[bytes]:
    """The parts of one ``TimeSeries`` field per (head, value), all at ``tail``'s time.

    ``zip``, ``map`` and ``chain`` keep the per-sample loop in C: a Python loop
    over the same three parts cost twice as much.
    """
    return chain.from_iterable(zip(heads, map(_DOUBLE, values), repeat(tail)))


def markers(heads: Sequence[bytes], tail: bytes) -> Iterator[bytes]:
    """The parts of a staleness marker per head, at ``tail``'s time."""
    return chain.from_iterable(zip(heads, repeat(STALE_MARKER), repeat(tail)))


class Heads:
    """Encoded series heads per node and series key; external labels added to each.

    An external label never replaces a label the series has (as Prometheus). The
    cache is bounded: past ``limit`` entries it starts again empty.
    """

    def __init__(self, external: Labels, limit: int = 2_000_000) -> None:
        self._external = tuple(external)
        self._limit = limit
        self._size = 0
        self._nodes: dict[str | None, dict[bytes, bytes]] = {}

    def heads(self, node: str | None, keys: Sequence[bytes]) -> list[bytes]:
        """The heads of ``keys`` of ``node`` (None: each key holds every label itself)."""
        cache = self._nodes.get(node)
        if cache is None:
            cache = self._nodes[node] = {}
        found: list[bytes | None] = list(map(cache.get, keys))
        if None in found:
            for index, head in enumerate(found):
                if head is None:
                    found[index] = self._make(node, keys[index])
        return found  # type: ignore[return-value]  # no None is left

    def _make(self, node: str | None, key: bytes) -> bytes:
        if self._size >= self._limit:
            self._nodes.clear()
            self._size = 0
        head = series_head(encode_labels(self.labels(node, key)))
        self._nodes.setdefault(node, {})[key] = head
        self._size += 1
        return head

    def labels(self, node: str | None, key: bytes) -> list[tuple[str, str]]:
        """Every label the series is sent with, ``__name__`` and external ones included."""
        name, own = key_labels(key)
        labels = [("__name__", name), *own]
        if node is not None:
            labels.append(("node", node))
        names = {label for label, _ in labels}
        labels.extend(pair for pair in self._external if pair[0] not in names)
        return labels

    def forget(self, node: str | None, keys: Iterable[bytes]) -> None:
        """Drop the heads of series that are gone."""
        cache = self._nodes.get(node)
        if cache is not None:
            for key in keys:
                if cache.pop(key, None) is not None:
                    self._size -= 1
            if not cache:  # the node left (or was renamed): its name is not kept either
                del self._nodes[node]

    @property
    def nodes(self) -> int:
        """Nodes with heads cached."""
        return len(self._nodes)

    def __len__(self) -> int:
        return self._size


def encode_metadata(families: Iterable[tuple[str, str, str]]) -> bytes:
    """``MetricMetadata`` fields (field 3 of ``WriteRequest``) of (name, type, help)."""
    out = []
    for name, metric_type, help_text in families:
        body = b""
        kind = METRIC_TYPES.get(metric_type, 0)
        if kind:
            body += b"\x08" + varint(kind)
        body += _field(0x12, name.encode()) + _field(0x22, help_text.encode())
        out.append(_field(0x1A, body))
    return b"".join(out)


def compress(body: bytes) -> bytes:
    """Snappy block format (not framed), as remote write requires."""
    return bytes(cramjam.snappy.compress_raw(body))


HEADERS = {
    "Content-Encoding": "snappy",
    "Content-Type": "application/x-protobuf",
    "X-Prometheus-Remote-Write-Version": "0.1.0",
    "User-Agent": "hami-usage-collector",
}
"""The request headers of remote write 1.0."""
