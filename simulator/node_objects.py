"""The simulated nodes as Kubernetes Node objects: what each scheduler's device plugin registers.

A HAMi v2.10 node carries ``hami.io/node-nvidia-register`` in the JSON form
(every key ``omitempty``, as ``MarshalNodeDevices`` writes it), a legacy HAMi
node the 9-field colon form of HAMi 2.5 to 2.7 with its plugin's
``Reported …`` handshake, a Volcano node ``volcano.sh/node-vgpu-register`` in
the 6-field form, and a KAI node GPU Feature Discovery's labels only (KAI
registers nothing per card). Each node's ``status.allocatable`` holds its
plugin's resources, the other half of a card's health. HAMi-DRA nodes
publish ResourceSlices instead (:mod:`simulator.pods`) and register nothing
here.

A node's ``memory_scaling`` is HAMi's ``deviceMemoryScaling``: its plugin
registers that many times each card's memory (oversubscription).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Sequence
from typing import Any

from simulator.devices import Card
from simulator.node import SimulatedNode
from simulator.workload import MIB

JSON = dict[str, Any]
SPLIT = 10
"""Tasks per card: HAMi's and Volcano's ``deviceSplitCount`` of their charts' defaults."""
REPORTED = "Reported 2026-03-18 09:12:44.434037031 +0000 UTC m=+1104711.777756895"
"""A HAMi 2.7 plugin's handshake as ``time.Now().String()`` writes it."""


def cluster_nodes(nodes: Sequence[SimulatedNode], dra: Collection[str] = ()) -> list[JSON]:
    """The Node object of every simulated node; those in ``dra`` register no card."""
    return [node_object(node, node.name in dra) for node in nodes]


def node_object(node: SimulatedNode, dra: bool = False) -> JSON:
    """``node`` as the API serves it: its scheduler's record and its allocatable resources."""
    annotations: dict[str, str] = {}
    labels = {"kubernetes.io/hostname": node.name}
    allocatable: dict[str, str] = {}
    if not dra and node.flavour == "hami":
        annotations["hami.io/node-nvidia-register"] = _hami_json(node)
        allocatable["nvidia.com/gpu"] = str(SPLIT * len(node.cards))
    elif not dra and node.flavour == "hami-legacy":
        annotations["hami.io/node-nvidia-register"] = _hami_colon(node)
        annotations["hami.io/node-handshake"] = REPORTED
        allocatable["nvidia.com/gpu"] = str(SPLIT * len(node.cards))
    elif not dra and node.flavour == "volcano":
        annotations["volcano.sh/node-vgpu-register"] = _volcano(node)
        allocatable["volcano.sh/vgpu-number"] = str(SPLIT * len(node.cards))
        allocatable["volcano.sh/vgpu-cores"] = str(100 * len(node.cards))
        allocatable["volcano.sh/vgpu-memory"] = str(sum(c.memory_total // MIB for c in node.cards))
    elif not dra and node.cards:  # KAI: GPU Feature Discovery's labels (internal/lm/resource.go)
        first = node.cards[0]
        labels["nvidia.com/gpu.count"] = str(len(node.cards))
        labels["nvidia.com/gpu.product"] = first.name.replace(" ", "-")
        labels["nvidia.com/gpu.memory"] = str(first.memory_total // MIB)
        allocatable["nvidia.com/gpu"] = str(len(node.cards))
    resources = {"cpu": "64", "memory": "528000000Ki", "pods": "110"} | allocatable
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": node.name,
            "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, f"node.{node.name}")),
            "labels": labels,
            "annotations": annotations,
            "resourceVersion": "",
        },
        "spec": {},
        "status": {"capacity": resources, "allocatable": resources},
    }


def _devmem(node: SimulatedNode, card: Card) -> int:
    return int(card.memory_total // MIB * node.memory_scaling)


def _hami_json(node: SimulatedNode) -> str:
    """v2.8+: the type prefixed only where the NVML name lacks "NVIDIA"; zero keys left out."""
    entries = []
    for card in node.cards:
        entry: JSON = {"id": card.uuid}
        if card.index:
            entry["index"] = card.index
        kind = card.name if card.name.startswith("NVIDIA") else "NVIDIA-" + card.name
        entry |= {"count": SPLIT, "devmem": _devmem(node, card), "devcore": 100, "type": kind}
        entries.append(entry | {"mode": "hami-core", "health": True})
    return json.dumps(entries, separators=(",", ":"))


def _hami_colon(node: SimulatedNode) -> str:
    """2.5 to 2.7: ``UUID,COUNT,DEVMEM,DEVCORE,TYPE,NUMA,HEALTH,INDEX,MODE:`` per card."""
    return "".join(
        f"{c.uuid},{SPLIT},{_devmem(node, c)},100,NVIDIA-{c.name},0,true,{c.index},hami-core:"
        for c in node.cards
    )


def _volcano(node: SimulatedNode) -> str:
    """``UUID,COUNT,DEVMEM,TYPE,HEALTH,MODE:`` per card, in device order (gpu-memory-factor 1)."""
    return "".join(
        f"{c.uuid},{SPLIT},{c.memory_total // MIB},NVIDIA-{c.name},true,hami-core:"
        for c in sorted(node.cards, key=lambda c: c.index)
    )
