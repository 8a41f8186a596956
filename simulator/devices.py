"""The simulated hardware and what runs on it: cards, MIG slices, vGPU allocations."""

from __future__ import annotations

from dataclasses import dataclass

MONITOR_UUID_LENGTH = 40
"""How much of a UUID the simulated monitors publish, as HAMi's do (spelt here, not taken from
the collector: the simulator plays the upstream monitor that the collector is tested against)."""


@dataclass(slots=True)
class Card:
    """One physical GPU as NVML reports it, plus its current host-level readings."""

    index: int
    uuid: str
    """The NVML UUID; monitors publish its first 40 characters."""
    name: str
    """The NVML name, e.g. ``NVIDIA H200``; monitors publish ``"NVIDIA-" + name``."""
    memory_total: int
    memory_used: int = 0
    utilization: int = 0
    memory_controller_utilization: int = 0
    reserved: int = 287244288
    """Bytes NVML counts as used on the card outside any vGPU allocation."""

    @property
    def device_type(self) -> str:
        """The ``device_type`` / ``devicetype`` label value (known upstream double prefix)."""
        return "NVIDIA-" + self.name

    @property
    def device_uuid(self) -> str:
        """The ``device_uuid`` / ``deviceuuid`` label value."""
        return self.uuid[:MONITOR_UUID_LENGTH]


@dataclass(frozen=True, slots=True)
class MigSlice:
    """The MIG identity of an allocation (only the ``hami`` monitor publishes it)."""

    mig_uuid: str
    profile: str
    gpu_instance_id: int
    compute_instance_id: int


@dataclass(slots=True)
class Allocation:
    """One vGPU of one container: HAMi-core's per-device accounting for it."""

    namespace: str
    pod: str
    pod_uid: str
    container: str
    card: int
    """Index of the physical card backing this vGPU."""
    vdevice_index: int
    limit: int
    used: int
    context: int
    module: int
    buffer: int
    sm_util: int
    last_kernel_time: int | None
    """Unix seconds of the container's last kernel launch; None while none ran."""
    kai_annotation: str | None = "gpu-fraction"
    """The pod's KAI sharing annotation; only the ``kai`` monitor looks at it."""
    mig: MigSlice | None = None
    cores: int = 100
    """Percent of the card's SMs the scheduler gave this vGPU (HAMi's ``gpucores``; 0: no
    SM limit, the card's time shared with the others)."""

    @property
    def offset(self) -> int:
        """Bytes in use beyond context, module and buffer (never negative)."""
        return max(self.used - self.context - self.module - self.buffer, 0)

    @property
    def key(self) -> tuple[str, str, int]:
        """Identity within a node: pod UID, container, vdevice index."""
        return (self.pod_uid, self.container, self.vdevice_index)
