"""The push API under the load of 5,000 agents: accepted per core, accept latency, push-to-visible.

Why: 5,000 agents (8 cards, 32 regions each) pushing every 5 s (the agent's
default interval) offer ~1,000 payloads/s. One collector core should accept
them all, each within 50 ms, and a pushed value should show on ``/metrics``
within 100 ms.

The real collector (``build_app`` with a :class:`StaticDirectory` of every
simulated pod, ``push_auth=none``, no Kubernetes) runs in its own process on
127.0.0.1 (``python -m bench.push.run serve NODES``), so the load generator
(this process) does not share its core; its CPU time is read from
``/proc/<pid>/stat``. Every body is built and gzipped before any timing, as an
agent would send it; each node's sequence grows with each round of bodies, so
no push is skipped as a replay. Phases, in order:

* fill: every node's first push, back to back, for at most
  :data:`FILL_TIMEOUT` seconds (``--fill-seconds`` for more); a node's first
  push costs far more than later ones (its series are new to the store and its
  history), so it is reported on its own, and the later phases cycle over the
  nodes the fill got into the store; the next phase starts once the
  collector has recorded every node's own series once (see
  :func:`own_series_recorded`);
* saturated: a few connections sending back to back; accepted pushes per
  second of collector CPU is the capacity of one core (the goal's figure);
* paced: the offered rate (1,000/s) for a few seconds, open loop; accept
  latency is counted from each push's scheduled send time, so a collector that
  falls behind shows it (no coordinated omission), and pushes still unsent
  when the window closes are counted; then the same at half that rate;
* visible: with the filled nodes in the store and no other load, a changed
  value is pushed, and the time until the collector has the gzip page that
  holds it is measured by a cheap probe (see :func:`visible`); each sample is
  checked by reading the whole page.

This machine may run other work: figures per collector CPU second are steadier
than rates per wall-clock second; the load average at the start is reported.

Peer, in this process and the same run: the pull path for the same node, a
HAMi v2.10 monitor body of 8 cards and 32 vGPU allocations
(:func:`simulator.cluster.build_cluster`), through the collector's
:class:`Normaliser` and ``Store.put``; and the push path's in-process work
(gunzip, validate, ``to_batch``, ``Store.put``, self-metrics) on the very
bodies sent, so push vs pull CPU per node-snapshot is compared like for like,
and with the HTTP server's cost added. Last, the HTTP floor: the saturated
phase against an aiohttp server in its own process whose handler only reads
and inflates each body and answers 204 (:func:`floor`): what the push costs
before any of the collector's work, in this run.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from bench.kit.columns import Line, aligned
from bench.kit.processes import (
    cpu_seconds,
    loopback_socket,
    memory_mib,
    serve_collector,
    wait_healthy,
)
from bench.kit.timing import percentile
from collector.normalise.batch import Source
from collector.normalise.bodies import Normaliser
from collector.normalise.schema import SourceKind
from collector.selfmetrics import SelfMetrics
from collector.sources.pods import PodRef, StaticDirectory
from collector.sources.push import SeriesKeys, to_batch
from collector.store.latest import Store
from core.payload import Payload
from simulator.cluster import build_cluster
from testing.processes import stop

NODES = 5000
CARDS = 8
REGIONS = 32
INTERVAL = 5.0
"""The agent's default seconds between two snapshots."""
OFFERED = NODES / INTERVAL

GOAL_PER_CORE = 2000.0
"""Payloads accepted per second of collector CPU."""
GOAL_ACCEPT_P99_MS = 50.0
GOAL_VISIBLE_P99_MS = 100.0

ROUNDS = 6
"""Bodies are built for this many snapshots of every node: a bound on pushes sent."""
FILL_TIMEOUT = 20.0
"""Seconds the first round (every node new to the collector) may take."""
PACED_SECONDS = 4.0
PACED_WORKERS = 64
LIGHT_SHARE = 0.5
"""The second paced phase offers this share of :data:`OFFERED` (a load one core can carry)."""
LIGHT_SECONDS = 3.0
SATURATED_SECONDS = 4.0
CONNECTIONS = 16
"""Pushes kept in flight back to back (fill and saturated phases)."""
VISIBLE_SAMPLES = 5
VISIBLE_TIMEOUT = 30.0
"""Seconds one push-to-visible sample may take before it is given up."""
STARTUP_TIMEOUT = 30.0
OWN_SERIES_TIMEOUT = 60.0
"""Seconds the collector may take to record every node's own series after the fill (its
interval is 15 s)."""
PEER_PUSHES = 200
FLOOR_PUSHES = 8000
"""Most pushes sent to the HTTP floor peer (it is faster than the collector)."""
PEER_PULLS = 40
START = 1_700_000_000.0
"""Simulated Unix time of the pull peer's first body (fixed: same bodies every run)."""

