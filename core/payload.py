"""The push payload: what an agent sends to ``POST /api/v1/push``, defined once for both sides.

Readings are raw: bytes, percentages 0-100, epoch seconds. Attribution to
namespace/pod/container happens in the collector, which watches pods anyway.

Fields are only ever added, each optional with a default that means "not
sent", so an older agent's payload stays valid (a newer agent's is refused by
an older collector, which forbids unknown fields: upgrade the collector first).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Mig(_Strict):
    """One MIG instance of a card, read through its MIG handle."""

    uuid: str = Field(min_length=1, max_length=96)
    gpu_instance_id: int = Field(ge=0)
    compute_instance_id: int = Field(ge=0)
    profile: str = Field("", max_length=64, description="e.g. 1g.10gb")
    memory_used: int | None = Field(None, ge=0, description="bytes")
    memory_total: int | None = Field(None, ge=0, description="bytes")


class Card(_Strict):
    """One physical GPU as NVML sees it; a field NVML could not read (or the card lacks) is None.

    Counters (``energy``, ``idle_energy``, ``xid_errors``, the ECC counts) never go
    backwards within one agent instance: ``energy`` and the ECC counts are the
    driver's, ``idle_energy`` and ``xid_errors`` count from the agent's start.
    """

    index: int = Field(ge=0)
    uuid: str = Field(min_length=1, max_length=96)
    name: str = ""
    memory_used: int | None = Field(None, ge=0, description="bytes")
    memory_total: int | None = Field(None, ge=0, description="bytes")
    utilization: float | None = Field(None, ge=0, description="GPU core utilisation, 0-100")
    memory_utilization: float | None = Field(
        None, ge=0, description="memory controller utilisation, 0-100"
    )
    temperature: float | None = Field(None, description="degrees Celsius")
    power: float | None = Field(None, ge=0, description="watts")
    energy: float | None = Field(None, ge=0, description="joules since the driver loaded")
    idle_energy: float | None = Field(
        None, ge=0, description="joules since the agent started that no process's share took"
    )
    unattributed_energy: float | None = Field(
        None,
        ge=0,
        description="joules since the agent started that the shares of processes of no pod took",
    )
    ecc_corrected: int | None = Field(None, ge=0, description="aggregate (lifetime) count")
    ecc_uncorrected: int | None = Field(None, ge=0, description="aggregate (lifetime) count")
    clock_events: int | None = Field(None, ge=0, description="NVML's clocks-event reasons bitmask")
    xid_errors: dict[int, int] = Field(
        default_factory=dict, max_length=256, description="XID -> events since the agent started"
    )
    mig: list[Mig] = Field(default_factory=list, max_length=64)


class Device(_Strict):
    """One vGPU of a region: ``index`` is its position in the region (the vdevice index)."""

    index: int = Field(ge=0, lt=16)
    uuid: str = Field(min_length=1, max_length=96)
    memory_used: int = Field(ge=0, description="bytes, summed over live processes")
    memory_limit: int = Field(ge=0, description="bytes")
    context: int = Field(0, ge=0, description="bytes")
    module: int = Field(0, ge=0, description="bytes")
    buffer: int = Field(0, ge=0, description="bytes")
    sm_utilization: float = Field(
        0,
        ge=0,
        description="0-100; agents that send utilization_source clamp it to 100, older ones"
        " send HAMi-core's sum, which can exceed 100",
    )
    utilization_source: Literal["hami-core", "nvml"] | None = Field(
        None,
        description="which reading sm_utilization is: the region's own (hami-core), or NVML's"
        " per-process samples of the container's processes where the region has none (nvml);"
        " None from agents that do not say",
    )
    stale_memory: int | None = Field(
        None,
        ge=0,
        description="bytes that slots whose process is gone still hold, left out of memory_used;"
        " None where the agent could not check",
    )


class Region(_Strict):
    """One HAMi-core shared region: a container's (pod UID + name) or a DRA claim's."""

    pod_uid: str | None = Field(None, min_length=1, max_length=64)
    container: str | None = Field(None, min_length=1, max_length=253)
    claim_uid: str | None = Field(None, min_length=1, max_length=64)
    devices: list[Device] = Field(max_length=16)
    last_kernel_time: int | None = Field(
        None, ge=0, description="epoch seconds; None if no kernel ran"
    )

    @model_validator(mode="after")
    def _keyed_once(self) -> Region:
        if (self.pod_uid is None) != (self.container is None):
            raise ValueError("pod_uid and container come together")
        if (self.pod_uid is None) == (self.claim_uid is None):
            raise ValueError("a region is keyed by pod_uid + container, or by claim_uid, not both")
        return self


class ContainerUsage(_Strict):
    """One container's processes on one device (a card, or a MIG instance by its UUID).

    From NVML's per-process view and the processes' cgroups; ``pod_uid`` and
    ``container_id`` are None for processes of no pod (a host process).
    """

    device: str = Field(min_length=1, max_length=96, description="card or MIG UUID")
    pod_uid: str | None = Field(None, min_length=1, max_length=64)
    container_id: str | None = Field(None, min_length=1, max_length=128)
    processes: int = Field(ge=1)
    memory_used: int = Field(ge=0, description="bytes, summed over the processes")
    utilization: float | None = Field(
        None,
        ge=0,
        description="SM utilisation 0-100 summed over the processes, averaged over the interval;"
        " None where NVML has no per-process samples (MIG)",
    )
    energy: float | None = Field(
        None, ge=0, description="joules since the agent started: its share of the card's"
    )

    @model_validator(mode="after")
    def _owned_whole(self) -> ContainerUsage:
        if (self.pod_uid is None) != (self.container_id is None):
            raise ValueError("pod_uid and container_id come together")
        return self


class Assignment(_Strict):
    """The devices the kubelet's PodResources API says one container holds, per resource name."""

    namespace: str = Field(min_length=1, max_length=253)
    pod: str = Field(min_length=1, max_length=253)
    container: str = Field(min_length=1, max_length=253)
    resource: str = Field(min_length=1, max_length=253, description="e.g. nvidia.com/gpu")
    devices: list[str] = Field(
        max_length=64, description="card or MIG UUIDs, in the kubelet's order"
    )


class Payload(_Strict):
    """One snapshot of a node. ``sequence`` grows by one per snapshot of an agent instance."""

    version: Literal[1] = 1
    node: str = Field(min_length=1, max_length=253)
    agent: str = Field(
        min_length=1, max_length=64, description="agent instance id, new at each start"
    )
    sequence: int = Field(ge=0)
    time: float = Field(gt=0, description="when the snapshot was taken, epoch seconds")
    nvml: bool = Field(description="whether NVML was available for this snapshot")
    cards: list[Card] = Field(default_factory=list, max_length=64)
    regions: list[Region] = Field(default_factory=list, max_length=4096)
    processes: list[ContainerUsage] = Field(default_factory=list, max_length=4096)
    assignments: list[Assignment] | None = Field(
        None, max_length=4096, description="None when the PodResources API was not read"
    )
