"""The answers' shapes: pydantic response models, and the error envelope as an exception.

The models are what :mod:`collector.web.rest.openapi` generates the schemas
from; an answer built by splicing cached JSON has the same fields in the same
order as its model.
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
    ]
    message: str = Field(description="What was wrong; a bad query parameter is named here.")


class SourceRef(_Model):
    """A source feeding a node: a scrape target or a node agent."""

    kind: str = Field(description="hami, volcano, kai or agent")
    name: str = Field(description="namespace/pod of a monitor, host:port of a file target, …")


class CardUtilization(_Model):
    """One card's GPU core utilisation."""

    index: int | None = Field(description="device_index; null when the monitor sent none")
    device_uuid: str
    utilization_percent: float | None = Field(description="0-100; null when unknown")


class NodeSummary(_Model):
    """One node at a glance."""

    name: str
    card_count: int = Field(description="physical cards reported")
    card_types: list[str] = Field(description="distinct device_type values, sorted")
    memory_used_bytes: int | None = Field(description="sum of the cards' used memory")
    memory_total_bytes: int | None = Field(
        description="sum of the cards' memory; null unless every card reports its total"
    )
    utilization: list[CardUtilization] = Field(description="per card, by index")
    utilization_average_percent: float | None = Field(
        description="mean core utilisation of the cards that report one"
    )
    container_count: int = Field(description="distinct vGPU containers (namespace/pod/container)")
    sources: list[SourceRef] = Field(description="what feeds the node, the preferred source first")
    data_age_seconds: float = Field(description="seconds since the newest batch of any source")
    health: Literal["ok", "stale"] = Field(
        description="ok while the data age is at most twice the scrape interval"
    )


class NodeList(_Model):
    """``GET /api/v1/nodes``."""

    status: Literal["success"] = "success"
    generation: int = Field(description="the store generation the answer was built from")
    total: int = Field(description="nodes matching the filters, before limit")
    nodes: list[NodeSummary]


class ContainerUsage(_Model):
    """One vGPU of one container; readings its monitor does not send are null."""

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


class _OnNode(_Model):
    node: str


class ContainerRow(ContainerUsage, _OnNode):
    """One vGPU of one container, with the node it runs on."""


class CardUsage(_Model):
    """One physical card, with the vGPU containers whose device_uuid is its UUID."""

    index: int | None
    device_uuid: str
    device_type: str | None = Field(description="null for Volcano, which sends none")
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    utilization_percent: float | None
    memory_controller_utilization_percent: float | None
    temperature_celsius: float | None = Field(description="from node agents only")
    power_watts: float | None = Field(description="from node agents only")
    containers: list[ContainerUsage]


class NodeDetail(_Model):
    """``GET /api/v1/nodes/{node}``."""

    status: Literal["success"] = "success"
    generation: int
    node: NodeSummary
    cards: list[CardUsage]
    unmatched_containers: list[ContainerUsage] = Field(
        description="containers whose device_uuid matches none of the node's cards"
    )


class ContainerList(_Model):
    """``GET /api/v1/pods``: one row per vGPU of a container."""

    status: Literal["success"] = "success"
    generation: int
    total: int = Field(description="rows matching the filters, before limit")
    containers: list[ContainerRow]


class PodDetail(_Model):
    """``GET /api/v1/namespaces/{namespace}/pods/{pod}``."""

    status: Literal["success"] = "success"
    generation: int
    namespace: str
    pod: str
    nodes: list[str] = Field(description="nodes reporting the pod (one, but for a moved pod)")
    memory_used_bytes: int = Field(description="sum over the pod's vGPUs")
    memory_limit_bytes: int = Field(description="sum over the pod's vGPUs")
    containers: list[ContainerRow]


class ApiError(Exception):
    """An answer in the error envelope."""

    def __init__(self, status: int, error: Literal["not_found", "bad_request"], message: str):
        super().__init__(message)
        self.status = status
        self.error = error
        self.message = message

    def response(self) -> web.Response:
        """The error envelope as a response."""
        body = Error(error=self.error, message=self.message).model_dump_json()
        return web.Response(status=self.status, text=body, content_type=JSON)
