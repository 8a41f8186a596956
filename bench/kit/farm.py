"""Simulated monitors served from one process, each body rendered before serving.

``python -m bench.kit.farm NODES CARDS ALLOCATIONS INTERVAL`` builds the demo's
cluster (:func:`simulator.cluster.build_cluster`: the exact upstream
expositions of every flavour), renders and gzips :data:`VARIANTS` passes of
simulated time per node, binds every node's address from
:func:`simulator.monitors.loopback_address` (127.1.0.1, ...) on one
port, prints one JSON line (the port, a control port, each node's name,
flavour and samples), and serves until SIGTERM: interval ``k`` of wall time
serves pass ``k % VARIANTS``. Serving costs no rendering, so on a shared
machine the monitors do not starve the scrapers they feed. ``GET /stats`` on
127.0.0.1 at the control port answers the requests and samples served so far
and the process's CPU seconds: what a scraper is charged for.
:func:`start_monitors` runs it and waits, bounded, for its line.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import select
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from core.content import TEXT_CONTENT_TYPE
from simulator.cluster import build_cluster
from simulator.monitors import loopback_address
from testing.processes import bind_one_port, stop

VARIANTS = 2
"""Passes of simulated time rendered per node; interval ``k`` serves pass ``k % VARIANTS``."""
SEED = 1
START = 1_700_000_000.0
PREPARE_TIMEOUT = 900.0
"""Seconds the monitor process may take to render every body and bind every address."""


@dataclass(frozen=True, slots=True)
class Served:
    """One node's bodies, gzipped, and the samples each holds."""

    bodies: tuple[bytes, ...]
    samples: tuple[int, ...]


def render(
    nodes: int, cards: int, allocations: int, interval: float
) -> tuple[list[dict[str, Any]], list[Served]]:
    """Every node's :data:`VARIANTS` bodies, and each node's name, flavour and samples."""
    cluster = build_cluster(nodes, seed=SEED, cards=cards, allocations_per_node=allocations,
                            start_time=START)  # fmt: skip
    described, served = [], []
    for node in cluster:
        bodies, samples = [], []
        for k in range(VARIANTS):
            now = START + (k + 1) * interval
            node.step(now)
            plain = node.exposition(now)
            samples.append(sum(1 for line in plain.splitlines() if line and line[:1] != b"#"))
            bodies.append(gzip.compress(plain, compresslevel=1, mtime=0))
        described.append({"node": node.name, "flavour": node.flavour, "samples": samples[0]})
        served.append(Served(tuple(bodies), tuple(samples)))
    return described, served


def bind_all(hosts: list[str]) -> list[socket.socket]:
    """One listening-ready socket per host, all on one port the kernel picks for the first."""
    held = bind_one_port(hosts, 5)
    if held is None:
        raise RuntimeError("no port free on every monitor address")
    return held


async def serve_monitors(nodes: int, cards: int, allocations: int, interval: float) -> None:
    """Serve every node's bodies; ``GET /stats`` on 127.0.0.1 answers what was served."""
    described, served = render(nodes, cards, allocations, interval)
    hosts = [loopback_address(i) for i in range(nodes)]
    by_host = dict(zip(hosts, served, strict=True))
    counted = {"requests": 0, "samples": 0, "plain": 0}

    async def handle(request: web.BaseRequest) -> web.Response:
        assert request.transport is not None
        node = by_host.get(request.transport.get_extra_info("sockname")[0])
        if node is None:
            return web.json_response({**counted, "cpu_s": time.process_time()})
        k = int(time.time() // interval) % VARIANTS
        counted["requests"] += 1
        counted["samples"] += node.samples[k]
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            headers = {"Content-Type": TEXT_CONTENT_TYPE, "Content-Encoding": "gzip"}
            return web.Response(body=node.bodies[k], headers=headers)
        counted["plain"] += 1
        body = gzip.decompress(node.bodies[k])
        return web.Response(body=body, headers={"Content-Type": TEXT_CONTENT_TYPE})

    runner = web.ServerRunner(web.Server(handle), handle_signals=True, access_log=None)
    await runner.setup()
    sockets = bind_all(hosts)
    control = socket.socket()
    control.bind(("127.0.0.1", 0))
    for sock in [*sockets, control]:
        await web.SockSite(runner, sock, backlog=1024).start()
    port, control_port = sockets[0].getsockname()[1], control.getsockname()[1]
    print(json.dumps({"port": port, "control": control_port, "nodes": described}), flush=True)
    try:
        await asyncio.Event().wait()  # until SIGTERM (handle_signals) ends the process
    finally:
        await runner.cleanup()


@dataclass
class Monitors:
    """The monitor process, its port and what it describes."""

    process: subprocess.Popen[bytes]
    port: int
    control: int
    nodes: list[dict[str, Any]]

    def stats(self) -> dict[str, float]:
        # a long limit: on this shared machine the busy monitor process may answer late
        with urllib.request.urlopen(f"http://127.0.0.1:{self.control}/stats", timeout=120) as r:
            stats: dict[str, float] = json.load(r)
        return stats

    def address(self, index: int) -> str:
        return f"{loopback_address(index)}:{self.port}"


def start_monitors(nodes: int, cards: int, allocations: int, interval: float) -> Monitors:
    """Start the monitor process and wait (bounded) for its description line."""
    args = [sys.executable, "-m", "bench.kit.farm", str(nodes), str(cards), str(allocations),
            str(interval)]  # fmt: skip
    process = subprocess.Popen(args, stdout=subprocess.PIPE)
    assert process.stdout is not None
    try:
        ready, _, _ = select.select([process.stdout], [], [], PREPARE_TIMEOUT)
        line = process.stdout.readline() if ready else b""
        if not line:
            raise RuntimeError(f"the monitors did not start within {PREPARE_TIMEOUT:g} s")
        described = json.loads(line)
    except BaseException:
        stop(process)
        raise
    return Monitors(process, described["port"], described["control"], described["nodes"])


if __name__ == "__main__":  # the farm's own process, started by start_monitors
    cli = argparse.ArgumentParser(prog="python -m bench.kit.farm")
    cli.add_argument("nodes", type=int)
    cli.add_argument("cards", type=int)
    cli.add_argument("allocations", type=int)
    cli.add_argument("interval", type=float)
    a = cli.parse_args()
    asyncio.run(serve_monitors(a.nodes, a.cards, a.allocations, a.interval))
