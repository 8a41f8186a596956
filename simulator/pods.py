"""The simulated pods as Kubernetes objects: what the pod watch of a real cluster would list.

Each simulated node's pods carry the allocation its scheduler would have
written: HAMi's ``hami.io/vgpu-devices-allocated`` on HAMi nodes, Volcano's
``volcano.sh/vgpu-ids-new`` (with ``volcano.sh/vgpu-*`` limits) on Volcano
nodes, KAI's ``gpu-fraction`` with its reservation pods on KAI nodes, and one
ResourceClaim per container (with the nodes' ResourceSlices) on HAMi-DRA
nodes. Every node also holds one *fresh* pod: bound and allocated, but it has
not launched a kernel yet, so no monitor or agent reports it.

The nodes themselves are Node objects with their schedulers' records
(:mod:`simulator.node_objects`). The demo's directory reads these objects
through the collector's own parser, and the tests load them into the fake API
server.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from simulator.devices import Allocation
from simulator.node import SimulatedNode
from simulator.node_objects import cluster_nodes
from simulator.workload import MIB

JSON = dict[str, Any]
DRA_DRIVER = "hami-core-gpu.project-hami.io"
KAI_RESERVATION_NAMESPACE = "kai-resource-reservation"
FRESH_NAMESPACE = "team-fresh"
FRESH_CONTAINER = "cuda"


@dataclass
class Objects:
    """Pods, ResourceClaims, ResourceSlices and Nodes, as the API serves them."""

    pods: list[JSON] = field(default_factory=list)
    claims: list[JSON] = field(default_factory=list)
    slices: list[JSON] = field(default_factory=list)
    nodes: list[JSON] = field(default_factory=list)


def claim_name(pod: str, container: str) -> str:
    """The ResourceClaim a simulated HAMi-DRA container's vGPUs come from."""
    return f"{pod}-{container}-vgpu"


FRESH_CORES = 10
"""The fresh pod's SM share (percent): the room the plan leaves on card 0 holds it
(:data:`simulator.workload.HELD_ON_CARD_0_CORES`)."""


def fresh_pod(node: SimulatedNode) -> Allocation:
    """The node's pod that holds a vGPU of card 0 but has not run a kernel yet."""
    rng = random.Random(f"fresh|{node.seed}|{node.name}")
    uid = f"{rng.getrandbits(32):08x}-0000-4000-8000-{rng.getrandbits(48):012x}"
    return Allocation(
        namespace=FRESH_NAMESPACE,
        pod=f"fresh-{node.name}",
        pod_uid=uid,
        container=FRESH_CONTAINER,
        card=0,
        vdevice_index=0,
        limit=4096 * MIB,
        used=0,
        context=0,
        module=0,
        buffer=0,
        sm_util=0,
        last_kernel_time=None,
        cores=FRESH_CORES,
    )


def cluster_objects(
    nodes: Sequence[SimulatedNode],
    dra: Collection[str],
    born: Callable[[str], float],
    claim_uid: Callable[[str, str], str],
) -> Objects:
    """Every simulated pod (fresh ones included), claim, slice and node; ``born(uid)`` is a
    pod's start."""
    out = Objects(nodes=cluster_nodes(nodes, dra))
    for node in nodes:
        by_pod: dict[str, list[Allocation]] = {}
        for a in node.allocations:
            by_pod.setdefault(a.pod_uid, []).append(a)
        if node.cards:
            fresh = fresh_pod(node)
            by_pod[fresh.pod_uid] = [fresh]
        for allocations in by_pod.values():
            pod = _pod(node, allocations, born(allocations[0].pod_uid))
            if node.name in dra:
                out.claims.extend(_claims(node, allocations, pod, claim_uid))
            elif node.flavour.startswith("hami"):
                _hami(pod, node, allocations)
            elif node.flavour == "volcano":
                _volcano(pod, node, allocations)
            else:
                out.pods.extend(_kai(pod, node, allocations))
            out.pods.append(pod)
        if node.name in dra:
            out.slices.append(_slice(node))
    return out


def _stamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _containers(allocations: Sequence[Allocation]) -> dict[str, list[Allocation]]:
    """Allocations by container, containers in order of appearance, vGPUs by index."""
    out: dict[str, list[Allocation]] = {}
    for a in allocations:
        out.setdefault(a.container, []).append(a)
    for vgpus in out.values():
        vgpus.sort(key=lambda a: a.vdevice_index)
    return out


def _pod(node: SimulatedNode, allocations: Sequence[Allocation], started: float) -> JSON:
    first = allocations[0]
    containers = [{"name": name, "image": "cuda"} for name in _containers(allocations)]
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": first.pod,
            "namespace": first.namespace,
            "uid": first.pod_uid,
            "labels": {},
            "annotations": {},
            "creationTimestamp": _stamp(started),
            "resourceVersion": "",
        },
        "spec": {"nodeName": node.name, "containers": containers},
        "status": {"phase": "Running", "startTime": _stamp(started)},
    }


