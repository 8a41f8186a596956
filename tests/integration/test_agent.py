"""The agent: snapshots from region files and NVML, a backlog that survives a collector outage."""

from __future__ import annotations

import asyncio
import gzip
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from aiohttp import web
from helpers import eventually, holds, reserved_port

from agent.app import Sampler, regions
from agent.nvml import NvmlSampler
from agent.push import Backlog, Pusher, Queued
from agent.region_scan import scan
from core.payload import Payload
from simulator.nvml import SimulatedNvml
from simulator.regions import ProcSlot, RegionSpec, write_region

GIB = 1 << 30


def region_spec(
    uuids: list[str], used: int, sm: int = 30, last_kernel: int = 1_900_000_000
) -> RegionSpec:
    procs = [
        ProcSlot(
            pid=1,
            used=[(1, 2, used - 3 - 0, 0, used)] * len(uuids),
            device_util=[(0, 0, sm)] * len(uuids),
        ),
        ProcSlot(pid=2, used=[(0, 0, 5, 0, 5)] * len(uuids), status=0),
    ]
    return RegionSpec(
        uuids=uuids, limits=[4 * GIB] * len(uuids), procs=procs, last_kernel_time=last_kernel
    )


def test_regions_become_payload_regions(tmp_path: Path) -> None:
    write_region(
        tmp_path / "containers" / "uid-1_cuda" / "a.cache", region_spec(["GPU-a", "GPU-b"], 1000)
    )
    write_region(tmp_path / "claims" / "claim-9" / "b.cache", region_spec(["GPU-c"], 7000, sm=55))
    by_key = {(r.pod_uid, r.container, r.claim_uid): r for r in regions(scan([tmp_path]))}
    pod = by_key[("uid-1", "cuda", None)]
    assert [(d.index, d.uuid, d.memory_used, d.memory_limit) for d in pod.devices] == [
        (0, "GPU-a", 1000, 4 * GIB),
        (1, "GPU-b", 1000, 4 * GIB),
    ], "exited slots are not counted"
    assert (pod.devices[0].context, pod.devices[0].module, pod.devices[0].buffer) == (1, 2, 997)
    claim = by_key[(None, None, "claim-9")]
    assert (claim.devices[0].sm_utilization, claim.last_kernel_time) == (55, 1_900_000_000)


def test_a_snapshot_carries_cards_regions_and_a_growing_sequence(tmp_path: Path) -> None:
    write_region(tmp_path / "containers" / "uid-1_cuda" / "a.cache", region_spec(["GPU-a"], 1000))
    (tmp_path / "containers" / "garbage_x").mkdir()
    (tmp_path / "containers" / "garbage_x" / "z.cache").write_bytes(b"not a region")
    nvml = NvmlSampler(SimulatedNvml(2, seed=1))
    assert nvml.start()
    sampler = Sampler("node-a", [str(tmp_path)], None, nvml)
    first, second = sampler.snapshot(), sampler.snapshot()
    assert (first.sequence, second.sequence) == (0, 1)
    assert first.agent == second.agent
    assert first.nvml
    assert len(first.cards) == 2
    assert [r.pod_uid for r in first.regions] == ["uid-1"], "the bad file costs only its own region"
    Payload.model_validate_json(first.model_dump_json())


def test_without_nvml_the_agent_still_reports_regions(tmp_path: Path) -> None:
    write_region(tmp_path / "containers" / "uid-1_cuda" / "a.cache", region_spec(["GPU-a"], 1000))
    nvml = NvmlSampler(SimulatedNvml(2, no_driver=True))
    assert not nvml.start()
    payload = Sampler("node-a", [str(tmp_path)], None, nvml).snapshot()
    assert (payload.nvml, payload.cards, len(payload.regions)) == (False, [], 1)


def queued(seq: int, size: int = 10, taken: float = 0.0) -> Queued:
    return Queued(b"x" * size, taken, seq)


def test_backlog_drops_the_oldest_past_its_age_or_size() -> None:
    backlog = Backlog(max_age=10, max_bytes=35)
    for seq in range(3):
        backlog.append(queued(seq, taken=seq))
    assert (len(backlog), backlog.bytes, backlog.dropped) == (3, 30, 0)
    backlog.append(queued(3, taken=3))
    assert (len(backlog), backlog.dropped, backlog.oldest()) == (3, 1, queued(1, taken=1))
    backlog.append(queued(4, taken=12.5))
    assert [backlog.oldest()] == [queued(3, taken=3)], "1 and 2 are older than 10 s"
    backlog.pop()
    backlog.pop()
    assert (len(backlog), backlog.bytes) == (0, 0)


