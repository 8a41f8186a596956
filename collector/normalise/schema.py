"""The canonical schema (HAMi v2.10 names and HELP texts) and how older forms map into it.

docs/metrics.md lists them for users. Every output series also carries
``node``; that label is added by the store's renderer, not listed here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum


class Flavour(StrEnum):
    """A monitor the collector discovers and pulls; each names and labels its series its own way."""

    HAMI = "hami"
    VOLCANO = "volcano"
    KAI = "kai"


class SourceKind(StrEnum):
    """What feeds a node: a pulled monitor of one flavour, or a pushing agent."""

    HAMI = "hami"
    VOLCANO = "volcano"
    KAI = "kai"
    AGENT = "agent"
    ALLOCATION = "allocation"
    REGISTRATION = "registration"


WATCH_KINDS = frozenset({SourceKind.ALLOCATION, SourceKind.REGISTRATION})
"""The kinds made from the cluster's objects (the pod and node watches), not from readings:
a node fed by these alone has no usage source."""

RANKED_KINDS = tuple(kind for kind in SourceKind if kind not in WATCH_KINDS)
"""The kinds ``--priority`` orders; allocation (from the pod watch) ranks after them, so its
stand-in usage of 0 gives way to any real reading, and registration (from the node watch)
last, so a registered memory total never hides the physical one NVML reports."""


@dataclass(frozen=True, slots=True)
class Family:
    """One canonical metric family: its name, HELP text and type."""

    name: str
    help: str
    type: str = "gauge"


CONTAINER_MEMORY = "hami_container_device_memory_bytes"
VGPU_MEMORY_USED = "hami_vgpu_memory_used_bytes"
VGPU_MEMORY_LIMIT = "hami_vgpu_memory_limit_bytes"
VGPU_UTILIZATION = "hami_container_device_utilization_ratio"
LAST_KERNEL = "hami_container_last_kernel_elapsed_seconds"
MEMORY_ALLOCATED = "hami_vgpu_memory_allocated_bytes"
CORE_ALLOCATED = "hami_vgpu_core_allocated_ratio"
GPU_INFO = "hami_container_gpu_info"
CONTAINER_ENERGY = "hami_container_energy_joules_total"
UNATTRIBUTED_MEMORY = "hami_host_gpu_unattributed_memory_bytes"
ENERGY = "hami_host_gpu_energy_joules_total"
IDLE_ENERGY = "hami_host_gpu_idle_energy_joules_total"
ECC_ERRORS = "hami_host_gpu_ecc_errors_total"
XID_ERRORS = "hami_host_gpu_xid_errors_total"
CLOCK_EVENT = "hami_host_gpu_clock_event_active"
MIG_MEMORY_USED = "hami_mig_memory_used_bytes"
MIG_MEMORY_TOTAL = "hami_mig_memory_total_bytes"
IDLE = "hami_container_idle_seconds"
MEMORY_TOTAL = "hami_host_gpu_memory_total_bytes"
MEMORY_USED = "hami_host_gpu_memory_used_bytes"
MEMORY_REGISTERED = "hami_host_gpu_memory_registered_bytes"
MEMORY_OVERSUBSCRIPTION = "hami_host_gpu_memory_oversubscription_ratio"
SPLIT_COUNT = "hami_host_gpu_split_count"
HEALTHY = "hami_host_gpu_healthy"
REGISTRATION_INFO = "hami_host_gpu_registration_info"
NODE_GPU_COUNT = "hami_node_gpu_count"

# What HAMi's own monitor gets wrong and the agent checks (docs/metrics.md, "What the agent
# corrects"): slots whose process is gone, a region without utilisation, the energy of
# processes of no pod. Only the agent makes these.
UNATTRIBUTED_ENERGY = "hami_host_gpu_unattributed_energy_joules_total"
STALE_MEMORY = "hami_vgpu_stale_memory_bytes"
UTILIZATION_SOURCE = "hami_container_device_utilization_source_info"
AGENT_CHECKS = (
    Family(
        UNATTRIBUTED_ENERGY,
        "Energy of the GPU since the agent started that the utilisation shares of processes of"
        " no pod took, in joules",
        "counter",
    ),
    Family(
        STALE_MEMORY,
        "vGPU device memory that HAMi-core still counts for processes that are gone, in bytes;"
        " not in hami_vgpu_memory_used_bytes",
    ),
    Family(
        UTILIZATION_SOURCE,
        "Which reading gave the container's hami_container_device_utilization_ratio: hami-core"
        " (its shared region) or nvml (NVML's per-process samples); value 1",
    ),
)
AGENT_CHECK_FAMILIES = tuple(family.name for family in AGENT_CHECKS)

FAMILIES: Mapping[str, Family] = {
    family.name: family
    for family in (
        Family("hami_host_gpu_memory_used_bytes", "GPU device memory usage in bytes"),
        Family("hami_host_gpu_utilization_ratio", "GPU core utilization ratio (0-100)"),
        Family(
            "hami_host_gpu_memory_controller_utilization_ratio",
            "GPU memory controller utilization ratio (0-100)",
        ),
        Family(VGPU_MEMORY_USED, "vGPU device memory usage in bytes"),
        Family(VGPU_MEMORY_LIMIT, "vGPU device memory limit in bytes"),
        Family(CONTAINER_MEMORY, "Container device memory usage in bytes"),
        Family(VGPU_UTILIZATION, "Container device SM utilization ratio"),
        Family(LAST_KERNEL, "Seconds since last kernel execution in container"),
        Family("hami_vgpu_memory_context_bytes", "Container device memory context size in bytes"),
        Family("hami_vgpu_memory_module_bytes", "Container device memory module size in bytes"),
        Family("hami_vgpu_memory_buffer_bytes", "Container device memory buffer size in bytes"),
        Family("hami_mig_device_info", "MIG runtime identity for a container allocation"),
        # Readings that upstream HAMi's later monitors add and our agent sends:
        Family("hami_host_gpu_memory_total_bytes", "GPU device memory total in bytes"),
        Family("hami_host_gpu_temperature_celsius", "GPU temperature in degrees Celsius"),
        Family("hami_host_gpu_power_usage_watts", "GPU power draw in watts"),
        # The card's health and energy, and NVML's per-process view (our agent's):
        Family(ENERGY, "Energy the GPU consumed since its driver loaded, in joules", "counter"),
        Family(
            IDLE_ENERGY,
            "Energy of the GPU since the agent started that no process's utilisation share"
            " took, in joules; with hami_container_energy_joules_total and"
            " hami_host_gpu_unattributed_energy_joules_total it sums to the card's",
            "counter",
        ),
        Family(
            CONTAINER_ENERGY,
            "Estimated energy of the container on the GPU since the agent started, in joules:"
            " between two snapshots the card's energy times its busy fraction, split by the"
            " containers' shares of its per-process SM utilisation",
            "counter",
        ),
        Family(ECC_ERRORS, "GPU memory ECC errors over the card's lifetime, by type", "counter"),
        Family(XID_ERRORS, "XID critical error events since the agent started, by XID", "counter"),
        Family(CLOCK_EVENT, "1 while the GPU's clocks are held down for this reason, else 0"),
        Family(
            UNATTRIBUTED_MEMORY,
            "GPU memory of processes that belong to no pod the cluster has, in bytes",
        ),
        Family(MIG_MEMORY_USED, "MIG instance memory usage in bytes"),
        Family(MIG_MEMORY_TOTAL, "MIG instance memory total in bytes"),
        *AGENT_CHECKS,
    )
}

NVML_VIEW_FAMILIES = (
    ENERGY,
    IDLE_ENERGY,
    CONTAINER_ENERGY,
    ECC_ERRORS,
    XID_ERRORS,
    CLOCK_EVENT,
    UNATTRIBUTED_MEMORY,
    MIG_MEMORY_USED,
    MIG_MEMORY_TOTAL,
)
"""The families only the agent's wider NVML view makes (no monitor exports them)."""