_NAMESPACES = ("team-a", "team-b", "team-c", "ml-platform", "research", "inference")
_SEQUENCE_MARK = 987_654_321
_TIME_MARK = 1_234_567_890.5
_PUSH_HEADERS = {"Content-Type": "application/json", "Content-Encoding": "gzip"}


# --------------------------------------------------------------------------
# The simulated agents: names, directory and bodies
# --------------------------------------------------------------------------


def node_name(node: int) -> str:
    """The name of simulated node ``node``."""
    return f"bench-node-{node:05d}"


def pod_uid(node: int, region: int) -> str:
    """The UID of the pod owning region ``region`` of ``node`` (one pod per region)."""
    return f"{node:08x}-{region:04x}-4000-8000-{node * 64 + region:012x}"


def container_id(node: int, region: int) -> str:
    """The runtime's ID of that pod's container: 64 hex digits."""
    return f"{node:032x}{region:032x}"


def pod_ref(node: int, region: int) -> PodRef:
    """That pod, as the collector's directory knows it."""
    return PodRef(
        pod_uid(node, region),
        _NAMESPACES[region % len(_NAMESPACES)],
        f"train-{node:05d}{region:02d}-x7k2q",
        node_name(node),
        containers={container_id(node, region): "main"},
    )


def directory(nodes: int) -> StaticDirectory:
    """A directory of every simulated pod of nodes ``0 .. nodes-1``."""
    pods = {}
    for node in range(nodes):
        for region in range(REGIONS):
            ref = pod_ref(node, region)
            pods[ref.uid] = ref
    return StaticDirectory(pods, {})


