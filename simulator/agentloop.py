"""The real agent on simulated inputs: the one entry point the collector's demo uses.

A simulated node writes its workload as HAMi-core region files (with the
region writer) and shows its cards through a simulated NVML; :func:`run_simulated` then runs
the agent's own sampler and pusher over them, in the caller's event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from agent.app import Sampler
from agent.nvml import NvmlSampler
from agent.push import Backlog, Pusher
from core.tasks import owned
from simulator.nvml import SimulatedCard, SimulatedNvml
from simulator.regions import ProcSlot, RegionSpec, write_region

__all__ = [
    "ProcSlot",
    "RegionSpec",
    "SimulatedCard",
    "SimulatedNvml",
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
    pusher = Pusher(collector, token, Backlog(600, 8 << 20))
    async with owned(pusher.run(), f"push {node}"):
        while True:
            step()
            pusher.submit(await asyncio.to_thread(sampler.snapshot))
            await asyncio.sleep(interval)
