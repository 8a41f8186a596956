"""``hami-collector demo``: the collector on a simulated cluster, no Kubernetes needed.

Simulated monitors of every flavour serve on loopback addresses, and a file_sd
targets file points the real collector at them, as an operator's would. Node
agents (the real agent code on simulated region files and a simulated NVML) push
for two HAMi-DRA nodes, which have no monitor at all, and for the first HAMi
node, where their readings outrank the monitor's. Every HAMi and Volcano node
registers its cards on its Node object, and every KAI node carries GPU Feature
Discovery's labels (:mod:`simulator.node_objects`), as the collector's node
watch would read them; the first HAMi node oversubscribes its memory.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import socket
import tempfile
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

from aiohttp import web

from collector.app import build_app
from collector.normalise.schema import Flavour
from collector.settings import CollectorSettings
from collector.sources.nodes import StaticNodes
from core import logs
from core.settings import parse_listen
from core.tasks import owned
from simulator.agentloop import run_attributed
from simulator.agents import SimulatedDirectory, run_agent
from simulator.attributed import AttributedNode
from simulator.cluster import build_cluster
from simulator.families import MONITORS
from simulator.monitors import MonitorFarm
from simulator.node import SimulatedNode
from simulator.node_objects import cluster_nodes
from simulator.workload import full_pod

DRA_NODES = 2
MEMORY_SCALING = 1.5
"""The first node's HAMi ``deviceMemoryScaling``: it is oversubscribed on purpose, its vGPUs
given 1.5 times its cards' memory (its node agent reads the cards' real memory, so its page
shows each card allocated past its size, and says why)."""
PLUGIN_NODE = "gpu-plugin-01"
"""The node whose pods the NVIDIA device plugin placed: only NVML and the kubelet see them."""


def collector_flavour(simulated: str) -> Flavour:
    """The discovery flavour of a simulated monitor (legacy HAMi is still HAMi)."""
    return Flavour.HAMI if simulated.startswith("hami") else Flavour(simulated)


def write_targets(path: Path, farm: MonitorFarm) -> None:
    """Write the farm's monitors as a Prometheus file_sd targets file."""
    groups = [
        {"targets": [address], "labels": {"node": node, "flavour": collector_flavour(flavour)}}
        for node, flavour, address in farm.targets()
    ]
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(groups, indent=2))
    tmp.replace(path)


def farm_context(
    nodes: list[SimulatedNode], targets_file: Path, flaky: str | None
) -> Callable[[web.Application], AsyncIterator[None]]:
    """A cleanup context that serves the simulated monitors while the app runs."""

    async def farm(app: web.Application) -> AsyncIterator[None]:
        async with MonitorFarm(nodes) as running:
            if flaky is not None:
                running.set_fault(flaky, "flaky")
            write_targets(targets_file, running)
            yield

    return farm


def agents_context(
    agents: Sequence[tuple[SimulatedNode, bool]],
    root: Path,
    collector: str,
    token: str,
    interval: float,
) -> Callable[[web.Application], AsyncIterator[None]]:
    """A cleanup context running one simulated agent per ``(node, dra)``."""

    async def agents_running(app: web.Application) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            for node, dra in agents:
                agent = run_agent(node, root / node.name, dra, collector, lambda: token, interval)
                await stack.enter_async_context(owned(agent, f"agent {node.name}"))
            yield

    return agents_running


def attributed_context(
    node: AttributedNode, collector: str, token: str, interval: float
) -> Callable[[web.Application], AsyncIterator[None]]:
    """A cleanup context running the real agent, with its kubelet, on the device plugin's node."""

    async def running(app: web.Application) -> AsyncIterator[None]:
        async with owned(run_attributed(node, collector, lambda: token, interval), node.name):
            yield

    return running


def demo_app(
    listen: str, nodes: int, interval: float, folder: Path
) -> tuple[web.Application, list[str]]:
    """The demo's app, to be served on ``listen`` (HOST:PORT), and what to tell its user.

    ``folder`` holds the targets file, the push token and the agents' region
    files while the app runs. The first line names the overview, the second the status page.
    """
    host, port = parse_listen(listen)
    cluster = build_cluster(
        nodes + DRA_NODES, seed=1, flavours=MONITORS, memory_scaling={0: MEMORY_SCALING}
    )
    monitored, dra_nodes = cluster[:nodes], cluster[nodes:]
    monitored[0].keep(full_pod(1, monitored[0].name, card=0))  # HamiVGPUMemoryNearLimit fires
    flaky = monitored[-1].name if nodes > 1 else None
    agents = [(node, True) for node in dra_nodes] + [(monitored[0], False)]
    base = f"http://{'127.0.0.1' if host == '0.0.0.0' else host}:{port}"
    targets_file = folder / "targets.json"
    token = secrets.token_hex(16)
    (folder / "push-token").write_text(token)
    settings = CollectorSettings(
        listen=listen,
        kubernetes=False,
        targets_file=targets_file,
        interval=interval,
        timeout=min(interval, 2.0),
        push_auth="token",
        push_token_file=folder / "push-token",
    )
    plugin = AttributedNode(PLUGIN_NODE, folder / "agents" / PLUGIN_NODE / "proc", seed=1)
    directory = SimulatedDirectory(cluster, dra=[n.name for n in dra_nodes], attributed=[plugin])
    registered = StaticNodes.of(cluster_nodes(cluster, [n.name for n in dra_nodes]))
    app = build_app(settings, directory, registrations=registered)
    app.cleanup_ctx.insert(0, farm_context(monitored, targets_file, flaky))
    app.cleanup_ctx.append(agents_context(agents, folder / "agents", base, token, interval))
    app.cleanup_ctx.append(attributed_context(plugin, base, token, interval))
    kinds = ", ".join(f"{n.name} ({n.flavour})" for n in monitored)
    lines = [
        f"Overview: {base}/",
        f"Status page: {base}/status",
        f"Simulated monitors: {kinds}; flaky: {flaky or 'none'}",
        f"Agents: {', '.join(n.name for n in dra_nodes)} (HAMi-DRA, no monitor), {monitored[0].name},"
        f" {PLUGIN_NODE} (NVIDIA device plugin: a whole card, time-sharing, MIG, a host process)",
        f"Oversubscribed on purpose: {monitored[0].name} (HAMi deviceMemoryScaling"
        f" {MEMORY_SCALING:g}: its vGPUs are given {MEMORY_SCALING:g} times its cards' memory)",
        f"Scrape target (whole cluster): {base}/metrics",
        f"REST: {base}/api/v1/nodes  {base}/api/v1/pods  ({base}/api/v1/openapi.json)",
        f"Chargeback: {base}/api/v1/usage?by=namespace  ({base}/api/v1/usage?format=csv)",
        f"Grafana datasource (Prometheus type) URL: {base}/prometheus",
        f"Health: {base}/healthz  Readiness: {base}/readyz",
        "Ctrl-C stops the demo.",
    ]
    return app, lines


def run_demo(sockets: list[socket.socket], nodes: int, interval: float) -> int:
    """Serve the demo on ``sockets`` (bound by the caller, so a busy port fails first) until interrupted."""
    logs.setup("text", "info")
    host, port = sockets[0].getsockname()[:2]
    listen = f"[{host}]:{port}" if sockets[0].family == socket.AF_INET6 else f"{host}:{port}"
    with tempfile.TemporaryDirectory(prefix="hami-demo-") as tmp:
        app, lines = demo_app(listen, nodes, interval, Path(tmp))

        def announce(_: str) -> None:
            print("\n".join(lines), flush=True)

        web.run_app(app, sock=sockets, print=announce)
    return 0