def payload_dict(node: int, now: float, marker: int | None = None) -> dict[str, Any]:
    """One node's snapshot: 8 H200 cards with their health, 32 single-vGPU regions and their
    containers' NVML processes, as today's agent sends; readings drawn from ``node``.

    ``marker`` replaces the memory used of region 0's device (push-to-visible).
    """
    rng = random.Random(node)
    total = 143_771 << 20
    cards = [
        {
            "index": c,
            "uuid": f"GPU-{node:08x}-{c:04x}-4000-8000-{node * 8 + c:012x}",
            "name": "NVIDIA H200",
            "memory_used": rng.randrange(1 << 30, total),
            "memory_total": total,
            "utilization": float(rng.randrange(101)),
            "memory_utilization": float(rng.randrange(101)),
            "temperature": float(rng.randrange(30, 80)),
            "power": rng.randrange(75_000, 700_000) / 1000,
            "energy": rng.randrange(1 << 40) / 1000,
            "idle_energy": rng.randrange(1 << 30) / 1000,
            "ecc_corrected": rng.randrange(10),
            "ecc_uncorrected": 0,
            "clock_events": rng.choice((0, 1, 4)),
        }
        for c in range(CARDS)
    ]
    # NVML's processes of the regions' containers, as the agent groups them: HAMi-core's
    # readings stay the memory and utilisation series, the process view adds energy
    processes = [
        {
            "device": cards[r % CARDS]["uuid"],
            "pod_uid": pod_uid(node, r),
            "container_id": container_id(node, r),
            "processes": 1,
            "memory_used": rng.randrange(1 << 30, 8 << 30),
            "utilization": float(rng.randrange(101)),
            "energy": rng.randrange(1 << 30) / 1000,
        }
        for r in range(REGIONS)
    ]
    regions = []
    for r in range(REGIONS):
        limit = rng.choice((4096, 8000, 10240, 16384, 20000)) << 20
        context, module = rng.choice((304087040, 331350016, 0)), rng.choice((0, 2097152))
        buffer = rng.randrange(0, limit // 2) >> 21 << 21
        used = context + module + buffer if marker is None or r else marker
        regions.append(
            {
                "pod_uid": pod_uid(node, r),
                "container": "main",
                "devices": [
                    {
                        "index": 0,
                        "uuid": cards[r % CARDS]["uuid"],
                        "memory_used": used,
                        "memory_limit": limit,
                        "context": context,
                        "module": module,
                        "buffer": buffer,
                        "sm_utilization": float(rng.randrange(101)),
                    }
                ],
                "last_kernel_time": int(now) - rng.randrange(0, 600),
            }
        )
    return {
        "version": 1,
        "node": node_name(node),
        "agent": f"bench{node:011d}",
        "sequence": _SEQUENCE_MARK,
        "time": _TIME_MARK,
        "nvml": True,
        "cards": cards,
        "regions": regions,
        "processes": processes,
    }


def template(node: int, now: float, marker: int | None = None) -> bytes:
    """The node's JSON body as the agent sends it, its sequence and time placeholders."""
    data = payload_dict(node, now, marker)
    if node == 0:
        Payload.model_validate(data)  # the bodies follow the schema (checked once: it is slow)
    return json.dumps(data, separators=(",", ":")).encode()


def body(json_template: bytes, sequence: int, taken: float) -> bytes:
    """The gzipped body of snapshot ``sequence`` taken at ``taken`` (level 1, as the agent's pusher)."""
    raw = json_template.replace(
        f'"sequence":{_SEQUENCE_MARK}'.encode(), f'"sequence":{sequence}'.encode(), 1
    ).replace(f'"time":{_TIME_MARK!r}'.encode(), f'"time":{taken!r}'.encode(), 1)
    return gzip.compress(raw, compresslevel=1)


@dataclass
class Bodies:
    """Pre-built bodies, ``rounds`` snapshots of every node, handed out node by node.

    A pass hands out one round to each of the first ``nodes`` nodes; the next
    pass takes the next round, so every node's sequence grows.
    """

    rounds: list[list[bytes]]
    nodes: int
    used: int = 0
    _taken: int = 0
    _first_round: int = 0

    @property
    def capacity(self) -> int:
        """How many bodies there are in all."""
        return sum(len(r) for r in self.rounds)

    def next(self) -> bytes | None:
        """The next body, or None when the rounds are used up."""
        r, i = divmod(self._taken, self.nodes)
        r += self._first_round
        if r >= len(self.rounds):
            return None
        self._taken += 1
        self.used += 1
        return self.rounds[r][i]

    def restrict(self, nodes: int) -> None:
        """Cycle over the first ``nodes`` nodes only, from the next round on."""
        self._first_round += math.ceil(self._taken / self.nodes)
        self.nodes = max(1, nodes)
        self._taken = 0


def build_bodies(nodes: int, rounds: int, now: float) -> Bodies:
    """Every node's body for ``rounds`` snapshots: sequences 1.., one interval apart, up to now."""
    templates = [template(n, now) for n in range(nodes)]
    first = now - (rounds - 1) * INTERVAL
    return Bodies(
        [[body(t, r + 1, first + r * INTERVAL) for t in templates] for r in range(rounds)], nodes
    )


# --------------------------------------------------------------------------
# The collector in its own process
# --------------------------------------------------------------------------


def serve(nodes: int) -> None:
    """Run the real collector on a loopback port, every simulated pod in its directory.

    The port is printed first, alone on stdout, for :func:`measure` to read.
    """
    serve_collector(directory(nodes), push_auth="none", stale_after=3600.0)


def floor() -> None:
    """The HTTP floor: an aiohttp server whose push handler only reads and inflates the body, then answers 204.

    What any aiohttp push endpoint costs before its own work; the port is
    printed first, as :func:`serve` does.
    """
    from aiohttp import web

    sock = loopback_socket()
    print(sock.getsockname()[1], flush=True)

    async def push(request: web.Request) -> web.Response:
        zlib.decompress(await request.read(), wbits=16 + zlib.MAX_WBITS)
        return web.Response(status=204)

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application(client_max_size=1 << 24, handler_args={"auto_decompress": False})
    app.router.add_post("/api/v1/push", push)
    app.router.add_get("/healthz", healthz)
    web.run_app(app, sock=sock, print=None, access_log=None)


def _served_port(process: subprocess.Popen[bytes]) -> int:
    """The port ``serve`` printed (ValueError if it exited first: its log says why)."""
    assert process.stdout is not None
    with process.stdout:
        return int(process.stdout.readline())


# --------------------------------------------------------------------------
# Load phases
# --------------------------------------------------------------------------


@dataclass
class Phase:
    """What one load phase saw."""

    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    errors: int = 0
    not_sent: int = 0
    collector_cpu: float = 0.0
    loader_cpu: float = 0.0

    @property
    def accepted(self) -> int:
        """Pushes answered 204."""
        return self.statuses[204]

    def figures(self) -> dict[str, Any]:
        """The phase as plain figures (latencies in ms)."""
        return {
            "seconds": self.seconds,
            "sent": sum(self.statuses.values()) + self.errors,
            "not_sent": self.not_sent,
            "accepted": self.accepted,
            "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
            "errors": self.errors,
            "accepted_per_s": self.accepted / self.seconds if self.seconds else 0.0,
            "latency_p50_ms": percentile(self.latencies, 50) * 1e3,
            "latency_p99_ms": percentile(self.latencies, 99) * 1e3,
            "latency_max_ms": max(self.latencies, default=0.0) * 1e3,
            "collector_cpu_s": self.collector_cpu,
            "collector_core_share": self.collector_cpu / self.seconds if self.seconds else 0.0,
            "accepted_per_collector_cpu_s": (
                self.accepted / self.collector_cpu if self.collector_cpu else 0.0
            ),
            "loader_cpu_s": self.loader_cpu,
        }


async def _post(session: aiohttp.ClientSession, url: str, data: bytes, phase: Phase) -> None:
    try:
        async with session.post(url, data=data, headers=_PUSH_HEADERS) as resp:
            await resp.read()
            phase.statuses[resp.status] += 1
    except (aiohttp.ClientError, TimeoutError):
        phase.errors += 1


async def paced(
    session: aiohttp.ClientSession, url: str, bodies: Bodies, pid: int, rate: float, seconds: float
) -> Phase:
    """Offer ``rate`` pushes/s for ``seconds``, open loop; latency from each scheduled send.

    Pushes not yet sent when the window closes (every worker was waiting on the
    collector) are counted as not sent, not sent late.
    """
    phase = Phase()
    loop = asyncio.get_running_loop()
    total = int(rate * seconds)
    issued = 0
    cpu0, own0 = cpu_seconds(pid), time.process_time()
    start = loop.time() + 0.05
    end = start + seconds

    async def worker() -> None:
        nonlocal issued
        while issued < total and loop.time() < end:
            at = start + issued / rate
            issued += 1
            data = bodies.next()
            if data is None:
                return
            delay = at - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            await _post(session, url, data, phase)
            phase.latencies.append(loop.time() - at)

    await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(PACED_WORKERS))), seconds + 60)
    phase.seconds = loop.time() - start
    phase.not_sent = total - issued
    phase.collector_cpu = cpu_seconds(pid) - cpu0
    phase.loader_cpu = time.process_time() - own0
    return phase


