"""The answers' shapes: pydantic response models, and the error envelope as an exception.

The models are what :mod:`collector.web.rest.openapi` generates the schemas
from; an answer built by splicing cached JSON has the same fields in the same
order as its model. Their docstrings and field descriptions are the API's
documentation: plain text in its users' terms, no reStructuredText.
"""

from __future__ import annotations

from typing import Literal

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

JSON = "application/json"


class _Model(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="forbid", json_schema_serialization_defaults_required=True
    )


class Error(_Model):
    """Every error answer of the API."""

    status: Literal["error"] = "error"
    error: Literal[
        "not_found",
        "bad_request",
        "method_not_allowed",
        "too_large",
        "unsupported_media_type",
        "headers_too_large",
        "internal",
        "too_many_samples",
        "timeout",
        "unauthorized",
        "forbidden",
        "unavailable",
    ]
    message: str = Field(description="What was wrong; a bad query parameter is named here.")


class SourceRef(_Model):
    """A source feeding a node: a scrape target or a node agent."""

    kind: str = Field(description="hami, volcano, kai, agent, or allocation (the pod watch)")
    name: str = Field(description="namespace/pod of a monitor, host:port of a file target, …")


class CardUtilization(_Model):
    """One card's GPU core utilisation."""

    index: int | None = Field(description="device_index; null when the monitor sent none")
    device_uuid: str
    utilization_percent: float | None = Field(description="0-100; null when unknown")


class MemoryCompared(_Model):
    """The memory of the cards that report both their used memory and their total: the
    figures that used / total may compare."""

    cards: int = Field(description="cards reporting both")
    used_bytes: int = Field(description="their used memory")
    total_bytes: int = Field(description="their memory")
    allocated_bytes: int | None = Field(
        description="memory allocated to the vGPUs on those cards; null when none has a memory"
        " allocation"
    )


class NodeSummary(_Model):
    """One node at a glance. Each sum says which cards it covers: a card that reports no
    value counts in no sum (and never as 0)."""

    name: str
    card_count: int = Field(description="physical cards reported")
    card_types: list[str] = Field(description="distinct device_type values, sorted")
    card_models: list[str] = Field(
        description="the distinct card models as a person reads them (the NVML name, whatever"
        " vendor prefix device_type carries), sorted"
    )
    memory_used_bytes: int | None = Field(
        description="sum of the used memory of the cards that report it; null when none does"
    )
    memory_used_cards: int = Field(description="cards that memory_used_bytes covers")
    memory_total_bytes: int | None = Field(
        description="sum of the memory of the cards that report their total (from NVML or the"
        " scheduler's records); null when none does"
    )
    memory_total_cards: int = Field(description="cards that memory_total_bytes covers")
    memory_compared: MemoryCompared | None = Field(
        description="the cards that report both used and total memory; null when none does"
    )
    utilization: list[CardUtilization] = Field(description="per card, by index")
    utilization_average_percent: float | None = Field(
        description="mean core utilisation of the cards that report one"
    )
    container_count: int = Field(description="distinct vGPU containers (namespace/pod/container)")
    sources: list[SourceRef] = Field(description="what feeds the node, the preferred source first")
    data_age_seconds: float = Field(
        description="seconds since the newest batch of a monitor or agent (of the pod watch"
        " for an unreported node)"
    )
    health: Literal["ok", "stale", "unreported"] = Field(
        description="ok while the data age is at most twice the scrape interval; unreported"
        " when only the pod watch's allocations feed the node (no monitor or agent)"
    )


class NodeList(_Model):
    """The answer of GET /api/v1/nodes: the nodes matching the filters, sorted and limited."""

    status: Literal["success"] = "success"
    generation: int = Field(
        description="the state of the collector's data the answer was built from: answers with the same generation saw the same data"
    )
    total: int = Field(description="nodes matching the filters, before limit")
    nodes: list[NodeSummary]


class AllocationUse(_Model):
    """How much of its allocation a vGPU uses."""

    memory: float | None = Field(description="memory used / memory allocated")
    cores: float | None = Field(
        description="SM utilisation / cores allocated (both as shares of the card)"
    )


class ContainerUsage(_Model):
    """One vGPU of one container: its usage, and the allocation its pod requested.

    Readings its monitor does not send are null; so is the allocation of a
    container whose pod the collector does not know (or runs with --no-allocations).
    """

    namespace: str
    pod: str
    container: str
    vdevice_index: int | None
    device_uuid: str
    memory_used_bytes: int | None
    memory_limit_bytes: int | None
    sm_utilization_percent: float | None = Field(description="0-100 (HAMi-core may exceed 100)")
    last_kernel_seconds: float | None = Field(description="seconds since the last kernel ran")
    memory_context_bytes: int | None
    memory_module_bytes: int | None
    memory_buffer_bytes: int | None
    memory_allocated_bytes: int | None = Field(description="from the pod's allocation")
    cores_allocated: float | None = Field(
        description="share of the card's cores allocated, 0-1 (a 25% vGPU: 0.25)"
    )
    idle_seconds: float | None = Field(
        description="seconds since the last kernel, or since the pod started if none ran"
    )
    energy_joules: float | None = Field(
        None,
        description="estimated energy on the card since the node's agent started (its share of"
        " the card's, by SM utilisation); null without a node agent",
    )
    utilisation_of_allocation: AllocationUse | None = Field(
        description="null without an allocation"
    )


class _OnNode(_Model):
    node: str


class ContainerRow(ContainerUsage, _OnNode):
    """One vGPU of one container, with the node it runs on."""


OverAllocation = Literal["memory_oversubscribed", "cores_time_shared", "cores_oversubscribed"]
"""Why the allocations on a card add up to more than the card."""


