"""The collector's allocation series, checked by promtool, before the first kernel and joined
one to one with usage.
"""

from __future__ import annotations

import asyncio
import copy
from asyncio.subprocess import PIPE, STDOUT
from pathlib import Path

import aiohttp
from helpers import eventually, prometheus_tool, running_collector
from test_allocation import _metrics, _named

from simulator.agents import SimulatedDirectory
from simulator.cluster import build_cluster
from simulator.monitors import MonitorFarm
from simulator.pods import FRESH_NAMESPACE
from simulator.run import write_targets
from testing.fakekube import FakeKube


def _targets(farm: MonitorFarm, folder: Path) -> Path:
    path = folder / "targets.json"
    write_targets(path, farm)
    return path


async def test_allocations_appear_before_the_first_kernel_and_join_usage_one_to_one(
    fake: FakeKube, kubeconfig: Path, tmp_path: Path
) -> None:
    nodes = build_cluster(
        3, seed=5, cards=2, allocations_per_node=4, flavours=("hami", "volcano", "hami-legacy")
    )
    objects = SimulatedDirectory(nodes).objects()
    for obj in objects.pods:
        fake.add_pod(obj)
    broken = copy.deepcopy(next(p for p in objects.pods if p["spec"]["nodeName"] == nodes[0].name))
    broken["metadata"] |= {"name": "broken", "uid": "broken-uid"}
    broken["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"] = "GPU-x,NVIDIA,many,10:;"
    fake.add_pod(broken)
    async with (
        MonitorFarm(nodes) as farm,
        running_collector(
            kubernetes=True,
            kubeconfig=kubeconfig,
            flavours="hami",  # discovery finds no monitor pod: the targets file names them
            targets_file=_targets(farm, tmp_path),
            interval=0.5,
            timeout=0.45,
        ) as (base, _),
        aiohttp.ClientSession() as http,
    ):

        async def every_node_allocated_and_scraped() -> bool:
            page = await _metrics(http, base)
            got = _named(page, "hami_vgpu_memory_allocated_bytes")
            used = _named(page, "hami_vgpu_memory_used_bytes")
            scraped = all(
                used.get(labels) for labels in got if ("namespace", FRESH_NAMESPACE) not in labels
            )
            return scraped and {dict(labels)["node"] for labels in got} == {n.name for n in nodes}

        await eventually(every_node_allocated_and_scraped, 15, "every node allocated and scraped")
        page = await _metrics(http, base)
        allocated = _named(page, "hami_vgpu_memory_allocated_bytes")
        used = _named(page, "hami_vgpu_memory_used_bytes")
        # The fresh pods: allocated, usage 0, idle since they started, never a kernel.
        fresh = {labels for labels in allocated if ("namespace", FRESH_NAMESPACE) in labels}
        assert len(fresh) == len(nodes)
        for labels in fresh:
            assert used[labels] == 0
            assert _named(page, "hami_container_idle_seconds")[labels] >= 0
            assert labels not in _named(page, "hami_container_last_kernel_elapsed_seconds")
        # Every allocated vGPU has exactly one usage series with the very same labels, and
        # (every simulated pod being allocated) every usage series one allocation.
        assert set(allocated) == set(used)
        for labels in allocated:
            assert allocated[labels] > 0
            assert 0 < _named(page, "hami_vgpu_core_allocated_ratio")[labels] <= 1
        reported = {labels for labels in allocated if labels not in fresh}
        assert reported
        assert all(used[labels] > 0 for labels in reported)
        # The malformed pod was counted; its node's other pods are all there.
        errors = _named(page, "hami_usage_collector_allocation_errors_total")
        assert errors[frozenset({("reason", "number")})] == 1
        assert not any(("pod", "broken") in labels for labels in allocated)
        kinds = _named(page, "hami_container_gpu_info")
        assert {dict(labels)["resource_kind"] for labels in kinds} == {"vgpu"}

        # REST: allocation next to usage, per row and on the node's cards.
        async with http.get(f"{base}/api/v1/pods", params={"namespace": FRESH_NAMESPACE}) as resp:
            rows = (await resp.json())["containers"]
        assert len(rows) == len(nodes)
        for row in rows:
            labels = frozenset(
                {
                    ("node", row["node"]),
                    ("namespace", row["namespace"]),
                    ("pod", row["pod"]),
                    ("container", row["container"]),
                    ("vdevice_index", str(row["vdevice_index"])),
                    ("device_uuid", row["device_uuid"]),
                    ("zone", "vGPU"),
                }
            )
            assert row["memory_allocated_bytes"] == allocated[labels]
            assert row["memory_used_bytes"] == 0
            assert row["idle_seconds"] >= 0
            assert row["utilisation_of_allocation"] == {"memory": 0.0, "cores": 0.0}
        async with http.get(f"{base}/api/v1/nodes/{nodes[1].name}") as resp:
            detail = await resp.json()
        on_cards = [c for card in detail["cards"] for c in card["containers"]]
        assert on_cards
        assert all(c["memory_allocated_bytes"] > 0 for c in on_cards)
        busy = [c for c in on_cards if c["memory_used_bytes"]]
        assert busy
        assert all(
            c["utilisation_of_allocation"]["memory"]
            == c["memory_used_bytes"] / c["memory_allocated_bytes"]
            for c in busy
        )

        # The page with allocations is still valid exposition, HELP and TYPE included.
        async with http.get(f"{base}/metrics") as resp:
            raw = await resp.read()
        promtool = await asyncio.create_subprocess_exec(
            prometheus_tool("promtool"), "check", "metrics", stdin=PIPE, stdout=PIPE, stderr=STDOUT
        )
        output, _ = await asyncio.wait_for(promtool.communicate(raw), 60)
        assert promtool.returncode == 0, output.decode()
        assert b"# HELP hami_vgpu_memory_allocated_bytes " in raw

        # A deleted pod's allocation goes.
        gone = next(p for p in objects.pods if p["metadata"]["namespace"] == FRESH_NAMESPACE)
        fake.delete_pod(gone["metadata"]["namespace"], gone["metadata"]["name"])

        async def left() -> bool:
            got = _named(await _metrics(http, base), "hami_vgpu_memory_allocated_bytes")
            return not any(("pod", gone["metadata"]["name"]) in labels for labels in got)

        await eventually(left, 10, "the deleted pod's allocation to go")
