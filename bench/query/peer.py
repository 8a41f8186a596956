"""The query bench's peer: a real Prometheus, fed the same samples by remote write."""

from __future__ import annotations

import functools
import http.client
import queue
import re
import struct
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from bench.query.setup import (
    HTTP_TIMEOUT,
    REMOTE_WRITE_BYTES,
    STARTUP_TIMEOUT,
    TOOLS,
)
from collector.tsdb.history import History
from collector.tsdb.series import absent_mask
from testing.processes import stop


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(number: int, data: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def snappy_literal(data: bytes) -> bytes:
    """``data`` as a valid snappy block of one literal (no compression: loopback)."""
    if not data:
        return b"\x00"
    return _varint(len(data)) + b"\xfc" + struct.pack("<I", len(data) - 1) + data


def encode_labels(labels: Any, pairs: dict[tuple[str, str], bytes]) -> bytes:
    """The repeated ``Label`` fields of a ``TimeSeries``, sorted by name; ``pairs`` caches each."""
    out = []
    for pair in sorted(labels.items()):
        field_ = pairs.get(pair)
        if field_ is None:
            field_ = pairs[pair] = _field(
                1, _field(1, pair[0].encode()) + _field(2, pair[1].encode())
            )
        out.append(field_)
    return b"".join(out)


@functools.cache
def _chunks(n: int) -> struct.Struct:
    """Cuts ``n`` packed doubles into ``n`` 8-byte strings."""
    return struct.Struct("8s" * n)


def encode_series(
    labels: bytes, times: Sequence[float], values: Sequence[float], tails: dict[float, bytes]
) -> bytes:
    """One ``TimeSeries`` field of a ``WriteRequest``: labels, then samples oldest first.

    ``tails`` caches, per timestamp, the end of a ``Sample`` field after its value;
    every ``tails`` entry must have the same length (timestamps of one era).
    """
    n = len(values)
    raw = struct.pack(f"<{n}d", *values)
    try:
        ends = list(map(tails.__getitem__, times))
    except KeyError:
        for t in times:
            tails.setdefault(t, b"\x10" + _varint(round(t * 1000)))
        ends = list(map(tails.__getitem__, times))
    head = b"\x12" + bytes([9 + len(ends[0])]) + b"\x09" if n else b""
    parts: list[bytes] = [head] * (3 * n)
    parts[1::3] = _chunks(n).unpack(raw)
    parts[2::3] = ends
    return _field(1, labels + b"".join(parts))


_LISTENING = re.compile(r'msg="Listening on" address=(\S+)')


class Prometheus:
    """A Prometheus 2.42 on a loopback port, its TSDB in a temporary folder.

    It binds port 0; :meth:`wait_ready` reads the address it got from its log.
    """

    def __init__(self, folder: Path) -> None:
        self.base = ""
        config = folder / "prometheus.yml"
        config.write_text("")
        self.log = (folder / "prometheus.log").open("wb")
        self.process = subprocess.Popen(
            [
                str(TOOLS / "prometheus"),
                f"--config.file={config}",
                f"--storage.tsdb.path={folder / 'tsdb'}",
                "--storage.tsdb.retention.time=100y",
                "--web.listen-address=127.0.0.1:0",
                "--web.enable-remote-write-receiver",
            ],
            stdout=self.log,
            stderr=self.log,
        )
        self.folder = folder

    def wait_ready(self) -> None:
        """Poll ``/-/ready`` until it answers; fail after :data:`STARTUP_TIMEOUT`."""
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited: {self.tail()}")
            self.log.flush()
            found = _LISTENING.search((self.folder / "prometheus.log").read_text(errors="replace"))
            if found:
                self.base = f"http://{found.group(1)}"
                try:
                    with urllib.request.urlopen(self.base + "/-/ready", timeout=2) as resp:
                        if resp.status == 200:
                            return
                except (urllib.error.URLError, OSError):
                    pass
            time.sleep(0.2)
        raise RuntimeError(f"prometheus not ready within {STARTUP_TIMEOUT:g} s: {self.tail()}")

    def tail(self) -> str:
        """The end of its log."""
        self.log.flush()
        return (self.folder / "prometheus.log").read_text(errors="replace")[-2000:]

    def close(self) -> None:
        """Stop it and close its log."""
        stop(self.process)
        self.log.close()


def remote_write(base: str, history: History, start: float, end: float) -> dict[str, Any]:
    """Write every point of ``history`` in ``[start, end]`` to Prometheus, in two time halves.

    Each series' points go oldest first; the first half of the window goes
    before the second, so no sample is older than Prometheus' head allows (1 h
    before its newest sample). One thread sends, in order, on one connection,
    while this one encodes the next request: Prometheus ingests while Python encodes.
    """
    url = urllib.parse.urlsplit(base)
    outbox: queue.Queue[bytes | None] = queue.Queue(maxsize=2)
    sent: dict[str, Any] = {"requests": 0, "bytes": 0, "send_s": 0.0, "error": None}

    def sender() -> None:
        conn = http.client.HTTPConnection(
            url.hostname or "127.0.0.1", url.port, timeout=HTTP_TIMEOUT
        )
        headers = {
            "Content-Type": "application/x-protobuf",
            "Content-Encoding": "snappy",
            "X-Prometheus-Remote-Write-Version": "0.1.0",
        }
        try:
            while (body := outbox.get()) is not None:
                if sent["error"] is not None:
                    continue  # drain: the encoder stops at its next put
                t0 = time.perf_counter()
                try:
                    conn.request("POST", "/api/v1/write", body=body, headers=headers)
                    resp = conn.getresponse()
                    answer = resp.read()
                    if resp.status // 100 != 2:
                        sent["error"] = f"remote write: {resp.status} {answer[:500]!r}"
                except OSError as exc:
                    sent["error"] = f"remote write: {exc!r}"
                sent["requests"] += 1
                sent["bytes"] += len(body)
                sent["send_s"] += time.perf_counter() - t0
        finally:
            conn.close()

    thread = threading.Thread(target=sender, name="remote write", daemon=True)
    thread.start()
    label_cache: dict[int, bytes] = {}
    pairs: dict[tuple[str, str], bytes] = {}
    tails: dict[float, bytes] = {}
    samples = series = 0
    encode_s = 0.0

    def send(parts: list[bytes]) -> None:
        if sent["error"] is not None:
            raise RuntimeError(sent["error"])
        outbox.put(snappy_literal(b"".join(parts)))

    middle = start + (end - start) / 2
    try:
        for lo, hi in ((start, middle), (middle + 1e-3, end)):
            parts: list[bytes] = []
            size = 0
            t0 = time.perf_counter()
            for s_labels, times, values in _points(history, lo, hi):
                labels = label_cache.get(id(s_labels))
                if labels is None:
                    labels = label_cache[id(s_labels)] = encode_labels(s_labels, pairs)
                part = encode_series(labels, times, values, tails)
                parts.append(part)
                size += len(part)
                samples += len(values)
                series += 1
                if size >= REMOTE_WRITE_BYTES:
                    encode_s += time.perf_counter() - t0
                    send(parts)
                    parts, size = [], 0
                    t0 = time.perf_counter()
            encode_s += time.perf_counter() - t0
            if parts:
                send(parts)
    finally:
        outbox.put(None)
        thread.join(HTTP_TIMEOUT)
    if sent["error"] is not None:
        raise RuntimeError(sent["error"])
    return {
        "samples": samples,
        "series_parts": series,
        "requests": sent["requests"],
        "bytes": sent["bytes"],
        "encode_s": encode_s,
        "send_s": sent["send_s"],
        "samples_per_s_prometheus": samples / sent["send_s"] if sent["send_s"] else 0.0,
    }


def _points(
    history: History, lo: float, hi: float
) -> Iterator[tuple[Any, list[float], list[float]]]:
    """Each series of the history in ``[lo, hi]``: labels, times and values (staleness markers
    included, absent points left out)."""
    for group in history.select([], lo, hi):
        gone = absent_mask(group.values)
        for row, labels in enumerate(group.labels):
            keep = ~gone[row]
            yield labels, group.times[keep].tolist(), group.values[row, keep].tolist()