async def closed(
    session: aiohttp.ClientSession,
    url: str,
    bodies: Bodies,
    pid: int,
    seconds: float,
    count: int,
) -> Phase:
    """Keep :data:`CONNECTIONS` pushes in flight back to back: ``count`` of them or ``seconds``."""
    phase = Phase()
    cpu0, own0 = cpu_seconds(pid), time.process_time()
    start = time.perf_counter()
    deadline = start + seconds
    left = count

    async def worker() -> None:
        nonlocal left
        while left > 0 and time.perf_counter() < deadline:
            left -= 1
            data = bodies.next()
            if data is None:
                return
            sent = time.perf_counter()
            await _post(session, url, data, phase)
            phase.latencies.append(time.perf_counter() - sent)

    await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(CONNECTIONS))), seconds + 60)
    phase.seconds = time.perf_counter() - start
    phase.not_sent = left
    phase.collector_cpu = cpu_seconds(pid) - cpu0
    phase.loader_cpu = time.process_time() - own0
    return phase


async def scrape(
    session: aiohttp.ClientSession, base: str, needle: bytes, encoding: str = "identity"
) -> tuple[bool, float, float, int]:
    """GET /metrics: whether ``needle`` is in it, seconds to headers and to the end, bytes.

    With ``encoding="gzip"`` aiohttp inflates the body as it arrives.
    """
    start = time.perf_counter()
    found = False
    size = 0
    tail = b""
    async with session.get(base + "/metrics", headers={"Accept-Encoding": encoding}) as resp:
        head = time.perf_counter() - start
        async for chunk in resp.content.iter_chunked(1 << 20):
            size += len(chunk)
            if not found:
                window = tail + chunk
                found = needle in window
                tail = window[-len(needle) :]
    return found, head, time.perf_counter() - start, size


async def probe(session: aiohttp.ClientSession, base: str) -> tuple[float, int]:
    """HEAD /metrics with gzip: seconds until the collector has the current gzip page, its bytes.

    The collector answers HEAD through the same build as GET (only the body is
    left out), so its answer comes once the page of the store's current
    generation is built and ready to send; an unchanged page answers at once.
    """
    start = time.perf_counter()
    async with session.head(base + "/metrics", headers={"Accept-Encoding": "gzip"}) as resp:
        if resp.status != 200:
            raise RuntimeError(f"HEAD /metrics answered {resp.status}")
        return time.perf_counter() - start, resp.content_length or 0


