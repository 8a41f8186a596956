"""``hami-collector demo``: the collector on a simulated cluster, no Kubernetes needed.

Simulated monitors of every flavour serve on loopback addresses; a file_sd
targets file points the real collector at them, as an operator's would.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from aiohttp import web

from collector import logs
from collector.app import build_app
from collector.config import parse_listen
from collector.demo.monitors import MonitorFarm
from collector.demo.simulator import SimulatedNode, build_cluster
from collector.settings import CollectorSettings

DEMO_FLAVOURS = ("hami", "hami-legacy", "volcano", "kai")


def collector_flavour(simulated: str) -> str:
    """The discovery flavour of a simulated monitor (legacy HAMi is still HAMi)."""
    return "hami" if simulated.startswith("hami") else simulated


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


def run_demo(listen: str, nodes: int, interval: float) -> int:
    """Serve the demo until interrupted."""
    logs.setup("text", "info")
    host, port = parse_listen(listen)
    cluster = build_cluster(nodes, seed=1, flavours=DEMO_FLAVOURS)
    flaky = cluster[-1].name if nodes > 1 else None
    with tempfile.TemporaryDirectory(prefix="hami-demo-") as tmp:
        targets_file = Path(tmp) / "targets.json"
        settings = CollectorSettings(
            listen=listen,
            kubernetes=False,
            targets_file=targets_file,
            interval=interval,
            timeout=min(interval, 2.0),
        )
        app = build_app(settings)
        app.cleanup_ctx.insert(0, farm_context(cluster, targets_file, flaky))
        base = f"http://{host}:{port}"

        def announce(_: str) -> None:
            kinds = ", ".join(f"{n.name} ({n.flavour})" for n in cluster)
            print(f"Simulated nodes: {kinds}; flaky: {flaky or 'none'}")
            print(f"Scrape target (whole cluster): {base}/metrics")
            print(f"Health: {base}/healthz  Readiness: {base}/readyz")
            print("Ctrl-C stops the demo.", flush=True)

        web.run_app(app, host=host, port=port, print=announce)
    return 0
