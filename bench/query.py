"""The query surfaces over one hour of a 1,000-node cluster: PromQL in process and over HTTP, REST.

Why: Grafana's panels ask the collector for ``sum by (node) (...)`` now and over
the last hour; a panel should answer within 100 ms (instant) and 1 s (range),
and the REST node list within 50 ms, with the history costing at most 16 bytes
per kept point.

Setup: the simulated cluster of :mod:`bench.cluster` (``build_cluster(1000,
seed=1, flavours=("hami",))``, ~249k series) over the last hour at 60 s
resolution: 61 scrape rounds, too slow to get by scraping, so the store of the
real application (``build_app``) is filled directly, as the scrape stage does
it: one :class:`Normaliser` per node and ``store.put(source, batch, at,
sampled=t)`` for every round. Rendering the bodies (``node.step(t)``,
``node.exposition(t)``) is the simulator's cost, not the collector's: it runs in
:data:`RENDERERS` helper processes (``python -m bench.query render ...``, each
building the same cluster and rendering its share of the nodes), ahead of the
normalising, so the fill's wall time is mostly the collector's work; the
normalise and put seconds are reported on their own. The app's history keeps
2 h (the fill's oldest point must not be trimmed while it is queried); the
store's staleness is a day.

The history's bytes per kept point are measured twice: by tracemalloc, while a
fresh :class:`History` is fed the batches the first :data:`TRACE_NODES` nodes
put during the fill (the goal's figure), and by walking every object the full
history holds (``sys.getsizeof``; series keys, shared with the store's latest
batches while a series lives, are reported apart).

The peer (below) is filled next, before anything is timed, so every timing
sees the same two processes: reading the history for it parses every series'
labels, which the history otherwise does the first time a query needs them
(the first instant query after the fill, before that, is reported apart).
Then each surface is timed: one first run (reported apart), then up to
:data:`REPEATS` runs, fewer once the surface has spent :data:`BUDGET_S` seconds
(at least :data:`MIN_REPEATS`): ``instant_query`` and ``range_query`` (last
hour, step 60 s) in this process; the same two through
``/prometheus/api/v1/query`` and ``/query_range`` of the real app served on
127.0.0.1; ``GET /api/v1/nodes`` of the REST API. HTTP requests come from a
separate client process (``python -m bench.query client``: one keep-alive
connection per target, sequential, bodies read in full, no compression),
rounds interleaved with the peer's so both see the same load. p99 of 100 runs
or fewer is their maximum.

``--step 15`` fills the hour at 15 s instead (241 rounds); the headline range
query keeps its 60 s step. The goal's other instant queries (``topk(10, ...)``,
``count by (namespace) (...)``) are timed in process and over HTTP beside the
peer, and the dashboard is drawn over HTTP on both (:mod:`bench.dashboard`).

Peer, same run: a real Prometheus 2.42 holding the same samples: every point
of the filled history (same series, timestamps and values), staleness markers
included. They are written through Prometheus' remote-write receiver (a
hand-encoded protobuf ``WriteRequest``, snappy-framed as literals), not
``promtool tsdb create-blocks-from openmetrics``: OpenMetrics cannot carry
Prometheus' staleness marker (test_promql_vs_prometheus.py says so too), and
the simulator replaces ~4% of pods every minute, so the two would not answer
alike for the 5 minutes after each churn. The samples land in Prometheus'
head block, where a Prometheus that has run for an hour holds its last hour.
Its answers to both queries are checked against ours (label sets equal,
values within 1e-9 relative, timestamps equal).
"""

from __future__ import annotations

import asyncio
import functools
import gc
import http.client
import importlib
import itertools
import json
import math
import os
import queue
import re
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from aiohttp import web

from bench import dashboard
from bench.cluster import ROOT
from bench.processes import cpu_seconds, loopback_socket, memory_mib, stop
from bench.timing import percentile
from collector.app import SETTINGS, STORE, build_app
from collector.batch import Source
from collector.demo.cluster import build_cluster
from collector.normalise import Normaliser
from collector.promql.query import instant_query, range_query
from collector.promql.values import Element, RangeSeries
from collector.schema import SourceKind
from collector.settings import CollectorSettings
from collector.store import Store
from collector.tsdb.history import History
from collector.tsdb.series import absent_mask

