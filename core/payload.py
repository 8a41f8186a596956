"""The push payload: what an agent sends to ``POST /api/v1/push``, defined once for both sides.

Readings are raw: bytes, percentages 0-100, epoch seconds. Attribution to
namespace/pod/container happens in the collector, which watches pods anyway.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Card(_Strict):
    """One physical GPU as NVML sees it; a field NVML could not read is None."""

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


class Device(_Strict):
    """One vGPU of a region: ``index`` is its position in the region (the vdevice index)."""

    index: int = Field(ge=0, lt=16)
    uuid: str = Field(min_length=1, max_length=96)
    memory_used: int = Field(ge=0, description="bytes, summed over live processes")
    memory_limit: int = Field(ge=0, description="bytes")
    context: int = Field(0, ge=0, description="bytes")
    module: int = Field(0, ge=0, description="bytes")
    buffer: int = Field(0, ge=0, description="bytes")
    sm_utilization: float = Field(0, ge=0, description="0-100, may exceed 100 (reported upstream)")


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