class CardUsage(_Model):
    """One physical card, with the vGPU containers whose device_uuid is its UUID."""

    index: int | None
    device_uuid: str
    device_type: str | None = Field(description="null for Volcano, which sends none")
    model: str | None = Field(
        description="the card's model as a person reads it (device_type without the vendor prefix HAMi doubles)"
    )
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    utilization_percent: float | None
    memory_controller_utilization_percent: float | None
    temperature_celsius: float | None = Field(description="from node agents only")
    power_watts: float | None = Field(description="from node agents only")
    memory_allocated_bytes: int | None = Field(
        description="memory allocated to its containers, summed; null when none has a memory"
        " allocation"
    )
    cores_allocated: float | None = Field(
        description="shares of its cores allocated to its containers, summed (1: the whole"
        " card); null when none has a share"
    )
    over_allocated: list[OverAllocation] = Field(
        description="why the allocations exceed the card, if they do:"
        " memory_oversubscribed (more memory allocated than the card has: the scheduler"
        " scales the card's memory, as HAMi's deviceMemoryScaling does),"
        " cores_time_shared (several containers each given the whole card: time-slicing),"
        " cores_oversubscribed (shares summing past the whole card)"
    )
    containers: list[ContainerUsage]


class NodeDetail(_Model):
    """The answer of GET /api/v1/nodes/{node}: one node's cards, each with its vGPU containers."""

    status: Literal["success"] = "success"
    generation: int
    node: NodeSummary
    cards: list[CardUsage]
    unmatched_containers: list[ContainerUsage] = Field(
        description="containers whose device_uuid matches none of the node's cards"
    )


class ContainerList(_Model):
    """The answer of GET /api/v1/pods: one row per vGPU of a container."""

    status: Literal["success"] = "success"
    generation: int
    total: int = Field(description="rows matching the filters, before limit")
    containers: list[ContainerRow]


class PodDetail(_Model):
    """The answer of GET /api/v1/namespaces/{namespace}/pods/{pod}: the pod's vGPUs."""

    status: Literal["success"] = "success"
    generation: int
    namespace: str
    pod: str
    nodes: list[str] = Field(description="nodes reporting the pod (one, but for a moved pod)")
    vgpu_count: int = Field(description="the pod's container vGPUs")
    memory_used_bytes: int | None = Field(
        description="sum over the vGPUs that report their used memory; null when none does"
    )
    memory_used_vgpus: int = Field(description="vGPUs that memory_used_bytes covers")
    memory_limit_bytes: int | None = Field(
        description="sum over the vGPUs that report a limit; null when none does"
    )
    memory_allocated_bytes: int | None = Field(
        description="sum over the vGPUs with a memory allocation; null when none has one"
    )
    memory_allocated_vgpus: int = Field(description="vGPUs that memory_allocated_bytes covers")
    containers: list[ContainerRow]


class ShardInfo(_Model):
    """The answer of GET /api/v1/shards: this collector's shard and the nodes it holds."""

    status: Literal["success"] = "success"
    generation: int
    index: int = Field(description="this collector's shard, 0 .. count - 1")
    count: int = Field(description="how many shards the cluster's nodes are split over")
    hash: str = Field(description="the rule that puts a node in a shard")
    nodes: list[str] = Field(description="the nodes this shard has data of, sorted")
    node: str | None = Field(description="the node asked about with ?node=, if any")
    node_shard: int | None = Field(
        description="the shard that holds ?node= (whether or not it has data yet)"
    )


class UsageGroup(_Model):
    """What one namespace, pod or node was allocated and used over the window."""

    labels: dict[str, str] = Field(description="the group: {namespace}, {namespace, pod} or {node}")
    memory_allocated_byte_hours: float | None = Field(
        description="vGPU memory allocated x hours held; null when none of the group's vGPUs"
        " had a memory allocation in the window (whole cards have none)"
    )
    memory_used_byte_hours: float | None = Field(
        description="vGPU memory used x hours, every attributed vGPU counted (HAMi-core's"
        " reading, else the container's device memory from NVML); null when none reported"
    )
    cores_allocated_core_hours: float | None = Field(
        description="card shares allocated x hours (a 25% vGPU for an hour: 0.25); null when"
        " none had a share"
    )
    cores_used_core_hours: float | None = Field(
        description="SM utilisation (share of a card) x hours; null when none reported one"
    )
    idle_share: float | None = Field(
        description="share of the allocated core-hours held by vGPUs without a kernel for"
        " over 5 minutes; null without allocated cores"
    )


class UsageReport(_Model):
    """The answer of GET /api/v1/usage: chargeback / showback per group over a window of the history."""

    status: Literal["success"] = "success"
    by: Literal["namespace", "pod", "node"]
    start: float = Field(description="start of the window actually covered (Unix seconds)")
    end: float = Field(description="end of the window actually covered (Unix seconds)")
    requested_start: float
    requested_end: float
    step_seconds: float = Field(description="each point of the history counts for this long")
    groups: list[UsageGroup] = Field(
        description="by allocated memory, largest first (groups without a memory allocation last)"
    )


class ApiError(Exception):
    """An answer in the error envelope."""

    def __init__(
        self,
        status: int,
        error: Literal[
            "not_found", "bad_request", "too_many_samples", "timeout", "forbidden", "unavailable"
        ],
        message: str,
    ):
        super().__init__(message)
        self.status = status
        self.error = error
        self.message = message

    def response(self) -> web.Response:
        """The error envelope as a response."""
        body = Error(error=self.error, message=self.message).model_dump_json()
        return web.Response(status=self.status, text=body, content_type=JSON)