async def visible(session: aiohttp.ClientSession, base: str, nodes: int) -> dict[str, Any]:
    """Push a changed value and time until the gzip page holds it; ``VISIBLE_SAMPLES`` times.

    How visibility is measured: a push is in the store when it is answered
    (204), and every page built after that holds it. So a sample is the time
    from sending the push to the answer of a :func:`probe` sent right after
    the 204: the push, then the page build that includes it (what the next
    scrape is served). Reading the whole page to find the value would time the
    client, not the collector: at 5,000 nodes the gzip page is ~40 MB that
    inflates to ~300 MB in this process. Each sample is then checked, untimed:
    one full gzip GET must hold the pushed value (its time, push to found, is
    reported beside, as the old way of measuring). Prometheus scrapes gzip all
    along, so the gzip page is built once before the samples (that first build
    compresses every node and is reported on its own).
    """
    first_gzip, size = await probe(session, base)
    delays: list[float] = []
    accepts: list[float] = []
    reads: list[float] = []
    for k in range(VISIBLE_SAMPLES):
        node = (k * 997) % nodes
        marker = 7_000_000_000 + k * 1_000_003 + 17
        now = time.time()
        data = body(template(node, now, marker), 1_000_000 + k, now)
        needle = f'node="{node_name(node)}"}} {float(marker)!r}\n'.encode()
        phase = Phase()
        start = time.perf_counter()
        await _post(session, base + "/api/v1/push", data, phase)
        accepts.append(time.perf_counter() - start)
        if phase.accepted != 1:
            raise RuntimeError(f"push-to-visible push refused: {dict(phase.statuses)}")
        await probe(session, base)
        delays.append(time.perf_counter() - start)
        found, _, _, _ = await scrape(session, base, needle, "gzip")
        if not found:
            raise RuntimeError(f"the pushed value of {node_name(node)} is not on the gzip page")
        reads.append(time.perf_counter() - start)
    builds = [d - a for d, a in zip(delays, accepts, strict=True)]
    return {
        "samples": len(delays),
        "asked": VISIBLE_SAMPLES,
        "gzip_page_mib": size / (1 << 20),
        "first_gzip_page_s": first_gzip,
        "accept_ms_median": statistics.median(accepts) * 1e3,
        "rebuild_ms_median": statistics.median(builds) * 1e3,
        "full_read_ms_median": statistics.median(reads) * 1e3,
        "visible_p50_ms": percentile(delays, 50) * 1e3,
        "visible_p99_ms": percentile(delays, 99) * 1e3,
    }


# --------------------------------------------------------------------------
# Peers: the pull path, and the push path in process
# --------------------------------------------------------------------------


def pull_peer() -> dict[str, Any]:
    """Normaliser + Store.put per node-snapshot of a HAMi monitor body, 8 cards, 32 allocations."""
    node = build_cluster(
        1, seed=1, cards=CARDS, allocations_per_node=REGIONS, flavours=("hami",), start_time=START
    )[0]
    texts = []
    for k in range(PEER_PULLS + 1):
        now = START + k * INTERVAL
        node.step(now)
        texts.append(node.exposition(now))
    normaliser = Normaliser(node.name)
    store = Store(1e9)
    source = Source("uid-pull", "monitors/pull:9394", node.name, SourceKind.HAMI, 1)
    cold = time.perf_counter()
    store.put(source, normaliser.normalise(texts[0]), 0.0)
    cold = time.perf_counter() - cold
    times = []
    samples = 0
    for text in texts[1:]:
        t0 = time.perf_counter()
        batch = normaliser.normalise(text)
        store.put(source, batch, 0.0)
        times.append(time.perf_counter() - t0)
        samples = batch.samples
    view = store.view(node.name)
    return {
        "body_bytes": len(texts[-1]),
        "samples": samples,
        "series": len(view.series) if view is not None else 0,
        "cold_us": cold * 1e6,
        "us_median": statistics.median(times) * 1e6,
    }


