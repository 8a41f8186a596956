"""The agent's footprint on a node of 8 cards and 64 regions: share of a core and resident memory.

Why: the agent runs on every GPU node, beside the jobs that pay for the node;
it should cost under 1% of one core and under 40 MiB of memory.

A real agent process (``python -m agent run --no-nvml --interval 5``) reads 64
HAMi-core region files written into a temporary root (one vGPU each, on the 8
cards of a simulated node, with :func:`simulator.regions.write_region`) and pushes to
a stub collector served by this process on 127.0.0.1 (it answers 204 and counts).
Startup is left out: the window opens when the stub receives the agent's
:data:`WARMUP_PUSHES`-th push and closes :data:`WINDOW_PUSHES` pushes later, so
it holds that many whole sample-and-push cycles. CPU is the threads' run time from
``/proc/<pid>/task/*/schedstat`` (nanoseconds; ``utime + stime`` from
``/proc/<pid>/stat`` counts 10 ms ticks, too coarse for a 25 s window, and is
reported beside it), memory ``VmRSS`` / ``VmHWM`` from ``/proc/<pid>/status``.

``--no-nvml`` skips NVML, so the snapshot is also timed in this process with
the fake NVML of 8 cards (:class:`simulator.nvml.SimulatedNvml`): the region scan,
the NVML sample, the payload and the gzip the pusher makes of it. Real NVML
calls go through the driver (ioctls), and cost more than the fake's.

Peer, same run: the same snapshot without NVML, and a bare Python process
(``python -c "import time; time.sleep(…)"``) for the floor of resident memory.
"""

from __future__ import annotations

import asyncio
import gzip
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from agent.app import Sampler
from agent.nvml import NvmlSampler
from bench.kit.columns import aligned
from bench.kit.processes import cpu_seconds, memory_mib
from simulator.cluster import build_cluster
from simulator.nvml import SimulatedNvml
from simulator.regions import ProcSlot, RegionSpec, write_region

CARDS = 8
REGIONS = 64
INTERVAL = 5.0
"""The agent's default seconds between two snapshots."""
GOAL_CORE_PERCENT = 1.0
GOAL_RSS_MIB = 40.0
WARMUP_PUSHES = 2
"""Pushes received before the window opens (startup and the first cycles left out)."""
WINDOW_PUSHES = 5
"""Sample-and-push cycles in the window: 25 s at the default interval."""
START_TIMEOUT = 30.0
SNAPSHOTS = 40
"""Snapshots timed in this process."""


def run_seconds(pid: int) -> float:
    """On-CPU seconds of every live thread of ``pid``, in ns resolution (``schedstat``)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, IndexError, ValueError):
            continue  # a thread that ended meanwhile
    return total / 1e9


def write_node(root: Path) -> list[str]:
    """Write 64 one-vGPU regions on 8 cards under ``root``; return the cards' UUIDs."""
    node = build_cluster(
        1, seed=1, cards=CARDS, allocations_per_node=REGIONS, flavours=("hami",), start_time=0
    )[0]
    for k, a in enumerate(node.allocations[:REGIONS]):
        spec = RegionSpec(
            uuids=[node.cards[a.card].uuid],
            limits=[a.limit],
            procs=[
                ProcSlot(
                    pid=100 + k,
                    hostpid=20_000 + k,
                    used=[(a.context, a.module, a.buffer, a.offset, a.used)],
                    device_util=[(0, 0, a.sm_util)],
                )
            ],
            last_kernel_time=int(time.time()),
        )
        write_region(root / "containers" / f"{a.pod_uid}_{a.container}-{k}" / "region.cache", spec)
    return [card.uuid for card in node.cards]


def snapshot_cost(root: Path, nvml: bool) -> dict[str, float]:
    """CPU per snapshot in this process (median of :data:`SNAPSHOTS`), with the pusher's gzip."""
    sampler_nvml = None
    if nvml:
        sampler_nvml = NvmlSampler(SimulatedNvml(CARDS))
        sampler_nvml.start()
    sampler = Sampler("bench-node", [str(root)], None, sampler_nvml)
    sampler.snapshot()  # warm: first reads, first model builds
    scan: list[float] = []
    total: list[float] = []
    size = 0
    regions = cards = 0
    for _ in range(SNAPSHOTS):
        t0 = time.process_time()
        payload = sampler.snapshot()
        t1 = time.process_time()
        body = gzip.compress(payload.model_dump_json(exclude_none=True).encode(), compresslevel=1)
        t2 = time.process_time()
        scan.append(t1 - t0)
        total.append(t2 - t0)
        size = len(body)
        regions, cards = len(payload.regions), len(payload.cards)
    if sampler_nvml is not None:
        sampler_nvml.close()
    per_snapshot = statistics.median(total)
    return {
        "regions": regions,
        "cards": cards,
        "snapshot_ms": statistics.median(scan) * 1e3,
        "snapshot_and_gzip_ms": per_snapshot * 1e3,
        "body_bytes_gzip": size,
        "core_percent_at_interval": per_snapshot / INTERVAL * 100,
    }


class Stub:
    """A collector that accepts every push (204) and notes when each arrived."""

    def __init__(self) -> None:
        self.arrivals: list[float] = []
        self.bytes = 0
        self.arrived = asyncio.Event()

    async def push(self, request: web.Request) -> web.Response:
        """Read the body (aiohttp inflates it), note its arrival, answer 204."""
        self.bytes += len(await request.read())
        self.arrivals.append(time.monotonic())
        self.arrived.set()
        return web.Response(status=204)

    async def wait_for(self, count: int, within: float) -> float:
        """Wait until ``count`` pushes have arrived; return when the last of them did."""
        deadline = time.monotonic() + within
        while len(self.arrivals) < count:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"{len(self.arrivals)} pushes arrived, {count} expected")
            self.arrived.clear()
            try:
                await asyncio.wait_for(self.arrived.wait(), left)
            except TimeoutError:
                continue
        return self.arrivals[count - 1]


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), 10)
        except TimeoutError:
            process.kill()
            await process.wait()