NODES = 1000
SEED = 1
MONITORS: tuple[str, ...] = ("hami",)
"""The monitor versions the benchmark's simulated nodes run (see collector.demo.families)."""
SPAN = 3600.0
"""Seconds of history filled: one hour."""
STEP = 60.0
"""Seconds between two filled points by default (``--step``), and the range query's step always
(the dashboard's queries take the data's step, as Grafana's minimum interval)."""
ROUNDS = int(SPAN // STEP) + 1
QUERY = "sum by (node) (hami_vgpu_memory_used_bytes)"
REPEATS = 30
"""Timed runs of each query surface, unless its :data:`BUDGET_S` runs out first."""
BUDGET_S = 25.0
"""Seconds of timed runs one surface may take before it stops repeating (at :data:`MIN_REPEATS`
or more): 30 runs of a query that misses its goal tenfold would take many minutes."""
MIN_REPEATS = 2
RENDERERS = 2
"""Helper processes rendering the simulated bodies ahead of the fill."""
TRACE_NODES = 40
TRACE_ROUNDS = 241
"""Rounds of those nodes fed to the traced history: an hour at 15 s."""
"""Nodes whose batches are replayed into a fresh History under tracemalloc."""
HISTORY_RETENTION = 2 * SPAN
HISTORY_MAX_POINTS = 50_000_000
STALE_AFTER = 86_400.0
REMOTE_WRITE_BYTES = 8 << 20
"""Encoded WriteRequest size at which it is sent."""
STARTUP_TIMEOUT = 60.0
CLIENT_TIMEOUT = 1800.0
HTTP_TIMEOUT = 120.0

GOAL_INSTANT_P99_MS = 100.0
GOAL_RANGE_P99_MS = 1000.0
GOAL_REST_P99_MS = 50.0
GOAL_BYTES_PER_POINT = 16.0

DASHBOARD = ROOT / "dashboards" / "hami-usage.json"
TOOLS = ROOT / ".tools" / "prometheus" / "usr" / "bin"
PREFIX = "/prometheus/api/v1"
HELPER = (sys.executable, "-m", "bench.query")
"""How this bench starts its helper processes."""

# --------------------------------------------------------------------------
# Filling the store: renderer processes, normalise + put in this process
# --------------------------------------------------------------------------


def render(nodes: int, first: int, last: int, start: float, rounds: int, step: float) -> None:
    """Render nodes ``first..last-1`` of the cluster for ``rounds`` times to stdout, framed.

    Each round: ``<I`` count, ``count`` x ``<I`` body lengths, then the bodies.
    """
    cluster = build_cluster(nodes, seed=SEED, flavours=MONITORS, start_time=start)[first:last]
    out = sys.stdout.buffer
    try:
        for k in range(rounds):
            t = start + k * step
            bodies = []
            for node in cluster:
                node.step(t)
                bodies.append(node.exposition(t))
            head = struct.pack(f"<{len(bodies) + 1}I", len(bodies), *map(len, bodies))
            out.write(head + b"".join(bodies))
            out.flush()
    except BrokenPipeError:
        pass


def _read_exact(stream: IO[bytes], size: int) -> bytes:
    data = stream.read(size)
    if len(data) != size:
        raise RuntimeError("a renderer process ended early")
    return data


def _read_round(stream: IO[bytes]) -> list[bytes]:
    (count,) = struct.unpack("<I", _read_exact(stream, 4))
    sizes = struct.unpack(f"<{count}I", _read_exact(stream, 4 * count))
    data = _read_exact(stream, sum(sizes))
    out = []
    at = 0
    for size in sizes:
        out.append(data[at : at + size])
        at += size
    return out


@dataclass
class Fill:
    """What filling the store took."""

    wall_s: float = 0.0
    first_round_s: float = 0.0
    normalise_s: float = 0.0
    put_s: float = 0.0
    waited_s: float = 0.0
    cpu_s: float = 0.0
    rounds: int = 0
    samples: int = 0
    traced: list[list[Mapping[bytes, float]]] = field(default_factory=list)
    """The first :data:`TRACE_NODES` nodes' series of every round."""

    def figures(self) -> dict[str, Any]:
        """The fill as plain figures."""
        return {
            "wall_s": self.wall_s,
            "first_round_s": self.first_round_s,
            "normalise_s": self.normalise_s,
            "put_s": self.put_s,
            "collector_s": self.normalise_s + self.put_s,
            "collector_s_per_round_after_first": (
                (self.normalise_s + self.put_s - self.first_round_s) / max(1, self.rounds - 1)
            ),
            "waited_for_renderers_s": self.waited_s,
            "process_cpu_s": self.cpu_s,
            "rounds": self.rounds,
            "samples_put": self.samples,
        }


def fill(
    store: Store,
    nodes: int,
    start: float,
    step: float = STEP,
    rounds: int = ROUNDS,
    traced: int = TRACE_NODES,
) -> Fill:
    """Put ``rounds`` rounds of every node into ``store``, sampled at ``start + k * step``.

    The batches of the first ``traced`` nodes in the first :data:`TRACE_ROUNDS`
    rounds are kept for the traced history.
    """
    names = [n.name for n in build_cluster(nodes, seed=SEED, flavours=MONITORS, start_time=start)]
    sources = [Source(f"uid-{n}", f"monitors/{n}:9394", n, SourceKind.HAMI, 1) for n in names]
    normalisers = [Normaliser(n) for n in names]
    cuts = [nodes * i // RENDERERS for i in range(RENDERERS + 1)]
    renderers = [
        subprocess.Popen(
            [*HELPER, "render", str(nodes), str(a), str(b), repr(start), str(rounds), repr(step)],
            stdout=subprocess.PIPE,
            cwd=ROOT,
        )
        for a, b in itertools.pairwise(cuts)
        if b > a
    ]
    out = Fill()
    cpu0 = time.process_time()
    began = time.perf_counter()
    put = store.put
    try:
        for k in range(rounds):
            t = start + k * step
            t0 = time.perf_counter()
            bodies: list[bytes] = []
            for r in renderers:
                assert r.stdout is not None
                bodies.extend(_read_round(r.stdout))
            t1 = time.perf_counter()
            batches = [n.normalise(b) for n, b in zip(normalisers, bodies, strict=True)]
            t2 = time.perf_counter()
            at = time.monotonic()
            for source, batch in zip(sources, batches, strict=True):
                put(source, batch, at, sampled=t)
            t3 = time.perf_counter()
            out.waited_s += t1 - t0
            out.normalise_s += t2 - t1
            out.put_s += t3 - t2
            out.samples += sum(b.samples for b in batches)
            if k < TRACE_ROUNDS and traced:
                out.traced.append([b.series for b in batches[:traced]])
            if k == 0:
                out.first_round_s = t3 - t1
            out.rounds += 1
    finally:
        for r in renderers:
            stop(r)
    out.wall_s = time.perf_counter() - began
    out.cpu_s = time.process_time() - cpu0
    return out


# --------------------------------------------------------------------------
# The history's size
# --------------------------------------------------------------------------


def traced_bytes_per_point(
    traced: list[list[Mapping[bytes, float]]], start: float, step: float
) -> dict[str, Any]:
    """Feed a fresh History the kept batches under tracemalloc: its bytes per kept point."""
    names = [f"trace-{i}" for i in range(len(traced[0]) if traced else 0)]
    history = History(retention=SPAN, max_points=HISTORY_MAX_POINTS)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for k, batches in enumerate(traced):
            t = start + k * step
            for name, series in zip(names, batches, strict=True):
                history.record(name, series, t)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    return {
        "nodes": len(names),
        "points": history.points,
        "bytes": held,
        "bytes_per_point": held / history.points if history.points else math.inf,
    }


_OPAQUE = (type, type(sys), type(len), type(lambda: 0))


def walked_bytes(root: object) -> dict[str, int]:
    """``sys.getsizeof`` of every object reachable from ``root`` (not types, modules, functions).

    ``bytes`` objects (the series keys) are summed apart as well.
    """
    seen: set[int] = set()
    stack = [root]
    total = keys = 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, _OPAQUE):
            continue
        seen.add(id(obj))
        size = sys.getsizeof(obj)
        total += size
        if isinstance(obj, bytes):
            keys += size
        stack.extend(gc.get_referents(obj))
    return {"bytes": total, "key_bytes": keys, "objects": len(seen)}


# --------------------------------------------------------------------------
# Timing in process
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Budget:
    """How many timed runs a surface gets: ``repeats``, or fewer once ``seconds`` are spent."""

    repeats: int = REPEATS
    seconds: float = BUDGET_S
    least: int = MIN_REPEATS

    def more(self, done: int, spent: float) -> bool:
        """Whether to run once more after ``done`` runs that took ``spent`` seconds."""
        return done < self.repeats and (done < self.least or spent < self.seconds)


QUICK = Budget(10, 5.0, 1)
"""What ``python -m bench --quick`` allows each surface."""


def timed(call: Callable[[], Any], budget: Budget) -> tuple[dict[str, Any], Any]:
    """A first run (reported apart), then timed runs as ``budget`` allows (ms); the last answer."""
    t0 = time.perf_counter()
    answer = call()
    first = time.perf_counter() - t0
    times: list[float] = []
    while budget.more(len(times), sum(times)):
        t0 = time.perf_counter()
        answer = call()
        times.append(time.perf_counter() - t0)
    return summary(times, first), answer


def summary(seconds: Sequence[float], first: float) -> dict[str, Any]:
    """p50 / p99 / max in ms of ``seconds``, and the first run's ms."""
    return {
        "repeats": len(seconds),
        "first_ms": first * 1e3,
        "p50_ms": percentile(seconds, 50) * 1e3,
        "p99_ms": percentile(seconds, 99) * 1e3,
        "max_ms": max(seconds, default=0.0) * 1e3,
        "ms": [s * 1e3 for s in seconds],
    }


# --------------------------------------------------------------------------
# The peer: Prometheus, fed by remote write
# --------------------------------------------------------------------------


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


# --------------------------------------------------------------------------
# Comparing answers
# --------------------------------------------------------------------------

Points = list[tuple[float, float]]
Answer = dict[tuple[tuple[str, str], ...], Points]


def _key(labels: Any) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


def from_json(body: bytes) -> Answer:
    """A Prometheus API answer (vector or matrix) as series -> points."""
    data = json.loads(body)
    if data.get("status") != "success":
        raise RuntimeError(f"query failed: {body[:300]!r}")
    result = data["data"]["result"]
    if data["data"]["resultType"] == "vector":
        return {_key(s["metric"]): [(float(s["value"][0]), float(s["value"][1]))] for s in result}
    return {_key(s["metric"]): [(float(t), float(v)) for t, v in s["values"]] for s in result}


def from_ours(result: Any, at: float) -> Answer:
    """Our evaluator's answer as series -> points."""
    out: Answer = {}
    for s in result:
        if isinstance(s, Element):
            out[_key(s.labels)] = [(at, s.value)]
        elif isinstance(s, RangeSeries):
            out[_key(s.labels)] = list(s.points)
    return out


def _same(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def differences(want: Answer, got: Answer) -> list[str]:
    """How ``got`` differs from ``want`` (Prometheus'): label sets, timestamps, values."""
    problems = []
    if want.keys() != got.keys():
        missing, extra = want.keys() - got.keys(), got.keys() - want.keys()
        problems.append(f"{len(missing)} series missing, {len(extra)} extra")
    for k in want.keys() & got.keys():
        w, g = want[k], got[k]
        if [t for t, _ in w] != [t for t, _ in g]:
            problems.append(f"{dict(k)}: {len(g)} timestamps, Prometheus {len(w)}")
        elif not all(_same(a, b) for (_, a), (_, b) in zip(w, g, strict=True)):
            problems.append(f"{dict(k)}: values differ")
    return problems


def agreement(want: Answer, got: Answer) -> dict[str, Any]:
    """Whether two answers agree, with counts and the first problems."""
    problems = differences(want, got)
    return {
        "agree": not problems and bool(want),
        "series": len(want),
        "points": sum(len(p) for p in want.values()),
        "problems": len(problems),
        "first_problems": problems[:5],
    }


# --------------------------------------------------------------------------
# HTTP: the client process, the app served here
# --------------------------------------------------------------------------


def client(spec: dict[str, Any]) -> dict[str, Any]:
    """Time ``spec["targets"]`` (``[name, base, path]``, and a cap on repeats if a fourth),
    interleaved, one connection each.

    Each target is asked once first (reported apart), then in rounds while
    ``spec["budget"]`` (:class:`Budget` fields) allows. The last body of each
    target is written to ``spec["out"]/<name>.json``.
    """
    budget = Budget(**spec["budget"])
    conns: dict[str, http.client.HTTPConnection] = {}
    times: dict[str, list[float]] = {name: [] for name, *_ in spec["targets"]}
    first: dict[str, float] = {}
    last: dict[str, tuple[int, bytes]] = {}
    given_up: set[str] = set()
    try:
        for r in itertools.count():
            due = [
                (name, base, path)
                for name, base, path, *cap in spec["targets"]
                if name not in given_up
                and (
                    r == 0
                    or (
                        budget.more(len(times[name]), sum(times[name]))
                        and len(times[name]) < min(cap, default=budget.repeats)
                    )
                )
            ]
            if not due:
                break
            for name, base, path in due:
                conn = conns.get(name)
                if conn is None:
                    url = urllib.parse.urlsplit(base)
                    conn = http.client.HTTPConnection(
                        url.hostname or "127.0.0.1", url.port, timeout=HTTP_TIMEOUT
                    )
                    conns[name] = conn
                t0 = time.perf_counter()
                status, body = _get(conn, path)
                elapsed = time.perf_counter() - t0
                if r == 0:
                    first[name] = elapsed
                else:
                    times[name].append(elapsed)
                last[name] = (status, body)
                if not status:  # timed out: counted once at its full time, then not asked again
                    conns.pop(name).close()
                    given_up.add(name)
    finally:
        for conn in conns.values():
            conn.close()
    out = {}
    for name, seconds in times.items():
        status, body = last[name]
        Path(spec["out"], f"{name}.json").write_bytes(body)
        out[name] = {**summary(seconds, first[name]), "status": status, "bytes": len(body)}
    return out


def _get(conn: http.client.HTTPConnection, path: str) -> tuple[int, bytes]:
    """Status and body of ``GET path``; status 0 when it took longer than :data:`HTTP_TIMEOUT`."""
    try:
        conn.request("GET", path, headers={"Accept-Encoding": "identity"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    except TimeoutError:
        return 0, b'{"status":"error","errorType":"timeout","error":"no answer in time"}'


def _rest_routes(app: web.Application) -> str:
    """How ``GET /api/v1/nodes`` is served: by build_app, by this bench, or not at all."""
    if any(r.canonical == "/api/v1/nodes" for r in app.router.resources()):
        return "build_app"
    try:
        rest: Any = importlib.import_module("collector.web.rest.handlers")
        api = rest.RestApi(STORE, app[SETTINGS].interval)
        app.router.add_routes(api.routes())
        app.cleanup_ctx.append(api.warming)
    except Exception as exc:
        return f"not present ({type(exc).__name__}: {exc})"
    return "mounted by the bench (build_app does not mount it yet)"


async def serve_and_time(
    app: web.Application, spec: dict[str, Any], sock: socket.socket
) -> tuple[dict[str, Any], str]:
    """Serve ``app`` on ``sock`` (bound) while the client process times ``spec``."""
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    try:
        await web.SockSite(runner, sock).start()
        process = await asyncio.create_subprocess_exec(
            *HELPER,
            "client",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=ROOT,
        )
        try:
            out, err = await asyncio.wait_for(
                process.communicate(json.dumps(spec).encode()), CLIENT_TIMEOUT
            )
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        if process.returncode != 0:
            raise RuntimeError(f"the client failed: {err.decode(errors='replace')[-2000:]}")
        return json.loads(out), err.decode(errors="replace")
    finally:
        await runner.cleanup()


# --------------------------------------------------------------------------
# The benchmark
# --------------------------------------------------------------------------


def _query_path(prefix: str, kind: str, now: float, step: float) -> str:
    if kind == "instant":
        return dashboard.instant_path(prefix, QUERY, now)
    return dashboard.range_path(prefix, QUERY, now - SPAN, now, step)


def _ratio(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, float]:
    return {
        "p50": ours["p50_ms"] / theirs["p50_ms"] if theirs["p50_ms"] else math.inf,
        "p99": ours["p99_ms"] / theirs["p99_ms"] if theirs["p99_ms"] else math.inf,
    }


def run(budget: Budget | None = None, nodes: int = NODES, step: float = STEP) -> dict[str, Any]:
    """Fill the app's store with an hour of the cluster, then time every query surface and the peer.

    ``budget`` bounds the timed runs of each surface (default :class:`Budget`).
    """
    budget = budget or Budget()
    rounds = int(SPAN // step) + 1
    load_before = os.getloadavg()
    began = time.perf_counter()
    now = float(math.floor(time.time()))
    start = now - SPAN
    sock = loopback_socket()  # bound now, so the port stays ours until the app serves on it
    port = sock.getsockname()[1]
    settings = CollectorSettings(
        listen=f"127.0.0.1:{port}",
        kubernetes=False,
        stale_after=STALE_AFTER,
        history_retention=HISTORY_RETENTION,
        history_max_points=HISTORY_MAX_POINTS,
    )
    app = build_app(settings)
    store = app[STORE]
    history = store.history
    rest_how = _rest_routes(app)

    phases: dict[str, float] = {}
    mark = time.perf_counter()

    def phase(name: str) -> None:
        nonlocal mark
        phases[name] = round(time.perf_counter() - mark, 1)
        mark = time.perf_counter()

    filled = fill(store, nodes, start, step, rounds)
    phase("fill")
    series = sum(len(v.series) for n in store.nodes() if (v := store.view(n)) is not None)
    traced = traced_bytes_per_point(filled.traced, start, step)
    filled.traced = []
    gc.collect()
    walk = walked_bytes(history)
    points = history.points
    phase("history_size")

    t0 = time.perf_counter()
    instant_query(QUERY, now, history)
    cold_instant_ms = (time.perf_counter() - t0) * 1e3

    with tempfile.TemporaryDirectory(prefix="bench-query-") as folder:
        prometheus = Prometheus(Path(folder))
        try:
            prometheus.wait_ready()
            t0 = time.perf_counter()
            written = remote_write(prometheus.base, history, start, now)
            written["wall_s"] = time.perf_counter() - t0
            written["prometheus_rss_mib"] = memory_mib(prometheus.process.pid).get("VmRSS", 0.0)
            phase("prometheus_fill")

            gc.collect()
            peer_cpu = cpu_seconds(prometheus.process.pid)
            instant, answer = timed(lambda: instant_query(QUERY, now, history), budget)
            ours_instant = from_ours(answer, now)
            ranged, answer = timed(lambda: range_query(QUERY, start, now, STEP, history), budget)
            ours_range = from_ours(answer, 0.0)
            del answer
            others = {
                name: timed(lambda q=q: instant_query(q, now, history), budget)[0]  # type: ignore[misc]
                for name, q in dashboard.INSTANT_GOALS.items()
            }
            written["prometheus_cpu_s_while_idle"] = cpu_seconds(prometheus.process.pid) - peer_cpu
            phase("in_process")

            ours_base = f"http://127.0.0.1:{port}"
            targets = [
                ["ours_instant", ours_base, _query_path(PREFIX, "instant", now, STEP)],
                [
                    "prometheus_instant",
                    prometheus.base,
                    _query_path("/api/v1", "instant", now, STEP),
                ],
                ["ours_range", ours_base, _query_path(PREFIX, "range", now, STEP)],
                ["prometheus_range", prometheus.base, _query_path("/api/v1", "range", now, STEP)],
            ]
            peers = {"ours": (ours_base, PREFIX), "prometheus": (prometheus.base, "/api/v1")}
            targets += dashboard.instant_targets(peers, now)
            targets += dashboard.panel_targets(peers, DASHBOARD, now - SPAN, now, step)
            if not rest_how.startswith("not present"):
                targets.append(["rest_nodes", ours_base, "/api/v1/nodes"])
            spec: dict[str, Any] = {"targets": targets, "budget": asdict(budget), "out": folder}
            gc.collect()
            http_times, _ = asyncio.run(serve_and_time(app, spec, sock))
            phase("http")
            bodies = {
                name: Path(folder, f"{name}.json").read_bytes() for name, *_ in spec["targets"]
            }
            written["prometheus_rss_mib_after_queries"] = memory_mib(prometheus.process.pid).get(
                "VmRSS", 0.0
            )
        finally:
            prometheus.close()

    theirs_instant = from_json(bodies["prometheus_instant"])
    theirs_range = from_json(bodies["prometheus_range"])
    checks = {
        "instant_in_process": agreement(theirs_instant, ours_instant),
        "range_in_process": agreement(theirs_range, ours_range),
        "instant_http": agreement(theirs_instant, from_json(bodies["ours_instant"])),
        "range_http": agreement(theirs_range, from_json(bodies["ours_range"])),
    }
    rest: dict[str, Any] | None = None
    if "rest_nodes" in http_times:
        rest = {**http_times["rest_nodes"], "served_by": rest_how}
        nodes_listed = json.loads(bodies["rest_nodes"])
        rest["nodes_listed"] = len(nodes_listed.get("nodes", nodes_listed.get("items", [])))
    peer_i, peer_r = http_times["prometheus_instant"], http_times["prometheus_range"]
    http_i, http_r = http_times["ours_instant"], http_times["ours_range"]
    bytes_per_point = traced["bytes_per_point"]
    agree = all(c["agree"] for c in checks.values())
    return {
        "nodes": nodes,
        "series": series,
        "rounds": rounds,
        "step_s": step,
        "query": QUERY,
        "budget": asdict(budget),
        "load_average_before": load_before,
        "fill": filled.figures(),
        "history_points": points,
        "history_tracemalloc": traced,
        "history_walk": {
            **walk,
            "bytes_per_point": walk["bytes"] / points if points else math.inf,
            "bytes_per_point_without_keys": (walk["bytes"] - walk["key_bytes"]) / points
            if points
            else math.inf,
        },
        "bytes_per_point": bytes_per_point,
        "in_process_cold_instant_ms": cold_instant_ms,
        "in_process_instant": instant,
        "in_process_range": ranged,
        "in_process_instant_goals": {"sum_by_node": instant, **others},
        "http_instant_goals": dashboard.instant_rows(http_times),
        "dashboard": dashboard.drawn(http_times),
        "http_instant": http_i,
        "http_range": http_r,
        "rest_nodes": rest,
        "rest_served_by": rest_how,
        "peer_prometheus": {
            "remote_write": written,
            "instant": peer_i,
            "range": peer_r,
        },
        "ratio_in_process_vs_prometheus": {
            "instant": _ratio(instant, peer_i),
            "range": _ratio(ranged, peer_r),
        },
        "ratio_http_vs_prometheus": {
            "instant": _ratio(http_i, peer_i),
            "range": _ratio(http_r, peer_r),
        },
        "agreement": checks,
        "answers_agree": agree,
        "goal_instant_p99_ms": GOAL_INSTANT_P99_MS,
        "goal_range_p99_ms": GOAL_RANGE_P99_MS,
        "goal_rest_p99_ms": GOAL_REST_P99_MS,
        "goal_bytes_per_point": GOAL_BYTES_PER_POINT,
        "wall_s": time.perf_counter() - began,
        "phases_s": phases,
        "meets_goal": instant["p99_ms"] <= GOAL_INSTANT_P99_MS
        and ranged["p99_ms"] <= GOAL_RANGE_P99_MS
        and http_i["p99_ms"] <= GOAL_INSTANT_P99_MS
        and http_r["p99_ms"] <= GOAL_RANGE_P99_MS
        and (rest is not None and rest["p99_ms"] <= GOAL_REST_P99_MS)
        and bytes_per_point <= GOAL_BYTES_PER_POINT
        and agree,
    }


def _lines(result: dict[str, Any]) -> Iterator[str]:
    f, w = result["fill"], result["peer_prometheus"]["remote_write"]
    yield (
        f"fill: {result['nodes']} nodes x {result['rounds']} rounds, {result['series']:,} series, "
        f"{result['history_points']:,} points in {f['wall_s']:.1f} s "
        f"(normalise {f['normalise_s']:.1f} s, put {f['put_s']:.1f} s)"
    )
    yield (
        f"history bytes/point: tracemalloc {result['history_tracemalloc']['bytes_per_point']:.1f}, "
        f"walk {result['history_walk']['bytes_per_point']:.1f} "
        f"({result['history_walk']['bytes_per_point_without_keys']:.1f} without keys)"
    )
    for name in ("in_process_instant", "in_process_range", "http_instant", "http_range"):
        r = result[name]
        yield (
            f"{name}: p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms "
            f"(n={r['repeats']}), first {r['first_ms']:.1f} ms"
        )
    for name in ("instant", "range"):
        r = result["peer_prometheus"][name]
        yield f"prometheus {name}: p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms"
    for name, row in result["http_instant_goals"].items():
        yield (
            f"http {name}: p99 {row['ours']['p99_ms']:.1f} ms, prometheus "
            f"{row['prometheus']['p99_ms']:.1f} ms ({row['ratio_p99']:.2f}x); in process p99 "
            f"{result['in_process_instant_goals'][name]['p99_ms']:.1f} ms"
        )
    dash = result["dashboard"]
    yield (
        f"dashboard ({dash['ours']['requests']} requests): ours {dash['ours']['p50_ms']:.0f} ms, "
        f"prometheus {dash['prometheus']['p50_ms']:.0f} ms per draw (median of "
        f"{dash['ours']['rounds']}), {dash['ratio_p50']:.2f}x"
    )
    rest = result["rest_nodes"]
    yield (
        f"rest /api/v1/nodes: p50 {rest['p50_ms']:.1f} ms, p99 {rest['p99_ms']:.1f} ms "
        f"({rest['served_by']})"
        if rest
        else f"rest: {result['rest_served_by']}"
    )
    yield f"prometheus remote write: {w['samples']:,} samples in {w['wall_s']:.1f} s"
    yield f"answers agree: {result['answers_agree']}; meets goal: {result['meets_goal']}"
    yield f"phases (s): {result['phases_s']}, wall {result['wall_s']:.0f} s"


def main(argv: list[str]) -> None:
    """``render ...`` and ``client`` are this bench's helper processes; else run it."""
    if argv[:1] == ["render"]:
        nodes, first, last = map(int, argv[1:4])
        render(nodes, first, last, float(argv[4]), int(argv[5]), float(argv[6]))
        return
    if argv[:1] == ["client"]:
        print(json.dumps(client(json.load(sys.stdin))))
        return
    options = {
        m[0]: int(m[1]) for m in re.findall(r"--(nodes|repeats|step)[= ](\d+)", " ".join(argv))
    }
    budget = QUICK if "--quick" in argv else Budget(options.get("repeats", REPEATS))
    result = run(budget, options.get("nodes", NODES), float(options.get("step", STEP)))
    print("\n".join(_lines(result)))
    if "--json" in argv:
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
