"""The real agent on simulated inputs: the one entry point the collector's demo uses.

A simulated node writes its workload as HAMi-core region files (with the
region writer) and shows its cards through a simulated NVML; :func:`run_simulated` then runs
the agent's own sampler and pusher over them, in the caller's event loop.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from agent.app import Sampler, watch_xid
from agent.cgroups import ProcOwners
from agent.kubelet import PodResourcesReader
from agent.nvml import NvmlSampler
from agent.push import Backlog, Pusher
from agent.slots import SlotChecker
from agent.xid import XidWatcher
from core.tasks import owned
from simulator.attributed import AttributedNode
from simulator.kubelet import KubeletServer
from simulator.nvml import SimulatedCard, SimulatedNvml
from simulator.regions import ProcSlot, RegionSpec, write_region

__all__ = [
    "ProcSlot",
    "RegionSpec",
    "SimulatedCard",
    "SimulatedNvml",
    "run_attributed",
    "run_simulated",
    "write_region",
]


async def run_simulated(
    node: str,
    root: Path,
    nvml: SimulatedNvml,
    collector: str,
    token: Callable[[], str | None],
    interval: float,
    step: Callable[[], None],
) -> None:
    """Sample ``root`` and ``nvml`` and push to ``collector`` every ``interval``, until cancelled.

    ``step`` runs before each sample: it moves the simulation on and rewrites
    the region files and the simulated NVML's cards.
    """
    sampler_nvml = NvmlSampler(nvml)
    sampler_nvml.start()
    sampler = Sampler(node, [str(root)], None, sampler_nvml)
    await push_snapshots(sampler, collector, token, interval, step)


async def run_attributed(
    node: AttributedNode, collector: str, token: Callable[[], str | None], interval: float
) -> None:
    """The real agent on a node of the NVIDIA device plugin, with its kubelet, until cancelled.

    The agent attributes the node's processes through its ``/proc``, checks its
    HAMi-core slots' processes there, reads its kubelet's PodResources over a
    real gRPC socket and watches its XID events.
    """
    nvml = NvmlSampler(node.nvml)
    nvml.start()
    with tempfile.TemporaryDirectory(dir="/tmp") as short:  # a socket path has 108 bytes at most
        server = KubeletServer(os.path.join(short, "kubelet.sock"), node.kubelet)
        server.start()
        reader = PodResourcesReader(server.socket, nvml.device_uuid)
        xid = XidWatcher(node.nvml)
        roots = [str(node.regions)]
        slots = SlotChecker(node.proc)
        sampler = Sampler(
            node.name, roots, None, nvml, ProcOwners(node.proc), reader, xid, slots=slots
        )
        try:
            async with owned(watch_xid(xid), f"xid events {node.name}"):
                await asyncio.to_thread(xid.ready.wait, 10.0)  # the first step posts an XID
                await push_snapshots(
                    sampler, collector, token, interval, lambda: node.step(time.time())
                )
        finally:
            sampler.close()
            server.stop()


async def push_snapshots(
    sampler: Sampler,
    collector: str,
    token: Callable[[], str | None],
    interval: float,
    step: Callable[[], None],
) -> None:
    """Step, sample and push every ``interval`` until cancelled."""
    pusher = Pusher(collector, token, Backlog(600, 8 << 20))
    async with owned(pusher.run(), f"push {sampler.node}"):
        while True:
            step()
            pusher.submit(await asyncio.to_thread(sampler.snapshot))
            await asyncio.sleep(interval)