def push_peer(bodies: Bodies) -> dict[str, Any]:
    """The handler's work without HTTP on the first :data:`PEER_PUSHES` nodes' bodies.

    Round 0 is each node's first push (cold: new series everywhere), round 1
    the steady state; each part is timed on its own, medians reported.
    """
    pods = directory(PEER_PUSHES)
    store = Store(1e9)
    metrics = SelfMetrics(store)
    keys: dict[str, SeriesKeys] = {}  # kept per node, as the handler keeps them
    out: dict[str, Any] = {
        "body_bytes_gzip": statistics.median(len(b) for b in bodies.rounds[0][:PEER_PUSHES]),
        "body_bytes_json": len(gzip.decompress(bodies.rounds[0][0])),
    }
    for name, r in (("cold", 0), ("steady", 1)):
        parts: dict[str, list[float]] = {"decode_validate": [], "to_batch": [], "put_metrics": []}
        totals = []
        for data in bodies.rounds[r][:PEER_PUSHES]:
            t0 = time.perf_counter()
            payload = Payload.model_validate_json(gzip.decompress(data))
            t1 = time.perf_counter()
            batch, unowned = to_batch(payload, pods, keys.setdefault(payload.node, SeriesKeys()))
            t2 = time.perf_counter()
            source = Source(f"agent/{payload.node}", "agent x", payload.node, SourceKind.AGENT, 0)
            store.put(source, batch, t2)
            metrics.pushed(source, batch, unowned, payload.time)
            t3 = time.perf_counter()
            parts["decode_validate"].append(t1 - t0)
            parts["to_batch"].append(t2 - t1)
            parts["put_metrics"].append(t3 - t2)
            totals.append(t3 - t0)
            out["series"] = batch.samples
        out[f"{name}_us_median"] = statistics.median(totals) * 1e6
        for part, values in parts.items():
            out[f"{name}_{part}_us_median"] = statistics.median(values) * 1e6
    return out


# --------------------------------------------------------------------------
# The benchmark
# --------------------------------------------------------------------------


async def _load(
    port: int, process: subprocess.Popen[bytes], bodies: Bodies, fill_timeout: float
) -> dict[str, Any]:
    base = f"http://127.0.0.1:{port}"
    url = base + "/api/v1/push"
    connector = aiohttp.TCPConnector(limit=PACED_WORKERS + 4)
    timeout = aiohttp.ClientTimeout(total=60)
    pid = process.pid
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await wait_healthy(session, base, process, STARTUP_TIMEOUT)
        rss0 = memory_mib(pid)
        fill = await closed(session, url, bodies, pid, fill_timeout, NODES)
        filled = fill.accepted
        bodies.restrict(filled)
        await own_series_recorded(session, base, filled)
        rss1 = memory_mib(pid)
        saturated_phase = await closed(session, url, bodies, pid, SATURATED_SECONDS, NODES)
        paced_phase = await paced(session, url, bodies, pid, OFFERED, PACED_SECONDS)
        light = await paced(session, url, bodies, pid, OFFERED * LIGHT_SHARE, LIGHT_SECONDS)
        seen = await visible(session, base, filled)
        return {
            "nodes_in_store": filled,
            "collector_rss_mib_start": rss0.get("VmRSS", 0.0),
            "collector_rss_mib_filled": rss1.get("VmRSS", 0.0),
            "collector_rss_mib_peak": memory_mib(pid).get("VmHWM", 0.0),
            "fill": fill.figures(),
            "saturated": saturated_phase.figures(),
            "paced": paced_phase.figures(),
            "light": light.figures(),
            "visible": seen,
        }


async def own_series_recorded(session: aiohttp.ClientSession, base: str, nodes: int) -> None:
    """Wait until the collector has recorded every node's own series once (``/prometheus``).

    Its first record of thousands of new nodes costs ~0.35 s of CPU at 5,000
    (every series new to the history), once; a phase that met it measured the
    collector warming up, not what it does every interval.
    """
    url = base + "/prometheus/api/v1/query"
    query = {"query": "count(hami_usage_collector_source_up)"}
    deadline = time.monotonic() + OWN_SERIES_TIMEOUT
    while time.monotonic() < deadline:
        async with session.get(url, params=query) as resp:
            found = (await resp.json())["data"]["result"]
        if found and float(found[0]["value"][1]) >= nodes:
            return
        await asyncio.sleep(0.5)
    raise RuntimeError(f"own series of {nodes} nodes not recorded in {OWN_SERIES_TIMEOUT:g}s")


async def _floor_load(port: int, process: subprocess.Popen[bytes], bodies: Bodies) -> Phase:
    base = f"http://127.0.0.1:{port}"
    connector = aiohttp.TCPConnector(limit=CONNECTIONS + 4)
    async with aiohttp.ClientSession(connector=connector) as session:
        await wait_healthy(session, base, process, STARTUP_TIMEOUT)
        url = base + "/api/v1/push"
        return await closed(session, url, bodies, process.pid, SATURATED_SECONDS, FLOOR_PUSHES)


def measure_floor(bodies: Bodies) -> dict[str, Any]:
    """The saturated phase against :func:`floor` in its own process, on the same bodies."""
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.push.run", "floor"], stdout=subprocess.PIPE
    )
    try:
        port = _served_port(process)
        phase = asyncio.run(_floor_load(port, process, Bodies(bodies.rounds, NODES)))
    finally:
        stop(process)
    return phase.figures()


