"""End to end in separate processes: hami-agent pushes to hami-collector, which serves the node.

The collector attributes regions through its pod watch (the fake Kubernetes API
in this process); the agent reads region files the region writer wrote.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import aiohttp
from helpers import eventually, program, reserved_port

from collector.exposition.parse import parse
from simulator.attributed import ProcTree
from simulator.regions import ProcSlot, RegionSpec, write_region
from testing.fakekube import FakeKube, make_pod

UID = "7d2c1b4e-0000-4000-8000-00000000a001"
USED = 3 << 30


def metric(text: str, name: str, **labels: str) -> float | None:
    for sample in parse(text.encode()).samples:
        if sample.name == name and labels.items() <= dict(sample.labels).items():
            return sample.value
    return None


async def test_agent_to_collector_to_metrics_and_a_replayed_outage(
    fake: FakeKube, kubeconfig: Path, tmp_path: Path
) -> None:
    fake.add_pod(make_pod("train-0", namespace="team-a", node="node-a", ip="10.9.0.1", uid=UID))
    roots = tmp_path / "vgpu"
    spec = RegionSpec(
        uuids=["GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec"],
        limits=[8 << 30],
        procs=[ProcSlot(pid=1, used=[(1, 2, 3, 0, USED)], device_util=[(0, 0, 42)])],
        last_kernel_time=int(time.time()),
    )
    write_region(roots / "containers" / f"{UID}_cuda" / "run.cache", spec)
    # the host's /proc, where the agent finds the slot's process (PID 1 in its container)
    proc = ProcTree(tmp_path / "proc")
    cgroup = f"0::/kubepods/burstable/pod{UID}/{'c' * 64}\n"
    proc.add(4242, "python3", cgroup, nspid=(4242, 1))
    (tmp_path / "token").write_text("shared-secret\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBERNETES_", "HAMI_"))}
    # The collector restarts at the address the agent pushes to: that port is held meanwhile.
    with reserved_port() as port:
        collector_args = (
            "collector", "serve", f"--listen=127.0.0.1:{port}", f"--kubeconfig={kubeconfig}",
            "--flavours=hami", "--push-auth=token", f"--push-token-file={tmp_path / 'token'}",
        )  # fmt: skip
        agent_args = (
            "agent", "run", f"--collector=http://127.0.0.1:{port}", "--node=node-a", f"--roots={roots}",
            "--no-nvml", "--interval=0.3", f"--token-file={tmp_path / 'token'}", "--listen=127.0.0.1:0",
            f"--host-proc={proc.root}",
        )  # fmt: skip
        async with aiohttp.ClientSession() as http:
            await outage_and_replay(http, collector_args, agent_args, env)


async def outage_and_replay(
    http: aiohttp.ClientSession,
    collector_args: tuple[str, ...],
    agent_args: tuple[str, ...],
    env: dict[str, str],
) -> None:
    """Serve the pushed region, stop the collector, start it again: the backlog is replayed."""

    async def page(url: str) -> str:
        try:
            async with http.get(url) as resp:
                return await resp.text()
        except aiohttp.ClientError:
            return ""

    with program(*collector_args, env=env) as collector, program(*agent_args, env=env) as agent:
        base, agent_url = await collector.url(), await agent.url()

        async def served() -> bool:
            text = await page(f"{base}/metrics")
            value = metric(
                text,
                "hami_vgpu_memory_used_bytes",
                node="node-a",
                namespace="team-a",
                pod="train-0",
                container="cuda",
            )
            return value == USED

        async def gauge(name: str) -> float:
            return metric(await page(f"{agent_url}/metrics"), name) or 0.0

        await eventually(served, 30, "the pushed region on the collector's /metrics")
        text = await page(f"{base}/metrics")
        assert (
            metric(text, "hami_container_device_utilization_ratio", node="node-a", pod="train-0")
            == 42
        )
        assert metric(text, "hami_vgpu_memory_limit_bytes", node="node-a", pod="train-0") == 8 << 30
        # the slot's process was found in the host's /proc: checked, nothing stale
        assert metric(text, "hami_vgpu_stale_memory_bytes", node="node-a", pod="train-0") == 0
        collector.stop()

        async def waiting() -> bool:
            return await gauge("hami_agent_backlog_snapshots") >= 3

        await eventually(waiting, 30, "snapshots waiting while the collector is away")
        with program(*collector_args, env=env) as restarted:
            assert await restarted.url() == base
            await eventually(served, 30, "the restarted collector serving the node again")

            async def drained() -> bool:
                return await gauge("hami_agent_backlog_snapshots") == 0

            await eventually(drained, 30, "the backlog replayed")
            taken = await gauge("hami_agent_snapshots")
            accepted = await gauge("hami_agent_pushes_accepted")
            assert await gauge("hami_agent_backlog_dropped") == 0
            assert await gauge("hami_agent_pushes_refused") == 0
            assert taken - accepted <= 1, "every snapshot but one in flight was accepted: no gap"
