"""The tests' oracle: which canonical series a correct collector outputs for a simulated node.

Written from the reference tables, independently of the simulated monitors'
own rendering (:mod:`simulator.expositions`), so a test compares two
implementations: what the collector makes of a node's exposition, and what
this module says it should make of the node's state.
"""

from __future__ import annotations

import math

from simulator.devices import Allocation, Card
from simulator.families import BUILD_INFO
from simulator.node import WEIRD_SUFFIX, SimulatedNode

SeriesKey = tuple[str, frozenset[tuple[str, str]]]
"""A series identity: metric name plus its full label set."""

Series = dict[SeriesKey, float]


def _put(result: Series, node: str, name: str, labels: dict[str, str], value: float) -> None:
    full = dict(labels)
    full["node"] = node
    result[(name, frozenset(full.items()))] = float(value)


def _host_series(result: Series, node: SimulatedNode, card: Card) -> None:
    host = {
        "device_index": str(card.index),
        "device_uuid": card.uuid[:40],
        "zone": "vGPU",
    }
    if node.flavour != "volcano":
        host["device_type"] = "NVIDIA-" + card.name
    _put(result, node.name, "hami_host_gpu_memory_used_bytes", host, card.memory_used)
    _put(result, node.name, "hami_host_gpu_utilization_ratio", host, card.utilization)
    if node.flavour == "hami":
        _put(
            result,
            node.name,
            "hami_host_gpu_memory_controller_utilization_ratio",
            host,
            card.memory_controller_utilization,
        )


def _container_labels(node: SimulatedNode, a: Allocation, device_uuid: str) -> dict[str, str]:
    namespace, pod, container = a.namespace, a.pod, a.container
    if node.weird_labels:
        namespace += WEIRD_SUFFIX
        pod += WEIRD_SUFFIX
        container += WEIRD_SUFFIX
    return {
        "namespace": namespace,
        "pod": pod,
        "container": container,
        "vdevice_index": str(a.vdevice_index),
        "device_uuid": device_uuid,
        "zone": "vGPU",
    }


def _container_series(
    result: Series, node: SimulatedNode, a: Allocation, device_uuid: str, now: float
) -> None:
    labels = _container_labels(node, a, device_uuid)
    for name, value in (
        ("hami_vgpu_memory_used_bytes", a.used),
        ("hami_vgpu_memory_limit_bytes", a.limit),
        ("hami_container_device_memory_bytes", a.used),
        ("hami_container_device_utilization_ratio", a.sm_util),
        ("hami_vgpu_memory_context_bytes", a.context),
        ("hami_vgpu_memory_module_bytes", a.module),
        ("hami_vgpu_memory_buffer_bytes", a.buffer),
    ):
        _put(result, node.name, name, labels, value)
    if a.last_kernel_time is not None:
        elapsed = max(math.floor(now) - a.last_kernel_time, 0)
        _put(result, node.name, "hami_container_last_kernel_elapsed_seconds", labels, elapsed)
    if node.flavour == "hami" and a.mig is not None:
        mig_labels = dict(labels)
        mig_labels["mig_uuid"] = a.mig.mig_uuid
        mig_labels["profile"] = a.mig.profile
        mig_labels["gpu_instance_id"] = str(a.mig.gpu_instance_id)
        mig_labels["compute_instance_id"] = str(a.mig.compute_instance_id)
        _put(result, node.name, "hami_mig_device_info", mig_labels, 1)


def expected_canonical(node: SimulatedNode, now: float) -> Series:
    """The canonical series a correct collector outputs for ``node`` at ``now``.

    HAMi v2.10 names; labels as the v2.10 monitor names them (legacy ones
    renamed), ``zone="vGPU"`` kept, ``node=<node name>`` on every series; the
    byte breakdown becomes the ``hami_vgpu_memory_{context,module,buffer}_bytes``
    series; ``offset`` is dropped; ``device_type`` appears only where the
    monitor sent it; ``hami_build_info`` passes through with ``node`` added.
    """
    result: Series = {}
    for card in node.cards:
        _host_series(result, node, card)
    uuid_of = {card.index: card.uuid[:40] for card in node.cards}
    for a in node.allocations:
        if node.flavour == "kai" and a.kai_annotation not in ("gpu-fraction", "gpu-memory"):
            continue
        _container_series(result, node, a, uuid_of[a.card], now)
    if node.flavour == "hami":
        _put(result, node.name, "hami_build_info", dict(BUILD_INFO), 1)
    return result