class FakeCollector:
    """Records pushed sequences; can be down (connection refused) or answer a chosen status."""

    def __init__(self, port: int) -> None:
        self.received: list[int] = []
        self.status = 204
        self.port = port
        self._runner: web.AppRunner | None = None

    async def handle(self, request: web.Request) -> web.Response:
        payload = Payload.model_validate_json(await request.read())
        assert request.headers["Authorization"] == "Bearer secret"
        if self.status != 204:
            return web.Response(status=self.status, headers={"Retry-After": "0"})
        self.received.append(payload.sequence)
        return web.Response(status=204)

    async def up(self) -> None:
        app = web.Application()
        app.router.add_post("/api/v1/push", self.handle)
        self._runner = web.AppRunner(app, shutdown_timeout=0.5)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def down(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


@pytest.fixture
def collector() -> Iterator[FakeCollector]:
    """A fake collector on a port held for the test: it goes down and comes back there."""
    with reserved_port() as port:
        yield FakeCollector(port)


@asynccontextmanager
async def pushing(collector: FakeCollector) -> AsyncIterator[Pusher]:
    pusher = Pusher(
        f"http://127.0.0.1:{collector.port}",
        lambda: "secret",
        Backlog(600, 1 << 20),
        2.0,
        (0.01, 0.05),
    )
    task = asyncio.create_task(pusher.run())
    try:
        yield pusher
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await collector.down()


def payload(seq: int) -> Payload:
    return Payload(node="node-a", agent="a1", sequence=seq, time=1_900_000_000 + seq, nvml=False)


async def test_an_outage_is_replayed_in_order_without_a_gap(collector: FakeCollector) -> None:
    await collector.up()
    async with pushing(collector) as pusher:
        pusher.submit(payload(0))
        await eventually(lambda: holds(collector.received == [0]), 5, "first push")
        await collector.down()
        pusher.submit(payload(1))
        await eventually(
            lambda: holds(pusher.stats.failed > 0), 5, "a push to the absent collector"
        )
        for seq in range(2, 20):
            pusher.submit(payload(seq))  # never blocks while the collector is away
        assert len(pusher.backlog) >= 18
        assert pusher.stats.failed > 0
        await collector.up()
        await eventually(lambda: holds(len(pusher.backlog) == 0), 10, "backlog drained")
        assert collector.received == list(range(20))


async def test_refused_for_good_is_dropped_and_the_rest_goes_on(
    collector: FakeCollector,
) -> None:
    await collector.up()
    async with pushing(collector) as pusher:
        collector.status = 400
        pusher.submit(payload(0))
        await eventually(lambda: holds(pusher.stats.refused == 1), 5, "refused")
        collector.status = 429
        pusher.submit(payload(1))
        await eventually(lambda: holds(pusher.stats.failed >= 2), 5, "retried under 429")
        assert len(pusher.backlog) == 1, "429 keeps the snapshot"
        collector.status = 204
        await eventually(lambda: holds(collector.received == [1]), 5, "sent after 429")


def test_hami_agent_sample_prints_the_snapshot(tmp_path: Path) -> None:
    write_region(tmp_path / "containers" / "uid-1_cuda" / "a.cache", region_spec(["GPU-a"], 1234))
    # --no-processes: its region's process does not run on this machine, so it would be gone
    args = ["sample", f"--roots={tmp_path}", "--no-nvml", "--node=n1", "--no-processes"]
    result = subprocess.run(
        [sys.executable, "-m", "agent", *args],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    snapshot = json.loads(result.stdout)
    assert snapshot["node"] == "n1"
    assert snapshot["regions"][0]["devices"][0]["memory_used"] == 1234


def test_hami_agent_run_needs_a_node(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "agent", "run", "--no-nvml"],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert result.returncode == 2
    assert "--node" in result.stderr


def test_pushed_bodies_are_gzipped_json() -> None:
    backlog = Backlog(600, 1 << 20)
    pusher = Pusher("http://127.0.0.1:1", lambda: None, backlog)
    pusher.submit(payload(7))
    item = backlog.oldest()
    assert item is not None
    assert Payload.model_validate_json(gzip.decompress(item.body)).sequence == 7
