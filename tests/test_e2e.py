"""End to end in separate processes: hami-agent pushes to hami-collector, which serves the node.

The collector attributes regions through its pod watch (the fake Kubernetes API
in this process); the agent reads region files the packer wrote.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import aiohttp
from fakekube import FakeKube, make_pod
from helpers import eventually, free_port

from agent.packer import ProcSlot, RegionSpec, write_region
from collector.exposition.parse import parse

UID = "7d2c1b4e-0000-4000-8000-00000000a001"
USED = 3 << 30


@contextmanager
def process(*args: str, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        yield proc
    finally:
        stop(proc)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    if proc.stderr is not None:
        proc.stderr.close()


@asynccontextmanager
async def cluster(tmp_path: Path) -> AsyncIterator[FakeKube]:
    async with FakeKube() as fake:
        fake.add_pod(make_pod("train-0", namespace="team-a", node="node-a", ip="10.9.0.1", uid=UID))
        fake.write_kubeconfig(tmp_path / "kubeconfig")
        yield fake


def metric(text: str, name: str, **labels: str) -> float | None:
    for sample in parse(text.encode()).samples:
        if sample.name == name and labels.items() <= dict(sample.labels).items():
            return sample.value
    return None


async def test_agent_to_collector_to_metrics_and_a_replayed_outage(tmp_path: Path) -> None:
    roots = tmp_path / "vgpu"
    spec = RegionSpec(
        uuids=["GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec"],
        limits=[8 << 30],
        procs=[ProcSlot(pid=1, used=[(1, 2, 3, 0, USED)], device_util=[(0, 0, 42)])],
        last_kernel_time=int(time.time()),
    )
    write_region(roots / "containers" / f"{UID}_cuda" / "run.cache", spec)
    (tmp_path / "token").write_text("shared-secret\n")
    port, agent_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBERNETES_", "HAMI_"))}
    collector_args = (
        "collector", "serve", f"--listen=127.0.0.1:{port}", f"--kubeconfig={tmp_path / 'kubeconfig'}",
        "--flavours=hami", "--push-auth=token", f"--push-token-file={tmp_path / 'token'}",
    )  # fmt: skip
    agent_args = (
        "agent", "run", f"--collector=http://127.0.0.1:{port}", "--node=node-a", f"--roots={roots}",
        "--no-nvml", "--interval=0.3", f"--token-file={tmp_path / 'token'}", f"--listen=127.0.0.1:{agent_port}",
    )  # fmt: skip
    async with cluster(tmp_path), aiohttp.ClientSession() as http:

        async def page(url: str) -> str:
            try:
                async with http.get(url) as resp:
                    return await resp.text()
            except aiohttp.ClientError:
                return ""

        async def served() -> bool:
            text = await page(f"http://127.0.0.1:{port}/metrics")
            value = metric(
                text,
                "hami_vgpu_memory_used_bytes",
                node="node-a",
                namespace="team-a",
                pod="train-0",
                container="cuda",
            )
            return value == USED

        async def agent(name: str) -> float:
            return metric(await page(f"http://127.0.0.1:{agent_port}/metrics"), name) or 0.0

        with process(*collector_args, env=env) as collector, process(*agent_args, env=env):
            await eventually(served, 30, "the pushed region on the collector's /metrics")
            text = await page(f"http://127.0.0.1:{port}/metrics")
            assert (
                metric(
                    text, "hami_container_device_utilization_ratio", node="node-a", pod="train-0"
                )
                == 42
            )
            assert (
                metric(text, "hami_vgpu_memory_limit_bytes", node="node-a", pod="train-0")
                == 8 << 30
            )
            stop(collector)
            await asyncio.sleep(2.0)
            assert await agent("hami_agent_backlog_snapshots") >= 3, (
                "snapshots wait while the collector is away"
            )
            with process(*collector_args, env=env):
                await eventually(served, 30, "the restarted collector serving the node again")

                async def drained() -> bool:
                    return await agent("hami_agent_backlog_snapshots") == 0

                await eventually(drained, 30, "the backlog replayed")
                taken = await agent("hami_agent_snapshots")
                accepted = await agent("hami_agent_pushes_accepted")
                assert await agent("hami_agent_backlog_dropped") == 0
                assert await agent("hami_agent_pushes_refused") == 0
                assert taken - accepted <= 1, (
                    "every snapshot but one in flight was accepted: no gap"
                )
