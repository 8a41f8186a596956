"""The demo's device-plugin node, end to end: the real agent pushes, the collector serves.

A whole-card pod, two pods time-sharing a card with a host process, a MIG pod
and a vGPU pod with a SIGKILLed process show their series in ``/metrics`` and
their usage next to their allocation in REST, and the card's health (an XID,
clock events, energy) is there too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
from helpers import eventually, running_demo

from collector.exposition.parse import parse
from simulator.attributed import VGPU, VGPU_PROCESSES, WORKLOADS
from simulator.run import PLUGIN_NODE


async def test_every_pod_of_the_plugin_node_shows_usage_next_to_its_allocation(
    tmp_path: Path,
) -> None:
    async with running_demo(tmp_path, 2, 1.0) as (served, lines):
        assert PLUGIN_NODE in lines[3]
        base = served
        async with aiohttp.ClientSession() as http:
            rows: list[dict[str, Any]] = []

            async def all_pods_shown() -> bool:
                nonlocal rows
                url = f"{base}/api/v1/pods?node={PLUGIN_NODE}"
                async with http.get(url) as response:
                    rows = (await response.json())["containers"]
                whole = [
                    row
                    for row in rows
                    if row["device_uuid"].startswith("GPU-") and row["pod"] != VGPU.pod
                ]
                return (
                    all(row["memory_used_bytes"] for row in rows)
                    and all(row["cores_allocated"] == 1.0 for row in whole)
                    and {row["pod"] for row in rows} >= {w.pod for w in (*WORKLOADS, VGPU)}
                )

            await eventually(all_pods_shown, 60, "every plugin pod with usage and allocation")
            by_pod = {row["pod"]: row for row in rows}
            for w in WORKLOADS:
                row = by_pod[w.pod]
                assert row["memory_used_bytes"] == w.memory, w.pod
                assert row["device_uuid"].startswith("MIG-" if w.mig_slot is not None else "GPU-")
            assert by_pod["llm-train"]["cores_allocated"] == 1.0
            assert by_pod["llm-train"]["energy_joules"] is not None
            assert by_pod["chat-a"]["device_uuid"] == by_pod["chat-b"]["device_uuid"]
            # the SIGKILLed process's 6 GiB, which HAMi's monitor would add, are not counted
            assert by_pod[VGPU.pod]["memory_used_bytes"] == sum(p.memory for p in VGPU_PROCESSES)

            text = b""

            async def health_shown() -> bool:
                nonlocal text
                async with http.get(f"{base}/metrics") as response:
                    text = await response.read()
                return b"hami_host_gpu_xid_errors_total{" in text

            await eventually(health_shown, 60, "the simulated XID in /metrics")
        names = set()
        for sample in parse(text).samples:
            labels = dict(sample.labels)
            if labels.get("node") == PLUGIN_NODE:
                names.add((sample.name, labels.get("resource_kind")))
        for expected in (
            ("hami_host_gpu_unattributed_memory_bytes", None),
            ("hami_mig_memory_used_bytes", None),
            ("hami_host_gpu_clock_event_active", None),
            ("hami_host_gpu_energy_joules_total", None),
            ("hami_host_gpu_unattributed_energy_joules_total", None),
            ("hami_vgpu_stale_memory_bytes", None),
            ("hami_container_device_utilization_source_info", None),
            ("hami_container_energy_joules_total", None),
            ("hami_container_gpu_info", "whole"),
            ("hami_container_gpu_info", "mig"),
        ):
            assert expected in names, expected
