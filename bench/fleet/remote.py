"""Remote write: samples per second per core, and end to end into VictoriaMetrics with an outage.

Why: a collector of 5,000 nodes x 250 series at 15 s produces ~83,000
samples/s; remote write must cost a small part of a core for that (goal:
≥ 1,000,000 samples/s per core into a receiver that accepts everything).

The workload is the store's own: :data:`NODES` nodes of :data:`SERIES` series
(HAMi-shaped keys of six labels, plus ``node`` and two external labels), each
node's series one mapping per round, fed to :class:`RemoteWriter` as
``Store.put`` feeds it (``accepted``), over 4 shards of one destination.

* throughput: the receiver is a bare aiohttp handler in its own process (reads
  the body, answers 204), so only the sender's CPU is in this process; samples
  per CPU second of this process (enqueue, encode, snappy, HTTP) is the figure.
  Peer, same run and samples: rendering them as ``/metrics`` text (what a
  scrape of the collector costs it), per CPU second.
* victoria-metrics: the same writer into a real single-node VictoriaMetrics
  (Debian's 1.79): samples/s and CPU of both processes; then a steady load
  (one round a second) while VictoriaMetrics is stopped for
  :data:`OUTAGE` seconds and started again on the same port: the queue's
  peak, the drops, the time to drain, and whether VictoriaMetrics then holds
  every sample (``count_over_time`` over the whole run).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry

from bench.kit.cluster import ROOT
from bench.kit.processes import cpu_seconds, loopback_socket
from bench.kit.table import write_result
from collector.exposition.render import render_lines
from collector.normalise.labelsets import series_key
from collector.remote.encode import Heads
from collector.remote.queue import Destination, QueueConfig
from collector.remote.stats import RemoteStats
from collector.remote.writer import RemoteWriter
from core.tasks import Supervisor
from testing.processes import stop

NODES = 200
SERIES = 250
ROUNDS = 40
"""Throughput rounds: 40 x 200 x 250 = 2,000,000 samples."""
OUTAGE = float(os.environ.get("BENCH_REMOTE_OUTAGE", "30"))
"""Seconds VictoriaMetrics is down in the outage phase."""
GOAL = 1_000_000
VICTORIA = ROOT / ".tools/victoria-metrics/usr/bin/victoria-metrics"
EXTERNAL = [("cluster", "bench"), ("replica", "r1")]


def workload(seed: int = 1) -> list[tuple[str, dict[bytes, float]]]:
    """Every node's series with fresh values; the keys are the store's canonical form."""
    rng = random.Random(seed)
    nodes = []
    for n in range(NODES):
        series = {}
        for s in range(SERIES):
            labels = [
                ("container", f"c{s % 8}"),
                ("device_uuid", f"GPU-{n:04d}-{s % 8}"),
                ("namespace", f"team-{s % 5}"),
                ("pod", f"job-{n}-{s // 8}"),
                ("vdeviceid", str(s % 4)),
                ("zone", "z1"),
            ]
            series[series_key("bench_vgpu_memory_used_bytes", labels)] = rng.random() * 1e10
        nodes.append((f"node-{n:04d}", series))
    return nodes


def serve_sink() -> None:
    """``python -m bench.fleet.remote sink``: accept every request; print the port."""

    async def accept(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=204)

    app = web.Application(client_max_size=64 << 20)
    app.router.add_post("/api/v1/write", accept)
    sock = loopback_socket()
    print(sock.getsockname()[1], flush=True)
    web.run_app(app, sock=sock, print=None, access_log=None)


def _writer(url: str, session: aiohttp.ClientSession, max_samples: int) -> RemoteWriter:
    stats = RemoteStats(CollectorRegistry(), lambda: None)
    config = QueueConfig(max_samples=max_samples, shards=4, max_backoff=1.0)
    return RemoteWriter(
        [Destination(url, session, Heads(EXTERNAL), stats.destination(url), config)]
    )


def _start(tasks: Supervisor, writer: RemoteWriter) -> None:
    for destination in writer.destinations:
        for index in range(4):
            tasks.start("remote write", functools.partial(destination.run, index))


async def _send_rounds(writer: RemoteWriter, nodes: list[tuple[str, dict[bytes, float]]]) -> None:
    start = time.time() - ROUNDS
    for round_ in range(ROUNDS):
        for node, series in nodes:
            writer.accepted(node, series, start + round_)
        await asyncio.sleep(0)
    await writer.drained()


async def _throughput(url: str, nodes: list[tuple[str, dict[bytes, float]]]) -> dict[str, Any]:
    async with aiohttp.ClientSession() as session:
        warm = _writer(url, session, 10**8)
        async with Supervisor() as tasks:
            _start(tasks, warm)
            for node, series in nodes:  # every series' head encoded once, as in steady state
                warm.accepted(node, series, time.time())
            await warm.drained()
            cpu, wall = time.process_time(), time.perf_counter()
            await _send_rounds(warm, nodes)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        totals = warm.destinations[0].stats.totals
    samples = ROUNDS * NODES * SERIES
    return {
        "samples": samples,
        "sent": totals["sent"] - NODES * SERIES,
        "dropped": totals["dropped"],
        "cpu_seconds": round(cpu, 3),
        "wall_seconds": round(wall, 3),
        "samples_per_cpu_second": round(samples / cpu),
        "samples_per_second": round(samples / wall),
    }


def _render_peer(nodes: list[tuple[str, dict[bytes, float]]]) -> dict[str, Any]:
    cpu = time.process_time()
    for _ in range(ROUNDS):
        for node, series in nodes:
            render_lines(sorted(series.items()), node, EXTERNAL)
    cpu = time.process_time() - cpu
    return {"samples_per_cpu_second": round(ROUNDS * NODES * SERIES / cpu)}


def throughput() -> dict[str, Any]:
    """The sender into an accept-everything receiver, and the /metrics rendering peer."""
    nodes = workload()
    with tempfile.TemporaryFile() as log:
        sink = subprocess.Popen(
            [sys.executable, "-m", "bench.fleet.remote", "sink"], stdout=subprocess.PIPE, stderr=log
        )
        try:
            assert sink.stdout is not None
            port = int(sink.stdout.readline())
            sent = asyncio.run(_throughput(f"http://127.0.0.1:{port}/api/v1/write", nodes))
            sent["receiver_cpu_seconds"] = cpu_seconds(sink.pid)
        finally:
            stop(sink)
    peer = _render_peer(nodes)
    return {"sent": sent, "render_peer": peer}


class Victoria:
    """A VictoriaMetrics process on a port this bench holds, stopped and started at will."""

    def __init__(self, work: Path) -> None:
        # Held with SO_REUSEADDR and never listening: the port stays ours while
        # VictoriaMetrics (Go sets SO_REUSEADDR too) is down, and it may bind it.
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.work = work
        self.process: subprocess.Popen[bytes] | None = None
        self.cpu = 0.0

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                str(VICTORIA),
                f"-httpListenAddr=127.0.0.1:{self.port}",
                f"-storageDataPath={self.work}",
                "-search.latencyOffset=0s",
                "-search.disableCache",
                "-retentionPeriod=100y",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while not self._healthy():
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError("victoria-metrics did not start")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.process is not None:
            self.cpu += cpu_seconds(self.process.pid)
            stop(self.process)
            self.process = None

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def count(self, window: float) -> float:
        query = f"sum(count_over_time(bench_vgpu_memory_used_bytes[{int(window)}s]))"
        params = urllib.parse.urlencode({"query": query, "time": f"{time.time():.3f}"})
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{params}", timeout=60) as resp:
            result = json.load(resp)["data"]["result"]
        return float(result[0]["value"][1]) if result else 0.0


async def _end_to_end(vm: Victoria, nodes: list[tuple[str, dict[bytes, float]]]) -> dict[str, Any]:
    url = f"{vm.url}/api/v1/write"
    began = time.time()
    async with aiohttp.ClientSession() as session:
        writer = _writer(url, session, 2_000_000)
        stats = writer.destinations[0].stats
        async with Supervisor() as tasks:
            _start(tasks, writer)
            cpu, wall = time.process_time(), time.perf_counter()
            await _send_rounds(writer, nodes)
            bulk = {
                "samples": ROUNDS * NODES * SERIES,
                "cpu_seconds": round(time.process_time() - cpu, 3),
                "wall_seconds": round(time.perf_counter() - wall, 3),
            }
            bulk["samples_per_second"] = round(bulk["samples"] / bulk["wall_seconds"])
            bulk["samples_per_cpu_second"] = round(bulk["samples"] / bulk["cpu_seconds"])
            outage = await _outage(vm, writer, nodes, stats.totals)
    expected = stats.totals["sent"]
    return {
        "bulk": bulk,
        "outage": outage,
        "sent": expected,
        "dropped": stats.totals["dropped"],
        "run_seconds": round(time.time() - began, 1),
    }


async def _outage(
    vm: Victoria,
    writer: RemoteWriter,
    nodes: list[tuple[str, dict[bytes, float]]],
    totals: dict[str, int],
) -> dict[str, Any]:
    """One round a second; VictoriaMetrics down for OUTAGE s in the middle; then drain."""
    peak, rounds, down_at, up_at = 0, 0, None, None
    steady = 5.0
    start = time.monotonic()
    deadline = start + 2 * steady + OUTAGE
    while time.monotonic() < deadline:
        now = time.time()
        for node, series in nodes:
            writer.accepted(node, series, now)
        rounds += 1
        elapsed = time.monotonic() - start
        if down_at is None and elapsed >= steady:
            await asyncio.to_thread(vm.stop)
            down_at = time.monotonic()
        if down_at is not None and up_at is None and time.monotonic() - down_at >= OUTAGE:
            await asyncio.to_thread(vm.start)
            up_at = time.monotonic()
        peak = max(peak, totals["pending"])
        await asyncio.sleep(1.0)
    drained_from = time.monotonic()
    await asyncio.wait_for(writer.drained(), 300)
    return {
        "outage_seconds": OUTAGE,
        "rounds": rounds,
        "offered_samples_per_second": NODES * SERIES,
        "peak_pending": peak,
        "dropped": totals["dropped"],
        "retried": totals["retried"],
        "drain_seconds_after_last_round": round(time.monotonic() - drained_from, 2),
    }


def end_to_end() -> dict[str, Any]:
    """The writer into a real VictoriaMetrics: bulk rate, then an outage; every sample checked."""
    nodes = workload()
    with tempfile.TemporaryDirectory() as work:
        vm = Victoria(Path(work))
        vm.start()
        try:
            result = asyncio.run(_end_to_end(vm, nodes))
            window = result["run_seconds"] + ROUNDS + 60
            deadline = time.monotonic() + 60
            held = vm.count(window)
            while held < result["sent"] and time.monotonic() < deadline:
                time.sleep(0.5)  # VictoriaMetrics makes new rows searchable within a second or so
                held = vm.count(window)
        finally:
            vm.stop()
            vm.sock.close()
    result["victoria_holds"] = held
    result["victoria_cpu_seconds"] = round(vm.cpu, 2)
    result["lost"] = result["sent"] - held
    return result


def run() -> dict[str, Any]:
    """Both phases, and the figures against the goal."""
    sent = throughput()
    e2e = end_to_end()
    rate = sent["sent"]["samples_per_cpu_second"]
    return {
        "throughput": sent,
        "victoria_metrics": e2e,
        "goal_samples_per_cpu_second": GOAL,
        "meets_goal": rate >= GOAL,
        "ratio_to_render_peer": round(rate / sent["render_peer"]["samples_per_cpu_second"], 2),
    }


def save(meta: dict[str, Any], table: str, result: dict[str, Any]) -> None:
    """Overwrite ``remote-write.md`` and ``remote-write.json``."""
    sent = result["throughput"]["sent"]
    write_result(
        "remote-write",
        f"# Remote write\n\n{meta['date']}, Python {meta['python']}, {meta['cpus']} CPUs "
        f"(load average after: {', '.join(f'{x:.2f}' for x in meta['load_average_after'])}).\n\n"
        f"{table}\n\n"
        f"Workload: {NODES} nodes x {SERIES} series (six labels, plus node and two external "
        f"labels), {ROUNDS} rounds = {sent['samples']:,} samples, 4 shards, batches of 2,000. "
        f"Sender CPU {sent['cpu_seconds']} s over {sent['wall_seconds']} s wall; the "
        f"accept-all receiver (its own process) used {sent['receiver_cpu_seconds']} s. "
        "The wall rate is below the CPU rate because each shard keeps one request in "
        "flight and this machine's two cores are shared.\n\n"
        "The outage phase offers one round a second; VictoriaMetrics is stopped and "
        "started again on the same port; afterwards `sum(count_over_time(...))` over the "
        "whole run must equal the samples the writer counted as sent.\n\n"
        "How: `bench/fleet/remote.py`; details in `remote-write.json`.\n",
        {"meta": meta, **result},
    )


if __name__ == "__main__":  # the accept-all receiver's own process
    cli = argparse.ArgumentParser(prog="python -m bench.fleet.remote")
    cli.add_argument("helper", choices=["sink"])
    cli.parse_args()
    serve_sink()
