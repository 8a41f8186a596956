"""The samples each simulated monitor serves for its node, flavour by flavour.

Label names, their order and the zone label come from
:data:`~simulator.families.MONITOR_METRICS`; this module decides which
families a flavour fills from which readings.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from simulator.devices import Allocation, Card, MigSlice
from simulator.families import BUILD_INFO, KAI_SHARING_ANNOTATIONS, MONITOR_METRICS, ZONE
from simulator.textformat import MonitorSample

_Emit = Callable[[str, Sequence[str], float], None]
"""Record one sample: family name, variable label values in the family's order, value."""


def visible_allocations(flavour: str, allocations: Sequence[Allocation]) -> list[Allocation]:
    """The allocations a ``flavour`` monitor reports (KAI: annotated pods only)."""
    if flavour == "kai":
        return [a for a in allocations if a.kai_annotation in KAI_SHARING_ANNOTATIONS]
    return list(allocations)


def _host_samples(emit: _Emit, flavour: str, node: str, card: Card) -> None:
    index, uuid, dtype = str(card.index), card.device_uuid, card.device_type
    if flavour == "hami":
        host = (node, index, uuid, dtype)
        emit("hami_host_gpu_memory_used_bytes", host, card.memory_used)
        emit("hami_host_gpu_utilization_ratio", host, card.utilization)
        emit(
            "hami_host_gpu_memory_controller_utilization_ratio",
            (index, uuid, dtype),
            card.memory_controller_utilization,
        )
    elif flavour == "kai":
        emit("hami_host_gpu_memory_used_bytes", (index, uuid, dtype), card.memory_used)
        emit("hami_host_gpu_utilization_ratio", (index, uuid, dtype), card.utilization)
    elif flavour == "hami-legacy":
        emit("HostGPUMemoryUsage", (node, index, uuid, dtype), card.memory_used)
        emit("HostCoreUtilization", (node, index, uuid, dtype), card.utilization)
    else:  # volcano
        emit("HostGPUMemoryUsage", (index, uuid), card.memory_used)
        emit("HostCoreUtilization", (index, uuid), card.utilization)


def _breakdown(a: Allocation) -> tuple[str, str, str, str]:
    """Context, module, buffer and offset bytes, as the label values old monitors send."""
    return (str(a.context), str(a.module), str(a.buffer), str(a.offset))


def _mig_identity(mig: MigSlice) -> tuple[str, str, str, str]:
    return (mig.mig_uuid, mig.profile, str(mig.gpu_instance_id), str(mig.compute_instance_id))


def _hami_container_samples(
    emit: _Emit, flavour: str, ctr: Sequence[str], a: Allocation, elapsed: int | None
) -> None:
    """The container series of the ``hami`` and ``kai`` monitors (v2.10 names)."""
    emit("hami_vgpu_memory_used_bytes", ctr, a.used)
    emit("hami_vgpu_memory_limit_bytes", ctr, a.limit)
    if flavour == "hami":
        emit("hami_container_device_memory_bytes", ctr, a.used)
    else:
        emit("hami_container_device_memory_bytes", (*ctr, *_breakdown(a)), a.used)
    emit("hami_container_device_utilization_ratio", ctr, a.sm_util)
    emit("hami_vgpu_memory_context_bytes", ctr, a.context)
    emit("hami_vgpu_memory_module_bytes", ctr, a.module)
    emit("hami_vgpu_memory_buffer_bytes", ctr, a.buffer)
    if elapsed is not None:
        emit("hami_container_last_kernel_elapsed_seconds", ctr, elapsed)
    if flavour == "hami" and a.mig is not None:
        emit("hami_mig_device_info", (*ctr, *_mig_identity(a.mig)), 1)


def _legacy_container_samples(
    emit: _Emit, ctr: Sequence[str], a: Allocation, elapsed: int | None
) -> None:
    """The container series of the ``hami-legacy`` and ``volcano`` monitors (legacy names)."""
    emit("vGPU_device_memory_usage_in_bytes", ctr, a.used)
    emit("vGPU_device_memory_limit_in_bytes", ctr, a.limit)
    emit("Device_memory_desc_of_container", (*ctr, *_breakdown(a)), a.used)
    emit("Device_utilization_desc_of_container", ctr, a.sm_util)
    if elapsed is not None:
        emit("Device_last_kernel_of_container", ctr, elapsed)


def monitor_samples(
    flavour: str,
    node: str,
    cards: Sequence[Card],
    allocations: Sequence[Allocation],
    now: float,
    suffix: str = "",
) -> list[MonitorSample]:
    """Every sample a ``flavour`` monitor on ``node`` serves at ``now``, in no particular order.

    ``allocations`` are the ones it reports (:func:`visible_allocations`);
    ``suffix`` is appended to their namespace, pod and container label values.
    """
    specs = MONITOR_METRICS[flavour]
    out: list[MonitorSample] = []

    def emit(name: str, values: Sequence[str], value: float) -> None:
        spec = specs[name]
        labels = dict(zip(spec.labels, values, strict=True))
        if spec.zone:
            labels["zone"] = ZONE
        out.append(MonitorSample(name, labels, float(value)))

    for card in cards:
        _host_samples(emit, flavour, node, card)
    uuid_of = {card.index: card.device_uuid for card in cards}
    tick = math.floor(now)
    for a in allocations:
        identity = (a.namespace + suffix, a.pod + suffix, a.container + suffix)
        ctr = (*identity, str(a.vdevice_index), uuid_of[a.card])
        elapsed = None if a.last_kernel_time is None else max(tick - a.last_kernel_time, 0)
        if flavour in ("hami", "kai"):
            _hami_container_samples(emit, flavour, ctr, a, elapsed)
        else:
            _legacy_container_samples(emit, ctr, a, elapsed)
    if flavour == "hami":
        emit("hami_build_info", [BUILD_INFO[label] for label in specs["hami_build_info"].labels], 1)
    return out