def measure(bodies: Bodies, fill_timeout: float) -> tuple[dict[str, Any], float]:
    """Start the collector in its own process, push at it, stop it: the phases, its CPU seconds.

    If anything fails, the tail of the collector's log goes to stderr.
    """
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "bench.push.run", "serve", str(NODES)],
            stdout=subprocess.PIPE,
            stderr=log,
        )
        try:
            port = _served_port(process)
            load = asyncio.run(_load(port, process, bodies, fill_timeout))
            cpu_total = cpu_seconds(process.pid)
        except BaseException:
            stop(process)
            log.seek(0)
            sys.stderr.write(log.read()[-4000:].decode(errors="replace"))
            raise
        stop(process)
    return load, cpu_total


def against_goals(
    load: dict[str, Any], pull: dict[str, Any], push: dict[str, Any]
) -> dict[str, Any]:
    """The headline figures, the push vs pull ratios, the goals, and whether all are met.

    A paced phase that left pushes unsent, or push-to-visible samples given up,
    count as an infinite p99.
    """
    paced_phase, seen = load["paced"], load["visible"]
    per_core = load["saturated"]["accepted_per_collector_cpu_s"]
    push_http_us = 1e6 / per_core if per_core else math.inf
    accept_p99 = paced_phase["latency_p99_ms"] if not paced_phase["not_sent"] else math.inf
    visible_p99 = seen["visible_p99_ms"] if seen["samples"] == seen["asked"] else math.inf
    return {
        "accepted_per_collector_core_s": per_core,
        "cold_accepted_per_collector_core_s": load["fill"]["accepted_per_collector_cpu_s"],
        "accept_p99_ms": accept_p99,
        "visible_p99_ms": visible_p99,
        "push_http_us_per_snapshot": push_http_us,
        "ratio_push_http_vs_pull": push_http_us / pull["us_median"],
        "ratio_push_in_process_vs_pull": push["steady_us_median"] / pull["us_median"],
        "goal_accepted_per_core_s": GOAL_PER_CORE,
        "goal_accept_p99_ms": GOAL_ACCEPT_P99_MS,
        "goal_visible_p99_ms": GOAL_VISIBLE_P99_MS,
        "meets_goal": per_core >= GOAL_PER_CORE
        and accept_p99 <= GOAL_ACCEPT_P99_MS
        and visible_p99 <= GOAL_VISIBLE_P99_MS
        and load["nodes_in_store"] == NODES,
    }


def run(fill_timeout: float = FILL_TIMEOUT) -> dict[str, Any]:
    """Start the collector in its own process, push at it, and compare with the peers.

    ``fill_timeout`` bounds the first round (each node's first push); the
    later phases cycle over the nodes it got into the store.
    """
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    bodies = build_bodies(NODES, ROUNDS, time.time())
    build_s = time.perf_counter() - started
    pull = pull_peer()
    push = push_peer(bodies)
    load, cpu_total = measure(bodies, fill_timeout)
    http_floor = measure_floor(bodies)
    return {
        "nodes": NODES,
        "cards": CARDS,
        "regions": REGIONS,
        "offered_per_s": OFFERED,
        "load_average_before": load_before,
        "bodies_built": bodies.capacity,
        "bodies_used": bodies.used,
        "nodes_in_store": load["nodes_in_store"],
        "build_s": build_s,
        "wall_s": time.perf_counter() - started,
        "collector_cpu_s_total": cpu_total,
        **{k: v for k, v in load.items() if k.startswith("collector_rss")},
        **{k: load[k] for k in ("fill", "saturated", "paced", "light", "visible")},
        "peer_pull": pull,
        "peer_push_in_process": push,
        "peer_http_floor": http_floor,
        "ratio_per_core_vs_http_floor": (
            load["saturated"]["accepted_per_collector_cpu_s"]
            / (http_floor["accepted_per_collector_cpu_s"] or math.nan)
        ),
        **against_goals(load, pull, push),
    }


