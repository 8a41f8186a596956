"""Allocation read from pod objects, and the allocation series the collector serves from them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest
from helpers import eventually, running_collector

from collector.exposition.parse import parse
from collector.normalise.allocation import MIB, Grant, parse_quantity, pod_allocation
from collector.sources.allocation_series import node_batch
from collector.sources.pods import StaticDirectory, claim_of, pod_ref, slice_devices
from simulator.agents import SimulatedDirectory, claim_uid
from simulator.cluster import build_cluster
from simulator.pods import FRESH_NAMESPACE
from testing.fakekube import FakeKube

A = "GPU-8dcd427f-483b-b48f-d7e5-75fb19a52b76"
B = "GPU-ebe7c3f7-303d-558d-435e-99a160631fe4"


def pod(
    annotations: dict[str, str] | None = None,
    containers: list[dict[str, Any]] | None = None,
    *,
    inits: list[str] = (),  # type: ignore[assignment]
    node: str = "node-a",
    phase: str = "Running",
    labels: dict[str, str] | None = None,
    uid: str = "uid-1",
    name: str = "train",
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "nodeName": node,
        "containers": containers or [{"name": "main"}, {"name": "side"}],
    }
    if inits:
        spec["initContainers"] = [{"name": n} for n in inits]
    return {
        "metadata": {
            "uid": uid,
            "namespace": "team-a",
            "name": name,
            "annotations": annotations or {},
            "labels": labels or {},
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": spec,
        "status": {"phase": phase, "startTime": "2026-01-01T00:00:10Z"},
    }


def hami(text: str, **kwargs: Any) -> dict[str, Any]:
    return pod({"hami.io/vgpu-devices-allocated": text}, **kwargs)


def test_hami_reference_example_one_device_per_container() -> None:
    got = pod_allocation(hami(f"{A},NVIDIA,500,3:;{B},NVIDIA,500,3:;"))
    assert got.errors == ()
    assert got.grants == (
        Grant("main", 0, A, 500.0 * MIB, 0.03, "vgpu"),
        Grant("side", 0, B, 500.0 * MIB, 0.03, "vgpu"),
    )


def test_hami_two_devices_give_vdevice_indexes_and_mig_suffix_is_stripped() -> None:
    got = pod_allocation(hami(f"{A}[1g.10gb-0],NVIDIA,1000,10:{B},NVIDIA,3000,30:;;"))
    assert [(g.container, g.vdevice_index, g.device_uuid, g.cores) for g in got.grants] == [
        ("main", 0, A, 0.10),
        ("main", 1, B, 0.30),
    ]


def test_hami_segments_count_init_containers_first_from_v2_9() -> None:
    text = f";{A},NVIDIA,100,25:;;"  # init, main (GPU), side
    got = pod_allocation(hami(text, inits=["setup"]))
    assert [(g.container, g.cores) for g in got.grants] == [("main", 0.25)]
    older = pod_allocation(hami(f"{A},NVIDIA,100,25:;;", inits=["setup"]))  # v2.8: no init
    assert [g.container for g in older.grants] == ["main"]


def test_the_pre_2_4_annotation_is_read_too() -> None:
    got = pod_allocation(pod({"4pd.io/vgpu-ids-new": f"{A},NVIDIA,100,100:;;"}))
    assert [(g.container, g.cores) for g in got.grants] == [("main", 1.0)]


def test_volcano_segments_belong_to_the_containers_asking_for_vgpu() -> None:
    containers: list[dict[str, Any]] = [
        {"name": "sidecar"},
        {"name": "train", "resources": {"limits": {"volcano.sh/vgpu-number": "1"}}},
        {"name": "eval", "resources": {"limits": {"volcano.sh/vgpu-memory": "1000"}}},
    ]
    text = f"{A},NVIDIA,2000,30:;{B},NVIDIA,1000,0:"
    got = pod_allocation(pod({"volcano.sh/vgpu-ids-new": text}, containers))
    assert [(g.container, g.device_uuid, g.memory, g.cores) for g in got.grants] == [
        ("train", A, 2000.0 * MIB, 0.30),
        ("eval", B, 1000.0 * MIB, 0.0),
    ]


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (f"{A},NVIDIA,500:", "fields"),
        (f"{A},NVIDIA,lots,3:", "number"),
        (f"{A},NVIDIA,500,130:", "range"),
        (f"{A},NVIDIA,-1,30:", "range"),
    ],
)
def test_a_malformed_container_segment_is_left_out_and_the_rest_kept(bad: str, reason: str) -> None:
    got = pod_allocation(hami(f"{bad};{B},NVIDIA,500,50:;"))
    assert got.errors == (reason,)
    assert [(g.container, g.device_uuid) for g in got.grants] == [("side", B)]


def test_more_segments_than_containers_is_counted_and_the_known_ones_kept() -> None:
    got = pod_allocation(hami(f"{A},NVIDIA,1,1:;{B},NVIDIA,1,1:;{A},NVIDIA,1,1:;"))
    assert got.errors == ("containers",)
    assert [g.container for g in got.grants] == ["main", "side"]


@pytest.mark.parametrize("changes", [{"phase": "Succeeded"}, {"phase": "Failed"}, {"node": ""}])
def test_no_allocation_before_binding_or_after_the_end(changes: dict[str, str]) -> None:
    assert pod_allocation(hami(f"{A},NVIDIA,1,1:;;", **changes)).grants == ()


def test_whole_cards_from_limits_without_a_sharing_annotation() -> None:
    containers = [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]
    got = pod_allocation(pod(containers=containers))
    assert got.grants == (
        Grant("main", 0, "", None, 1.0, "whole"),
        Grant("main", 1, "", None, 1.0, "whole"),
    )


def test_a_vgpu_schedulers_pod_without_its_allocation_is_not_taken_for_whole_cards() -> None:
    containers = [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
    scheduled = pod({"hami.io/vgpu-node": "node-a"}, containers)
    assert pod_allocation(scheduled).grants == ()


def test_kai_fraction_takes_its_card_from_the_reservation_pod() -> None:
    notes = {"gpu-fraction": "0.25", "gpu-fraction-num-devices": "2"}
    labels = {"runai-gpu-group/g1": "g1", "runai-gpu-group/g2": "g2"}
    user = pod(notes, labels=labels)
    reservations = [
        pod(
            {"run.ai/reserve_for_gpu_index": uuid},
            [{"name": "reserve"}],
            labels={"runai-gpu-group": group},
            uid=f"res-{group}",
            name=f"gpu-reservation-{group}",
        )
        for group, uuid in (("g1", A), ("g2", B))
    ]
    refs = {ref.uid: ref for ref in map(pod_ref, [user, *reservations])}
    (held,) = StaticDirectory(refs, {}).holdings()
    assert [
        (g.container, g.vdevice_index, g.device_uuid, g.cores, g.kind) for g in held.grants
    ] == [
        ("main", 0, A, 0.25, "fraction"),
        ("main", 1, B, 0.25, "fraction"),
    ]
    bad = pod_allocation(pod({"gpu-fraction": "1.5"}))
    assert bad.errors == ("fraction",)
    assert bad.grants == ()


def test_dra_claims_give_each_device_its_slice_uuid_and_capacity() -> None:
    user = pod(containers=[{"name": "main", "resources": {"claims": [{"name": "gpu"}]}}])
    user["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "train-main-gpu"}]
    result = {"driver": "hami-core-gpu.project-hami.io", "pool": "node-a", "device": "hami-gpu-1"}
    claim = {
        "metadata": {"name": "train-main-gpu", "uid": "claim-1"},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        result | {"consumedCapacity": {"memory": "2Gi", "cores": "30"}},
                        result | {"consumedCapacity": {"memory": "lots"}},
                    ]
                }
            },
            "reservedFor": [{"resource": "pods", "name": "train", "uid": "uid-1"}],
        },
    }
    resource_slice = {
        "spec": {
            "driver": result["driver"],
            "pool": {"name": "node-a"},
            "devices": [{"name": "hami-gpu-1", "attributes": {"uuid": {"string": B}}}],
        }
    }
    slices = dict(slice_devices(resource_slice))
    directory = StaticDirectory({"uid-1": pod_ref(user)}, {"claim-1": claim_of(claim)}, slices)
    (held,) = directory.holdings()
    assert held.grants == (Grant("main", 0, B, 2.0 * (1 << 30), 0.30, "dra"),)
    assert held.errors == ("claim",)


def test_quantities() -> None:
    assert parse_quantity("1Gi") == 1 << 30
    assert parse_quantity("1500m") == 1.5
    assert parse_quantity("2e3") == 2000
    with pytest.raises(ValueError, match="not a quantity"):
        parse_quantity("12 GB")


def test_idle_is_time_since_start_until_a_kernel_ran_and_usage_stands_in_at_zero() -> None:
    ref = pod_ref(hami(f"{A},NVIDIA,500,25:;;"))
    (held,) = StaticDirectory({ref.uid: ref}, {}).holdings()
    labels = f'container="main",device_uuid="{A}",namespace="team-a",pod="train",vdevice_index="0",zone="vGPU"'
    started = ref.started
    assert started is not None
    before = node_batch([held], {}, started + 90).series
    assert before[f"hami_container_idle_seconds{{{labels}}}".encode()] == 90
    assert before[f"hami_vgpu_memory_used_bytes{{{labels}}}".encode()] == 0
    assert before[f"hami_vgpu_core_allocated_ratio{{{labels}}}".encode()] == 0.25
    real = {
        f"hami_vgpu_memory_used_bytes{{{labels}}}".encode(): 5.0,
        f"hami_container_device_utilization_ratio{{{labels}}}".encode(): 40.0,
        f"hami_container_last_kernel_elapsed_seconds{{{labels}}}".encode(): 3.0,
    }
    after = node_batch([held], real, started + 90).series
    assert f"hami_vgpu_memory_used_bytes{{{labels}}}".encode() not in after
    assert after[f"hami_container_idle_seconds{{{labels}}}".encode()] == 3.0


# -- end to end: the fake API server's pods, the simulator's monitors ----------------------


async def _metrics(
    http: aiohttp.ClientSession, base: str
) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    async with http.get(f"{base}/metrics") as resp:
        samples = parse(await resp.read()).samples
    return {(s.name, frozenset(s.labels)): s.value for s in samples}


def _named(series: dict[Any, float], name: str) -> dict[frozenset[tuple[str, str]], float]:
    return {labels: v for (n, labels), v in series.items() if n == name}


def test_demo_claims_and_slices_resolve_dra_cards() -> None:
    nodes = build_cluster(1, seed=7, cards=2, allocations_per_node=3, flavours=("hami",))
    directory = SimulatedDirectory(nodes, dra=[nodes[0].name])
    grants = [g for held in directory.holdings() for g in held.grants]
    assert grants
    assert {g.kind for g in grants} == {"dra"}
    assert {g.device_uuid for g in grants} <= {card.uuid[:40] for card in nodes[0].cards}
    assert directory.claim_owner(
        claim_uid(nodes[0].allocations[0].pod_uid, nodes[0].allocations[0].container)
    )


async def test_a_node_with_allocations_but_no_usage_source_says_so() -> None:
    ref = pod_ref(hami(f"{A},NVIDIA,500,25:;;", node="gpu-lonely"))
    async with (
        running_collector(
            pods=StaticDirectory({ref.uid: ref}, {}), kubernetes=False, interval=0.2, timeout=0.1
        ) as (base, _),
        aiohttp.ClientSession() as http,
    ):

        async def shown() -> bool:
            page = await _metrics(http, base)
            return bool(_named(page, "hami_usage_collector_node_source_info"))

        await eventually(shown, 10, "the node on /metrics")
        page = await _metrics(http, base)
        (labels,) = _named(page, "hami_usage_collector_node_source_info")
        assert dict(labels) == {"node": "gpu-lonely", "kind": "allocation", "source": "pod watch"}
        async with http.get(f"{base}/api/v1/nodes/gpu-lonely") as resp:
            detail = await resp.json()
        assert detail["node"]["sources"] == [{"kind": "allocation", "name": "pod watch"}]
        assert detail["node"]["health"] == "unreported"
        async with http.get(f"{base}/api/v1/nodes") as resp:
            (listed,) = (await resp.json())["nodes"]
        assert listed["health"] == "unreported"
        (row,) = detail["unmatched_containers"]  # no card: nobody reports this node's cards
        assert row["memory_allocated_bytes"] == 500 * MIB
        assert row["cores_allocated"] == 0.25
        assert row["memory_used_bytes"] == 0


def test_a_kai_share_without_memory_takes_the_enforced_limit_once_reported() -> None:
    notes = {"gpu-fraction": "0.5"}
    reservation = pod(
        {"run.ai/reserve_for_gpu_index": A},
        [{"name": "reserve"}],
        labels={"runai-gpu-group": "g"},
        uid="res",
        name="gpu-reservation-g",
    )
    refs = {
        r.uid: r for r in map(pod_ref, [pod(notes, labels={"runai-gpu-group": "g"}), reservation])
    }
    (held,) = StaticDirectory(refs, {}).holdings()
    labels = f'container="main",device_uuid="{A}",namespace="team-a",pod="train",vdevice_index="0",zone="vGPU"'
    allocated = f"hami_vgpu_memory_allocated_bytes{{{labels}}}".encode()
    assert allocated not in node_batch([held], {}, 0).series
    limit = {f"hami_vgpu_memory_limit_bytes{{{labels}}}".encode(): 40.0 * MIB}
    assert node_batch([held], limit, 0).series[allocated] == 40.0 * MIB


async def test_dra_allocations_come_through_the_claim_and_slice_watches(
    fake: FakeKube, kubeconfig: Path
) -> None:
    nodes = build_cluster(1, seed=9, cards=2, allocations_per_node=3, flavours=("hami",))
    objects = SimulatedDirectory(nodes, dra=[nodes[0].name]).objects()
    for obj in objects.pods:
        fake.add_pod(obj)
    for claim in objects.claims:
        fake.add_claim(claim)
    for resource_slice in objects.slices:
        fake.add_slice(resource_slice)
    cards = {card.uuid[:40] for card in nodes[0].cards}
    async with (
        running_collector(
            kubernetes=True, kubeconfig=kubeconfig, flavours="hami", interval=0.3, timeout=0.25
        ) as (base, _),
        aiohttp.ClientSession() as http,
    ):

        async def allocated() -> bool:
            # A claim may be seen before the slice that names its card: until
            # then its device_uuid is empty, so wait for both.
            got = _named(await _metrics(http, base), "hami_vgpu_memory_allocated_bytes")
            return len(got) == sum(
                len(c["status"]["allocation"]["devices"]["results"]) for c in objects.claims
            ) and all(dict(labels)["device_uuid"] for labels in got)

        await eventually(allocated, 15, "every claimed device allocated")
        page = await _metrics(http, base)
        allocated_series = _named(page, "hami_vgpu_memory_allocated_bytes")
        assert {dict(labels)["device_uuid"] for labels in allocated_series} <= cards
        kinds = {
            dict(labels)["resource_kind"] for labels in _named(page, "hami_container_gpu_info")
        }
        assert kinds == {"dra"}
        assert any(("namespace", FRESH_NAMESPACE) in labels for labels in allocated_series)