ALLOCATION_FAMILIES: Mapping[str, Family] = {
    family.name: family
    for family in (
        Family(
            MEMORY_ALLOCATED,
            "vGPU device memory allocated to the container in bytes; until the vGPU is"
            " reported, hami_vgpu_memory_used_bytes and"
            " hami_container_device_utilization_ratio are 0 for it",
        ),
        Family(CORE_ALLOCATED, "Share of the device's cores allocated to the container (0-1)"),
        Family(
            GPU_INFO,
            "GPU allocation of a container; resource_kind is vgpu, whole, mig, fraction or dra",
        ),
        Family(
            IDLE,
            "Seconds since the container's last kernel, or since its pod started if it never ran one",
        ),
    )
}
"""The families the pod watch makes (:mod:`collector.sources.allocation_series`), not the monitors.

Where an allocated vGPU has no usage series yet, the pod watch stands in
``hami_vgpu_memory_used_bytes`` and ``hami_container_device_utilization_ratio``
of 0 (the HELP of the allocated memory says so), so a pod shows at once.
"""

CAPACITY_FAMILIES: Mapping[str, Family] = {
    family.name: family
    for family in (
        Family(
            MEMORY_REGISTERED,
            "GPU memory the scheduler may allocate on the card, as its device plugin registered"
            " it on the Node, in bytes",
        ),
        Family(
            MEMORY_OVERSUBSCRIPTION,
            "The card's registered memory over the physical total NVML reports (1: as the card"
            " holds; above 1: the scheduler allocates more than the card holds)",
        ),
        Family(SPLIT_COUNT, "Tasks the scheduler may place on the card at once, as registered"),
        Family(
            HEALTHY,
            "1 if the scheduler may place tasks on the card: its device plugin registers it"
            " healthy and the node's allocatable count of the plugin's resource is above 0",
        ),
        Family(
            REGISTRATION_INFO,
            "The card as its device plugin registered it on the Node; mode is hami-core, mig or"
            " mps, model the card's product name",
        ),
        Family(
            NODE_GPU_COUNT,
            "GPUs on the node as its scheduler's Node record (HAMi, Volcano) or GPU Feature"
            " Discovery's labels (KAI) count them",
        ),
    )
}
"""The families the node watch makes (:mod:`collector.sources.capacity_series`), not the monitors.

Where no monitor or agent reports a card's ``hami_host_gpu_memory_total_bytes``, the node
watch stands in the registered memory (GPU Feature Discovery's for KAI), with the labels of
the card's other series.
"""