def _load_lines(result: dict[str, Any]) -> list[Line]:
    """Capacity per core, the cold fill, and the two paced phases' rates and latencies."""
    fill, paced_phase, light = result["fill"], result["paced"], result["light"]
    return [
        (
            "accepted per collector core-second (steady)",
            f"{result['accepted_per_collector_core_s']:,.0f}",
            f">= {GOAL_PER_CORE:,.0f}",
        ),
        (
            "  first push of each node (cold fill)",
            f"{result['cold_accepted_per_collector_core_s']:,.0f}",
            f"{fill['accepted']:,} of {NODES:,} nodes in {fill['seconds']:.1f} s",
        ),
        (
            f"paced, {OFFERED:,.0f}/s offered: accepted/s",
            f"{paced_phase['accepted_per_s']:,.0f}",
            f"not sent {paced_phase['not_sent']:,}, statuses {paced_phase['statuses']}",
        ),
        (
            "  collector core share",
            f"{paced_phase['collector_core_share']:.0%}",
            "< 100%",
        ),
        (
            "accept latency p50 / p99 ms (from schedule)",
            f"{paced_phase['latency_p50_ms']:,.1f} / {paced_phase['latency_p99_ms']:,.1f}",
            f"p99 <= {GOAL_ACCEPT_P99_MS:g}",
        ),
        (
            f"  at {OFFERED * LIGHT_SHARE:,.0f}/s offered: p50 / p99 ms",
            f"{light['latency_p50_ms']:,.1f} / {light['latency_p99_ms']:,.1f}",
            f"accepted/s {light['accepted_per_s']:,.0f}, not sent {light['not_sent']:,}",
        ),
    ]


def _visible_lines(seen: dict[str, Any]) -> list[Line]:
    """Push-to-visible on the gzip page, its page build, and the full read beside."""
    return [
        (
            "push-to-visible, gzip page built, p50 / p99 ms",
            f"{seen['visible_p50_ms']:,.0f} / {seen['visible_p99_ms']:,.0f}",
            f"p99 <= {GOAL_VISIBLE_P99_MS:g}",
        ),
        (
            "  accept / page build ms (median)",
            f"{seen['accept_ms_median']:,.0f} / {seen['rebuild_ms_median']:,.0f}",
            f"first gzip build {seen['first_gzip_page_s']:.1f} s (every node)",
        ),
        (
            "  push to value found by a full gzip read ms",
            f"{seen['full_read_ms_median']:,.0f}",
            f"gzip page {seen['gzip_page_mib']:,.0f} MiB (the client inflates it all)",
        ),
    ]


def _cost_lines(result: dict[str, Any]) -> list[Line]:
    """Push CPU per snapshot, with HTTP and in process by part, beside the pull path."""
    pull, push = result["peer_pull"], result["peer_push_in_process"]
    floor_rate = result["peer_http_floor"]["accepted_per_collector_cpu_s"]
    return [
        (
            "  HTTP floor: aiohttp reads, inflates, answers 204",
            f"{floor_rate:,.0f}/core-s",
            f"{1e6 / floor_rate:,.0f} us per push; ours x{result['ratio_per_core_vs_http_floor']:.2f}",
        ),
        (
            "push CPU us per snapshot, with HTTP",
            f"{result['push_http_us_per_snapshot']:,.0f}",
            f"pull {pull['us_median']:,.0f} (x{result['ratio_push_http_vs_pull']:.1f})",
        ),
        (
            "push CPU us per snapshot, in process",
            f"{push['steady_us_median']:,.0f}",
            f"pull {pull['us_median']:,.0f} (x{result['ratio_push_in_process_vs_pull']:.1f})",
        ),
        (
            "  decode+validate / to_batch / put+metrics",
            f"{push['steady_decode_validate_us_median']:,.0f} / "
            f"{push['steady_to_batch_us_median']:,.0f} / "
            f"{push['steady_put_metrics_us_median']:,.0f}",
            f"series {push['series']} vs pull {pull['series']}",
        ),
        (
            "  first push of a node, in process",
            f"{push['cold_us_median']:,.0f}",
            f"put+metrics {push['cold_put_metrics_us_median']:,.0f}, pull cold {pull['cold_us']:,.0f}",
        ),
    ]


def table(result: dict[str, Any]) -> str:
    """A small table of the figures against their goals and the pull peer."""
    rss = (
        "collector RSS MiB filled / peak",
        f"{result['collector_rss_mib_filled']:,.0f} / {result['collector_rss_mib_peak']:,.0f}",
        f"{result['nodes_in_store']:,} nodes in the store",
    )
    lines = aligned(
        [
            ("figure", "measured", "goal / peer"),
            *_load_lines(result),
            *_visible_lines(result["visible"]),
            *_cost_lines(result),
            rss,
        ]
    )
    lines.append(
        f"meets goal: {result['meets_goal']}  (wall {result['wall_s']:.0f} s, "
        f"load average before {result['load_average_before']:.2f})"
    )
    return "\n".join(lines)


if __name__ == "__main__":  # the bench's helper processes: the collector, the floor
    cli = argparse.ArgumentParser(prog="python -m bench.push.run")
    helpers = cli.add_subparsers(dest="helper", required=True)
    helpers.add_parser("serve").add_argument("nodes", type=int)
    helpers.add_parser("floor")
    a = cli.parse_args()
    serve(a.nodes) if a.helper == "serve" else floor()
