"""NVML's per-process view, the card's health and MIG instances become series that join allocation.

A whole-card pod, two pods time-sharing a card, a MIG pod and a host process:
each gets the series a user expects, with exactly the labels of its allocation,
whatever put the pod on the card.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from collector.exposition.parse import parse_series
from collector.normalise import labelsets, schema
from collector.normalise.allocation import Grant
from collector.sources.allocation_series import node_batch
from collector.sources.kubelet_devices import Assignments
from collector.sources.pods import StaticDirectory, pod_ref
from collector.sources.push import SeriesKeys, to_batch
from core.payload import Assignment, Card, ContainerUsage, Device, Mig, Payload, Region

NODE = "gpu-a"
CARD0 = "GPU-00000000-0000-0000-0000-000000000000"
CARD1 = "GPU-11111111-1111-1111-1111-111111111111"
MIG1 = "MIG-22222222-2222-2222-2222-222222222222"
IDS = {name: f"{i:064x}" for i, name in enumerate(["train", "a", "b", "mig", "hami"], 1)}


def pod(
    uid: str, name: str, container: str, limits: Mapping[str, str], notes: Mapping[str, str] = {}
) -> dict[str, Any]:
    return {
        "metadata": {"uid": uid, "namespace": "ml", "name": name, "annotations": dict(notes)},
        "spec": {
            "nodeName": NODE,
            "containers": [{"name": container, "resources": {"limits": dict(limits)}}],
        },
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {"name": container, "containerID": f"containerd://{IDS[container]}"}
            ],
        },
    }


PODS = [
    pod("u-train", "train", "train", {"nvidia.com/gpu": "1"}),
    pod("u-a", "share-a", "a", {"nvidia.com/gpu": "1"}),
    pod("u-b", "share-b", "b", {"nvidia.com/gpu": "1"}),
    pod("u-mig", "mig", "mig", {"nvidia.com/mig-1g.10gb": "1"}),
    pod(
        "u-hami",
        "hami",
        "hami",
        {"nvidia.com/gpu": "1"},
        {"hami.io/vgpu-devices-allocated": f"{CARD1},NVIDIA,4096,30:;"},
    ),
]
DIRECTORY = StaticDirectory({p["metadata"]["uid"]: pod_ref(p) for p in PODS}, {})


def usage(device: str, uid: str | None, container: str | None, **kw: Any) -> ContainerUsage:
    cid = IDS[container] if container else None
    return ContainerUsage(device=device, pod_uid=uid, container_id=cid, processes=1, **kw)


def payload() -> Payload:
    cards = [
        Card(
            index=0,
            uuid=CARD0,
            name="NVIDIA H200",
            energy=1000.0,
            idle_energy=100.0,
            ecc_corrected=7,
            ecc_uncorrected=0,
            clock_events=0x4 | 0x40,
            xid_errors={79: 2},
        ),
        Card(
            index=1,
            uuid=CARD1,
            name="NVIDIA A100",
            mig=[
                Mig(
                    uuid=MIG1,
                    gpu_instance_id=1,
                    compute_instance_id=0,
                    profile="1g.10gb",
                    memory_used=3 << 30,
                    memory_total=10 << 30,
                )
            ],
        ),
    ]
    processes = [
        usage(CARD0, "u-train", "train", memory_used=40 << 30, utilization=60.0, energy=500.0),
        usage(CARD1, "u-a", "a", memory_used=1 << 30, utilization=20.0, energy=10.0),
        usage(CARD1, "u-b", "b", memory_used=2 << 30, utilization=30.0, energy=15.0),
        usage(MIG1, "u-mig", "mig", memory_used=3 << 30),
        usage(CARD1, "u-hami", "hami", memory_used=9 << 30, utilization=99.0, energy=5.0),
        usage(CARD0, None, None, memory_used=1 << 30),
        usage(CARD0, "u-gone", "train", memory_used=2 << 30),
    ]
    assignments = [
        Assignment(
            namespace="ml",
            pod="train",
            container="train",
            resource="nvidia.com/gpu",
            devices=[CARD0],
        ),
        Assignment(
            namespace="ml",
            pod="mig",
            container="mig",
            resource="nvidia.com/mig-1g.10gb",
            devices=[MIG1],
        ),
    ]
    region = Region(
        pod_uid="u-hami",
        container="hami",
        devices=[Device(index=0, uuid=CARD1, memory_used=4 << 30, memory_limit=4 << 30)],
    )
    return Payload(
        node=NODE,
        agent="a1",
        sequence=1,
        time=1.7e9,
        nvml=True,
        cards=cards,
        regions=[region],
        processes=processes,
        assignments=assignments,
    )


def series() -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    batch, _ = to_batch(payload(), DIRECTORY, SeriesKeys())
    return {
        (name, frozenset(labels)): value
        for key, value in batch.series.items()
        for name, labels in [parse_series(key)]
    }


def vgpu(pod: str, container: str, uuid: str, index: int = 0) -> frozenset[tuple[str, str]]:
    return frozenset(labelsets.vgpu("ml", pod, container, index, uuid))


def test_every_container_with_a_process_gets_usage_with_its_allocation_s_labels() -> None:
    got = series()
    assert got[(schema.CONTAINER_MEMORY, vgpu("train", "train", CARD0))] == 40 << 30
    assert got[(schema.VGPU_UTILIZATION, vgpu("train", "train", CARD0))] == 60.0
    assert got[(schema.CONTAINER_ENERGY, vgpu("train", "train", CARD0))] == 500.0
    # two pods time-sharing one card: each its own, never the card's value copied
    assert got[(schema.CONTAINER_MEMORY, vgpu("share-a", "a", CARD1))] == 1 << 30
    assert got[(schema.CONTAINER_MEMORY, vgpu("share-b", "b", CARD1))] == 2 << 30
    assert got[(schema.VGPU_UTILIZATION, vgpu("share-b", "b", CARD1))] == 30.0
    # MIG: memory without utilisation (NVML has none per process there)
    assert got[(schema.CONTAINER_MEMORY, vgpu("mig", "mig", MIG1))] == 3 << 30
    assert (schema.VGPU_UTILIZATION, vgpu("mig", "mig", MIG1)) not in got


def test_hami_core_s_region_wins_for_its_container_and_the_process_view_adds_energy() -> None:
    got = series()
    hami = vgpu("hami", "hami", CARD1)
    assert got[(schema.CONTAINER_MEMORY, hami)] == 4 << 30  # the region's, not NVML's 9 GiB
    assert (schema.VGPU_UTILIZATION, hami) in got
    assert got[(schema.VGPU_UTILIZATION, hami)] == 0.0  # the region's
    assert got[(schema.CONTAINER_ENERGY, hami)] == 5.0


def test_memory_of_no_pod_the_cluster_has_is_unattributed_per_device() -> None:
    got = series()
    card0 = frozenset(labelsets.device(CARD0))
    assert got[(schema.UNATTRIBUTED_MEMORY, card0)] == 3 << 30  # a host process + a gone pod
    assert got[(schema.UNATTRIBUTED_MEMORY, frozenset(labelsets.device(CARD1)))] == 0


def test_health_energy_and_mig_series_of_a_card() -> None:
    got = series()
    card0 = labelsets.card(0, "NVIDIA H200", CARD0)
    assert got[(schema.ENERGY, frozenset(card0))] == 1000.0
    assert got[(schema.IDLE_ENERGY, frozenset(card0))] == 100.0
    assert got[(schema.ECC_ERRORS, frozenset((*card0, ("type", "corrected"))))] == 7
    assert got[(schema.ECC_ERRORS, frozenset((*card0, ("type", "uncorrected"))))] == 0
    assert got[(schema.XID_ERRORS, frozenset((*card0, ("xid", "79"))))] == 2
    reasons = {
        dict(labels)["reason"]: v for (name, labels), v in got.items() if name == schema.CLOCK_EVENT
    }
    assert reasons["sw_power_cap"] == reasons["hw_thermal_slowdown"] == 1
    assert reasons["hw_power_brake_slowdown"] == reasons["gpu_idle"] == 0
    # a card that does not read energy or ECC has no such series: absent, not 0
    card1 = frozenset(labelsets.card(1, "NVIDIA A100", CARD1))
    assert (schema.ENERGY, card1) not in got
    assert not [k for k in got if k[0] == schema.ECC_ERRORS and k[1] >= card1]
    mig = frozenset(labelsets.mig(CARD1, MIG1, 1, 0, "1g.10gb"))
    assert got[(schema.MIG_MEMORY_USED, mig)] == 3 << 30
    assert got[(schema.MIG_MEMORY_TOTAL, mig)] == 10 << 30
    assert dict(mig)["device_uuid"] == CARD1


def test_whole_card_and_mig_allocations_carry_the_kubelet_s_device_uuid() -> None:
    assignments = Assignments()
    assignments.put(NODE, payload().assignments or [])
    filled = {
        h.pod.name: assignments.fill(h.pod.namespace, h.pod.name, h.grants)
        for h in DIRECTORY.holdings()
    }
    assert filled["train"] == (Grant("train", 0, CARD0, None, 1.0, "whole"),)
    assert filled["mig"] == (Grant("mig", 0, MIG1, None, None, "mig"),)
    assert filled["share-a"][0].device_uuid == ""  # its kubelet said nothing
    assert filled["hami"][0].device_uuid == CARD1  # the annotation's, untouched
    held = [h for h in DIRECTORY.holdings() if h.pod.name in ("train", "mig")]
    batch = node_batch(
        [
            type(h)(h.pod, assignments.fill(h.pod.namespace, h.pod.name, h.grants), h.errors)
            for h in held
        ],
        {},
        0.0,
    )
    kinds = {
        dict(parse_series(k)[1])["resource_kind"]
        for k in batch.series
        if k.startswith(schema.GPU_INFO.encode())
    }
    assert kinds == {"whole", "mig"}
    used = series()
    for key in batch.series:
        name, labels = parse_series(key)
        if name == schema.CORE_ALLOCATED:  # the whole card's: joins its usage one to one
            assert (schema.CONTAINER_MEMORY, frozenset(labels)) in used
    assignments.forget(NODE)
    assert assignments.devices("ml", "train", "train") == ()


def test_a_container_the_pod_watch_does_not_know_by_id_is_dropped_and_counted() -> None:
    base = payload()
    stranger = usage(CARD0, "u-train", "a", memory_used=1)  # container ID of another pod's
    batch, _ = to_batch(base.model_copy(update={"processes": [stranger]}), DIRECTORY, SeriesKeys())
    assert batch.dropped == 1
    assert not [k for k in batch.series if b'pod="train"' in k]


def test_the_agent_s_checks_become_series_of_their_own() -> None:
    base = payload()
    cards = [base.cards[0].model_copy(update={"unattributed_energy": 42.0}), *base.cards[1:]]
    checked = Device(
        index=0,
        uuid=CARD1,
        memory_used=4 << 30,
        memory_limit=4 << 30,
        sm_utilization=35.0,
        utilization_source="nvml",
        stale_memory=6 << 30,
    )
    region = base.regions[0].model_copy(update={"devices": [checked]})
    batch, _ = to_batch(
        base.model_copy(update={"cards": cards, "regions": [region]}), DIRECTORY, SeriesKeys()
    )
    got = {
        (name, frozenset(labels)): value
        for key, value in batch.series.items()
        for name, labels in [parse_series(key)]
    }
    hami = vgpu("hami", "hami", CARD1)
    assert got[(schema.VGPU_UTILIZATION, hami)] == 35.0  # the same series, whichever source
    assert got[(schema.UTILIZATION_SOURCE, hami | {("source", "nvml")})] == 1
    assert got[(schema.STALE_MEMORY, hami)] == 6 << 30
    card0 = frozenset(labelsets.card(0, "NVIDIA H200", CARD0))
    assert got[(schema.UNATTRIBUTED_ENERGY, card0)] == 42.0
    # the process view's containers say their utilisation is NVML's
    assert got[(schema.UTILIZATION_SOURCE, vgpu("share-a", "a", CARD1) | {("source", "nvml")})]
    # and the unowned region's checks are dropped with it
    gone = region.model_copy(update={"pod_uid": "u-gone"})
    dropped, _ = to_batch(base.model_copy(update={"regions": [gone]}), DIRECTORY, SeriesKeys())
    assert dropped.dropped == len(schema.VGPU_FAMILIES) + 2


def test_an_older_agent_s_push_is_accepted_and_says_nothing_it_did_not_check() -> None:
    """A payload as agents sent it before the checks: no field of theirs, and no series."""
    body = {
        "version": 1,
        "node": NODE,
        "agent": "old",
        "sequence": 3,
        "time": 1.7e9,
        "nvml": True,
        "cards": [
            {"index": 0, "uuid": CARD1, "name": "NVIDIA A100", "energy": 5.0, "idle_energy": 1.0}
        ],
        "regions": [
            {
                "pod_uid": "u-hami",
                "container": "hami",
                "devices": [
                    {
                        "index": 0,
                        "uuid": CARD1,
                        "memory_used": 1,
                        "memory_limit": 2,
                        "sm_utilization": 140,
                    }
                ],
            }
        ],
    }
    old = Payload.model_validate_json(json.dumps(body))
    batch, unowned = to_batch(old, DIRECTORY, SeriesKeys())
    names = {parse_series(key)[0] for key in batch.series}
    assert unowned == 0
    assert schema.VGPU_UTILIZATION in names
    assert not names & set(schema.AGENT_CHECK_FAMILIES)