ALLOCATION_READINGS: tuple[tuple[str, str], ...] = (
    ("memory_allocated", MEMORY_ALLOCATED),
    ("cores_allocated", CORE_ALLOCATED),
    ("idle_seconds", IDLE),
)
"""The per-vGPU families of the pod watch, labelled as the usage of that vGPU is."""

CARD_READINGS: tuple[tuple[str, str], ...] = (
    ("memory_used", "hami_host_gpu_memory_used_bytes"),
    ("memory_total", "hami_host_gpu_memory_total_bytes"),
    ("utilization", "hami_host_gpu_utilization_ratio"),
    ("memory_controller_utilization", "hami_host_gpu_memory_controller_utilization_ratio"),
    ("temperature", "hami_host_gpu_temperature_celsius"),
    ("power", "hami_host_gpu_power_usage_watts"),
)
"""Each reading of a physical card and the family that carries it.

Pushed readings become these series, and the REST read model reads them back
by the same names: the table is the one place that pairs them.
"""

VGPU_READINGS: tuple[tuple[str, str], ...] = (
    ("memory_used", VGPU_MEMORY_USED),
    ("device_memory", CONTAINER_MEMORY),
    ("memory_limit", "hami_vgpu_memory_limit_bytes"),
    ("sm_utilization", "hami_container_device_utilization_ratio"),
    ("last_kernel_seconds", "hami_container_last_kernel_elapsed_seconds"),
    ("memory_context", "hami_vgpu_memory_context_bytes"),
    ("memory_module", "hami_vgpu_memory_module_bytes"),
    ("memory_buffer", "hami_vgpu_memory_buffer_bytes"),
)
"""Each reading of one container's vGPU and the family that carries it (as :data:`CARD_READINGS`).

A HAMi v2.10 monitor exports the vGPU's memory in use twice, as
``memory_used`` and as the container's ``device_memory``.
"""

CARD_FAMILIES = tuple(family for _, family in CARD_READINGS)
VGPU_FAMILIES = tuple(family for _, family in VGPU_READINGS)

_HOST = {
    "nodeid": "node",
    "deviceidx": "device_index",
    "deviceuuid": "device_uuid",
    "devicetype": "device_type",
}
_CONTAINER = {
    "podnamespace": "namespace",
    "podname": "pod",
    "ctrname": "container",
    "vdeviceid": "vdevice_index",
    "deviceuuid": "device_uuid",
}

LEGACY: Mapping[str, tuple[str, Mapping[str, str]]] = {
    "HostGPUMemoryUsage": ("hami_host_gpu_memory_used_bytes", _HOST),
    "HostCoreUtilization": ("hami_host_gpu_utilization_ratio", _HOST),
    "vGPU_device_memory_usage_in_bytes": (VGPU_MEMORY_USED, _CONTAINER),
    "vGPU_device_memory_limit_in_bytes": ("hami_vgpu_memory_limit_bytes", _CONTAINER),
    "Device_memory_desc_of_container": (CONTAINER_MEMORY, _CONTAINER),
    "Device_utilization_desc_of_container": ("hami_container_device_utilization_ratio", _CONTAINER),
    "Device_last_kernel_of_container": ("hami_container_last_kernel_elapsed_seconds", _CONTAINER),
}
"""Legacy name -> (canonical name, legacy label -> canonical label)."""

UNMAPPABLE_LEGACY = frozenset({"MigInfo"})
"""Legacy families without the container labels the canonical form needs: dropped, counted."""

MEMORY_BREAKDOWN: Mapping[str, str] = {
    "context_size": "hami_vgpu_memory_context_bytes",
    "module_size": "hami_vgpu_memory_module_bytes",
    "buffer_size": "hami_vgpu_memory_buffer_bytes",
    "context": "hami_vgpu_memory_context_bytes",
    "module": "hami_vgpu_memory_module_bytes",
    "data": "hami_vgpu_memory_buffer_bytes",
}
"""Byte sizes that old monitors sent as label values of the container memory series."""

BREAKDOWN_DROPPED = frozenset({"offset"})
"""Breakdown labels with no canonical series."""


def known(name: str) -> bool:
    """Whether ``name`` is a canonical family or a legacy form of one."""
    return name in FAMILIES or name in LEGACY or name in UNMAPPABLE_LEGACY