def _tuple(node: SimulatedNode, a: Allocation) -> str:
    return f"{node.cards[a.card].uuid},NVIDIA,{a.limit // MIB},{a.cores}:"


def _hami(pod: JSON, node: SimulatedNode, allocations: Sequence[Allocation]) -> None:
    text = "".join(
        "".join(_tuple(node, a) for a in vgpus) + ";" for vgpus in _containers(allocations).values()
    )
    pod["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"] = text
    pod["metadata"]["annotations"]["hami.io/vgpu-node"] = node.name


def _volcano(pod: JSON, node: SimulatedNode, allocations: Sequence[Allocation]) -> None:
    by_container = _containers(allocations)
    segments = ["".join(_tuple(node, a) for a in vgpus) for vgpus in by_container.values()]
    pod["metadata"]["annotations"]["volcano.sh/vgpu-ids-new"] = ";".join(segments)
    for container in pod["spec"]["containers"]:
        count = len(by_container[container["name"]])
        container["resources"] = {"limits": {"volcano.sh/vgpu-number": str(count)}}


def _kai(pod: JSON, node: SimulatedNode, allocations: Sequence[Allocation]) -> list[JSON]:
    """KAI shares one container's devices by fraction; other containers get nothing from it.

    The fraction is the vGPU's share of the card (of its memory where it has no SM
    share), so a card's fractions sum to at most the whole card. Returns the
    reservation pods (one per device group) that name the cards.
    """
    container, vgpus = next(iter(_containers(allocations).items()))
    first = vgpus[0]
    share = first.cores / 100 if first.cores else first.limit / node.cards[first.card].memory_total
    notes = pod["metadata"]["annotations"]
    notes["gpu-fraction"] = f"{min(1.0, max(0.01, share)):.2f}"
    notes["gpu-fraction-num-devices"] = str(len(vgpus))
    notes["gpu-fraction-container-name"] = container
    reservations = []
    for a in vgpus:
        group = f"{a.pod_uid[:8]}-{a.vdevice_index}"
        pod["metadata"]["labels"][f"runai-gpu-group/{group}"] = group
        reservation = _pod(node, [a], 0.0)
        reservation["metadata"] |= {
            "name": f"gpu-reservation-{node.name}-{group}",
            "namespace": KAI_RESERVATION_NAMESPACE,
            "uid": f"{a.pod_uid[:-4]}{a.vdevice_index:04d}",
            "labels": {"runai-gpu-group": group},
            "annotations": {"run.ai/reserve_for_gpu_index": node.cards[a.card].uuid},
        }
        reservations.append(reservation)
    return reservations


def _claims(
    node: SimulatedNode,
    allocations: Sequence[Allocation],
    pod: JSON,
    claim_uid: Callable[[str, str], str],
) -> list[JSON]:
    claims = []
    meta = pod["metadata"]
    for container, vgpus in _containers(allocations).items():
        name = claim_name(meta["name"], container)
        ref = f"gpu-{container}"
        pod["spec"].setdefault("resourceClaims", []).append(
            {"name": ref, "resourceClaimName": name}
        )
        for spec in pod["spec"]["containers"]:
            if spec["name"] == container:
                spec["resources"] = {"claims": [{"name": ref}]}
        results = [
            {
                "request": "gpu",
                "driver": DRA_DRIVER,
                "pool": node.name,
                "device": f"hami-gpu-{a.card}",
                "consumedCapacity": {"memory": str(a.limit), "cores": str(a.cores)},
            }
            for a in vgpus
        ]
        claims.append(
            {
                "kind": "ResourceClaim",
                "apiVersion": "resource.k8s.io/v1",
                "metadata": {
                    "name": name,
                    "namespace": meta["namespace"],
                    "uid": claim_uid(meta["uid"], container),
                    "creationTimestamp": meta["creationTimestamp"],
                    "resourceVersion": "",
                },
                "spec": {"devices": {"requests": [{"name": "gpu"}]}},
                "status": {
                    "allocation": {"devices": {"results": results}},
                    "reservedFor": [{"resource": "pods", "name": meta["name"], "uid": meta["uid"]}],
                },
            }
        )
    return claims


def _slice(node: SimulatedNode) -> JSON:
    devices = [
        {"name": f"hami-gpu-{card.index}", "attributes": {"uuid": {"string": card.uuid}}}
        for card in node.cards
    ]
    return {
        "kind": "ResourceSlice",
        "apiVersion": "resource.k8s.io/v1",
        "metadata": {"name": f"{node.name}-{DRA_DRIVER}", "uid": f"slice-{node.name}"},
        "spec": {"driver": DRA_DRIVER, "pool": {"name": node.name}, "devices": devices},
    }
