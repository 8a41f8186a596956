"""What each monitor version the simulator impersonates declares: families, HELP texts, labels.

``hami``
    HAMi v2.10 ``vGPUmonitor``: canonical ``hami_*`` names; host series labelled
    node/device_index/device_uuid/device_type except the memory-controller one,
    which has no node; ``hami_build_info``; ``hami_mig_device_info`` for MIG slices.
``hami-legacy``
    HAMi before 2.9: legacy names only; host series carry nodeid, deviceidx,
    deviceuuid, devicetype; ``Device_memory_desc_of_container`` is a counter whose
    byte breakdown sits in the context/module/data/offset labels.
``volcano``
    Volcano vGPU monitor: legacy names; host series carry only deviceidx and
    deviceuuid; ``Device_memory_desc_of_container`` is a counter.
``kai``
    KAI ``kai-resource-isolator`` monitor: ``hami_*`` names; host memory and
    utilisation only, without node; ``hami_container_device_memory_bytes`` keeps
    context_size/module_size/buffer_size/offset labels; container series only
    for pods annotated ``gpu-fraction`` or ``gpu-memory``; no MIG, no build info.

These are monitor versions, not the collector's discovery flavours
(:class:`collector.normalise.schema.Flavour`): legacy HAMi is discovered as HAMi.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

MONITORS: tuple[str, ...] = ("hami", "hami-legacy", "volcano", "kai")
"""The monitor versions the simulator can impersonate."""

ZONE = "vGPU"
"""Constant label every monitor adds to its collector's series (not to hami_build_info)."""

BUILD_INFO: Mapping[str, str] = {
    "build_date": "2026-03-18T09:12:44Z",
    "compiler": "gc",
    "go_version": "go1.24.6",
    "platform": "linux/amd64",
    "revision": "9c41d7be",
    "version": "v2.10.0",
}
"""Label values of the simulated HAMi v2.10 ``hami_build_info`` series."""


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One family a monitor declares: name, HELP, variable labels (upstream order), type."""

    name: str
    help: str
    labels: tuple[str, ...]
    type: str = "gauge"
    zone: bool = True
    """Whether the monitor's wrapping registerer adds ``zone="vGPU"``."""


_HOST_V210 = ("node", "device_index", "device_uuid", "device_type")
_HOST_NO_NODE = ("device_index", "device_uuid", "device_type")
_CTR = ("namespace", "pod", "container", "vdevice_index", "device_uuid")
_LEGACY_CTR = ("podnamespace", "podname", "ctrname", "vdeviceid", "deviceuuid")
_LEGACY_MEMORY = (*_LEGACY_CTR, "context", "module", "data", "offset")


def _table(*specs: MetricSpec) -> dict[str, MetricSpec]:
    return {spec.name: spec for spec in specs}


_HAMI_CONTAINER_SPECS = (
    MetricSpec("hami_vgpu_memory_used_bytes", "vGPU device memory usage in bytes", _CTR),
    MetricSpec("hami_vgpu_memory_limit_bytes", "vGPU device memory limit in bytes", _CTR),
    MetricSpec(
        "hami_container_device_utilization_ratio", "Container device SM utilization ratio", _CTR
    ),
    MetricSpec(
        "hami_container_last_kernel_elapsed_seconds",
        "Seconds since last kernel execution in container",
        _CTR,
    ),
    MetricSpec(
        "hami_vgpu_memory_context_bytes", "Container device memory context size in bytes", _CTR
    ),
    MetricSpec(
        "hami_vgpu_memory_module_bytes", "Container device memory module size in bytes", _CTR
    ),
    MetricSpec(
        "hami_vgpu_memory_buffer_bytes", "Container device memory buffer size in bytes", _CTR
    ),
)

_LEGACY_CONTAINER_SPECS = (
    MetricSpec("vGPU_device_memory_usage_in_bytes", "vGPU device usage", _LEGACY_CTR),
    MetricSpec("vGPU_device_memory_limit_in_bytes", "vGPU device limit", _LEGACY_CTR),
    MetricSpec(
        "Device_memory_desc_of_container",
        "Container device meory description",  # sic: the typo is upstream's
        _LEGACY_MEMORY,
        type="counter",
    ),
    MetricSpec(
        "Device_utilization_desc_of_container",
        "Container device utilization description",
        _LEGACY_CTR,
    ),
    MetricSpec(
        "Device_last_kernel_of_container", "Container device last kernel description", _LEGACY_CTR
    ),
)

MONITOR_METRICS: Mapping[str, Mapping[str, MetricSpec]] = {
    "hami": _table(
        MetricSpec(
            "hami_host_gpu_memory_used_bytes", "GPU device memory usage in bytes", _HOST_V210
        ),
        MetricSpec(
            "hami_host_gpu_utilization_ratio", "GPU core utilization ratio (0-100)", _HOST_V210
        ),
        MetricSpec(
            "hami_host_gpu_memory_controller_utilization_ratio",
            "GPU memory controller utilization ratio (0-100)",
            _HOST_NO_NODE,
        ),
        *_HAMI_CONTAINER_SPECS,
        MetricSpec(
            "hami_container_device_memory_bytes", "Container device memory usage in bytes", _CTR
        ),
        MetricSpec(
            "hami_mig_device_info",
            "MIG runtime identity for a container allocation",
            (*_CTR, "mig_uuid", "profile", "gpu_instance_id", "compute_instance_id"),
        ),
        MetricSpec(
            "hami_build_info",
            "hami build metadata exposed as labels with a constant value of 1.",
            ("build_date", "compiler", "go_version", "platform", "revision", "version"),
            zone=False,
        ),
    ),
    "kai": _table(
        MetricSpec(
            "hami_host_gpu_memory_used_bytes", "GPU device memory usage in bytes", _HOST_NO_NODE
        ),
        MetricSpec(
            "hami_host_gpu_utilization_ratio", "GPU core utilization ratio (0-100)", _HOST_NO_NODE
        ),
        *_HAMI_CONTAINER_SPECS,
        MetricSpec(
            "hami_container_device_memory_bytes",
            'Container device memory usage breakdown in bytes (The label "context_size", '
            '"module_size", "buffer_size" and "offset" will be deprecated in v2.10.0, use '
            "hami_vgpu_memory_context_bytes, hami_vgpu_memory_module_bytes and "
            "hami_vgpu_memory_buffer_bytes instead)",
            (*_CTR, "context_size", "module_size", "buffer_size", "offset"),
        ),
    ),
    "hami-legacy": _table(
        MetricSpec(
            "HostGPUMemoryUsage",
            "GPU device memory usage",
            ("nodeid", "deviceidx", "deviceuuid", "devicetype"),
        ),
        MetricSpec(
            "HostCoreUtilization",
            "GPU core utilization",
            ("nodeid", "deviceidx", "deviceuuid", "devicetype"),
        ),
        *_LEGACY_CONTAINER_SPECS,
    ),
    "volcano": _table(
        MetricSpec("HostGPUMemoryUsage", "GPU device memory usage", ("deviceidx", "deviceuuid")),
        MetricSpec("HostCoreUtilization", "GPU core utilization", ("deviceidx", "deviceuuid")),
        *_LEGACY_CONTAINER_SPECS,
    ),
}
"""monitor (one of :data:`MONITORS`) -> metric name -> what that monitor declares for it."""

KAI_SHARING_ANNOTATIONS: tuple[str, ...] = ("gpu-fraction", "gpu-memory")
"""Pods carrying one of these annotations are the only ones the KAI monitor reports."""