async def _bare_rss() -> float:
    """Resident MiB of a Python process that imports nothing of ours."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import time; time.sleep(5)"
    )
    try:
        await asyncio.sleep(0.5)
        return memory_mib(process.pid).get("VmRSS", 0.0)
    finally:
        await _stop(process)


async def measure(root: Path) -> dict[str, Any]:
    """Run the agent against the stub and read its CPU and memory over the window."""
    stub = Stub()
    app = web.Application()
    app.router.add_post("/api/v1/push", stub.push)
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    started = time.monotonic()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agent",
        "run",
        "--collector",
        f"http://127.0.0.1:{port}",
        "--node",
        "bench-node",
        "--roots",
        str(root),
        "--no-nvml",
        "--interval",
        str(INTERVAL),
        "--listen",
        "127.0.0.1:0",
        "--log-level",
        "warning",
    )
    try:
        pid = process.pid
        opened = await stub.wait_for(WARMUP_PUSHES, START_TIMEOUT + WARMUP_PUSHES * INTERVAL)
        cpu0, fine0 = cpu_seconds(pid), run_seconds(pid)
        startup_cpu = cpu0
        rss_open = memory_mib(pid)
        closed = await stub.wait_for(WARMUP_PUSHES + WINDOW_PUSHES, (WINDOW_PUSHES + 2) * INTERVAL)
        cpu1, fine1 = cpu_seconds(pid), run_seconds(pid)
        rss = memory_mib(pid)
    finally:
        await _stop(process)
        await runner.cleanup()
    window = closed - opened
    return {
        "pushes": len(stub.arrivals),
        "push_json_bytes_mean": stub.bytes / max(1, len(stub.arrivals)),
        "first_push_s": stub.arrivals[0] - started,
        "startup_cpu_s": startup_cpu,
        "window_s": window,
        "window_cpu_s": cpu1 - cpu0,
        "core_percent_ticks": (cpu1 - cpu0) / window * 100,
        "window_run_s": fine1 - fine0,
        "core_percent": (fine1 - fine0) / window * 100,
        "cpu_per_cycle_ms": (fine1 - fine0) / WINDOW_PUSHES * 1e3,
        "rss_mib_window_open": rss_open.get("VmRSS", 0.0),
        "rss_mib": rss.get("VmRSS", 0.0),
        "rss_mib_peak": rss.get("VmHWM", 0.0),
        "bare_python_rss_mib": await _bare_rss(),
    }


def run() -> dict[str, Any]:
    """The agent process's footprint, and one snapshot's cost in process with and without NVML."""
    with tempfile.TemporaryDirectory(prefix="bench-agent-") as folder:
        root = Path(folder)
        write_node(root)
        with_nvml = snapshot_cost(root, nvml=True)
        without_nvml = snapshot_cost(root, nvml=False)
        process = asyncio.run(measure(root))
    percent, rss = process["core_percent"], process["rss_mib"]
    return {
        "cards": CARDS,
        "regions": REGIONS,
        "interval_s": INTERVAL,
        "process": process,
        "snapshot_with_fake_nvml": with_nvml,
        "snapshot_without_nvml": without_nvml,
        "core_percent": percent,
        "rss_mib": rss,
        "goal_core_percent": GOAL_CORE_PERCENT,
        "goal_rss_mib": GOAL_RSS_MIB,
        "meets_goal": percent < GOAL_CORE_PERCENT and rss < GOAL_RSS_MIB,
    }


def table(result: dict[str, Any]) -> str:
    """A small table of the figures against their goals and peers."""
    process = result["process"]
    nvml, bare = result["snapshot_with_fake_nvml"], result["snapshot_without_nvml"]
    rows = [
        ("figure", "measured", "goal / peer"),
        (
            f"agent process, % of a core ({WINDOW_PUSHES} cycles)",
            f"{result['core_percent']:.3f}%",
            f"< {GOAL_CORE_PERCENT:g}%; {process['cpu_per_cycle_ms']:.1f} ms CPU per cycle"
            f" (ticks: {process['core_percent_ticks']:.2f}%)",
        ),
        (
            "agent process RSS MiB (peak)",
            f"{result['rss_mib']:.1f} ({process['rss_mib_peak']:.1f})",
            f"< {GOAL_RSS_MIB:g}; bare python {process['bare_python_rss_mib']:.1f}",
        ),
        (
            "snapshot + gzip ms, fake NVML (8 cards)",
            f"{nvml['snapshot_and_gzip_ms']:.2f}",
            f"= {nvml['core_percent_at_interval']:.3f}% of a core at {INTERVAL:g} s",
        ),
        (
            "snapshot + gzip ms, no NVML",
            f"{bare['snapshot_and_gzip_ms']:.2f}",
            f"{bare['regions']} regions, body {bare['body_bytes_gzip']:,} B gzipped",
        ),
        (
            "startup CPU s (to the 2nd push)",
            f"{process['startup_cpu_s']:.2f}",
            f"first push after {process['first_push_s']:.1f} s",
        ),
    ]
    lines = aligned(rows)
    lines.append(f"meets goal: {result['meets_goal']} (real NVML calls cost more than the fake's)")
    return "\n".join(lines)
