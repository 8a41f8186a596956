"""A node's view in the API's forms, each built once per view and kept as JSON where it can be.

The summary's JSON is kept up to its two fields that change with time alone
(data age and health), so listing nodes splices those onto cached bytes; each
container row's JSON is kept whole.
"""

from __future__ import annotations

from typing import Any, Literal

import pydantic_core

from collector.auth.access import Access
from collector.normalise import labelsets
from collector.views.models import (
    CardUsage,
    ContainerRow,
    ContainerUsage,
    NodeDetail,
    NodeSummary,
)
from collector.views.usage import ContainerReading, NodeUsage

_TIMELY = {"data_age_seconds", "health"}


def health(
    age: float, interval: float, reported: bool = True
) -> Literal["ok", "stale", "unreported"]:
    """A node's health: ok while its data age is at most twice the scrape interval.

    ``unreported``: only the pod watch's allocations feed the node, no monitor or agent.
    """
    if not reported:
        return "unreported"
    return "ok" if age <= 2 * interval else "stale"


def container_usage(reading: ContainerReading) -> ContainerUsage:
    """The API form of a container reading."""
    return ContainerUsage(**_container_fields(reading))


def container_row(node: str, reading: ContainerReading) -> ContainerRow:
    """The API form of a container reading, with the node it runs on."""
    return ContainerRow(node=node, **_container_fields(reading))


def row_json(node: str, reading: ContainerReading) -> bytes:
    """The JSON of :func:`container_row`, written from the reading's fields without the model.

    Why: validating values the read model has already typed, then dumping the model,
    took 10 us a row; pydantic-core's serializer writes the same fields, in the model's
    order, as the same bytes in 4-5 us. A node has some 20 rows, and while REST's pod
    list is read, every node's are written again at every scrape.
    """
    fields = {"node": node, **_container_fields(reading)}
    return pydantic_core.to_json(fields, inf_nan_mode="null")  # as the models write them


def _container_fields(c: ContainerReading) -> dict[str, Any]:
    return {
        "namespace": c.namespace,
        "pod": c.pod,
        "container": c.container,
        "vdevice_index": c.vdevice_index,
        "device_uuid": c.device_uuid,
        "memory_used_bytes": c.memory_used,
        "memory_limit_bytes": c.memory_limit,
        "sm_utilization_percent": c.sm_utilization,
        "last_kernel_seconds": c.last_kernel_seconds,
        "memory_context_bytes": c.memory_context,
        "memory_module_bytes": c.memory_module,
        "memory_buffer_bytes": c.memory_buffer,
        "memory_allocated_bytes": c.memory_allocated,
        "cores_allocated": c.cores_allocated,
        "idle_seconds": c.idle_seconds,
        "energy_joules": c.energy,
        "utilisation_of_allocation": _use(c),
    }


def _use(c: ContainerReading) -> dict[str, float | None] | None:
    if c.memory_allocated is None and c.cores_allocated is None:
        return None
    memory = cores = None
    if c.memory_allocated and c.memory_used is not None:
        memory = c.memory_used / c.memory_allocated
    if c.cores_allocated and c.sm_utilization is not None:
        cores = c.sm_utilization / 100 / c.cores_allocated
    return {"memory": memory, "cores": cores}


class Presented:
    """The API forms of one :class:`NodeUsage`, each built on first use.

    ``wanted``: the forms read of the node's earlier views. What was read of a
    node's last view is read of its next one (the views read every node's
    containers, REST's pod list every row), so warming builds those ahead of
    their readers; a request builds only what it reads, and hands the wish on.
    """

    __slots__ = ("_pods", "_rows", "_wanted", "fragment", "summary", "usage")

    def __init__(self, usage: NodeUsage, wanted: frozenset[str] = frozenset()) -> None:
        self.usage = usage
        self._wanted = wanted
        view = usage.view
        # One validation for the whole summary: the nested models come as plain dicts.
        self.summary = NodeSummary.model_validate(
            {
                "name": view.node,
                "card_count": len(usage.cards),
                "card_types": usage.card_types,
                "memory_used_bytes": usage.memory_used,
                "memory_total_bytes": usage.memory_total,
                "utilization": [
                    {
                        "index": c.device_index,
                        "device_uuid": c.device_uuid,
                        "utilization_percent": c.utilization,
                    }
                    for c in usage.cards
                ],
                "utilization_average_percent": usage.utilization_average,
                "container_count": usage.container_count,
                "sources": [{"kind": h.source.kind, "name": h.source.name} for h in view.sources],
                "data_age_seconds": 0.0,
                "health": "ok",
            }
        )
        # The summary's JSON up to its last two fields, which change with time alone.
        self.fragment = self.summary.model_dump_json(exclude=_TIMELY).encode()[:-1]
        self._rows: tuple[tuple[ContainerReading, bytes], ...] | None = None
        self._pods: dict[tuple[str, str], list[ContainerReading]] | None = None

    @property
    def wanted(self) -> frozenset[str]:
        """The forms built on use of this view, or wanted of the node's views before it."""
        built = (
            ("containers", self.usage.containers_read),
            ("rows", self._rows is not None),
            ("pods", self._pods is not None),
        )
        return self._wanted | {form for form, made in built if made}

    def build_wanted(self) -> None:
        """Build the forms :attr:`wanted` now (warming: their readers will come for them)."""
        wanted = self._wanted
        if "containers" in wanted:
            self.usage.containers  # noqa: B018 (a property, built on first use)
        if "rows" in wanted:
            self.rows()
        if "pods" in wanted:
            self.pod("", "")

    def age(self, now: float) -> float:
        """Seconds from the newest batch behind the view to ``now`` (monotonic)."""
        return round(max(now - self.usage.newest, 0.0), 3)

    def at(self, now: float, interval: float) -> NodeSummary:
        """The summary with its data age and health as of ``now``."""
        age = self.age(now)
        return self.summary.model_copy(
            update={"data_age_seconds": age, "health": self.health(age, interval)}
        )

    def health(self, age: float, interval: float) -> Literal["ok", "stale", "unreported"]:
        """The node's health at data age ``age``."""
        return health(age, interval, self.usage.reported)

    def json_at(self, age: float, health: str) -> bytes:
        """The summary's JSON, given its data age and health."""
        return b'%s,"data_age_seconds":%s,"health":"%s"}' % (
            self.fragment,
            repr(age).encode(),  # a finite float's repr is JSON
            health.encode(),
        )

    def rows(self) -> tuple[tuple[ContainerReading, bytes], ...]:
        """Every container vGPU of the node with its ``ContainerRow`` JSON (kept as bytes)."""
        if self._rows is None:
            node = self.usage.node
            self._rows = tuple((c, row_json(node, c)) for c in self.usage.containers)
        return self._rows

    def pod(self, namespace: str, pod: str) -> list[ContainerReading]:
        """The container vGPUs of one pod on this node."""
        if self._pods is None:
            pods: dict[tuple[str, str], list[ContainerReading]] = {}
            for c in self.usage.containers:
                pods.setdefault((c.namespace, c.pod), []).append(c)
            self._pods = pods
        return self._pods.get((namespace, pod), [])

    def tenant_view(self, access: Access) -> TenantView | None:
        """What a tenant sees of the node: its own containers, none of the cards' readings
        (a card's series have no namespace); None when it has no container here."""
        if access.namespaces is None or not access.namespaces & self.usage.namespaces:
            return None
        return TenantView(self, tuple(c for c in self.usage.containers if access.sees(c.namespace)))

    def detail(self, generation: int, summary: NodeSummary) -> NodeDetail:
        """The node with its cards and their containers."""
        by_card: dict[str, list[ContainerUsage]] = {
            c.device_uuid: [] for c in self.usage.cards if c.device_uuid
        }
        unmatched: list[ContainerUsage] = []
        for reading in self.usage.containers:
            by_card.get(reading.device_uuid, unmatched).append(container_usage(reading))
        cards = [
            CardUsage(
                index=c.device_index,
                device_uuid=c.device_uuid,
                device_type=c.device_type,
                model=None if c.device_type is None else labelsets.card_model(c.device_type),
                memory_used_bytes=c.memory_used,
                memory_total_bytes=c.memory_total,
                utilization_percent=c.utilization,
                memory_controller_utilization_percent=c.memory_controller_utilization,
                temperature_celsius=c.temperature,
                power_watts=c.power,
                containers=by_card.get(c.device_uuid, []) if c.device_uuid else [],
            )
            for c in self.usage.cards
        ]
        return NodeDetail(
            generation=generation, node=summary, cards=cards, unmatched_containers=unmatched
        )


class TenantView:
    """A node as a tenant sees it: its containers, and the cards only by their identity."""

    __slots__ = ("containers", "presented")

    def __init__(self, presented: Presented, containers: tuple[ContainerReading, ...]) -> None:
        self.presented = presented
        self.containers = containers

    def summary(self, now: float, interval: float) -> NodeSummary:
        """The node's summary over the tenant's containers: no card figures, no sources."""
        presented = self.presented
        age = presented.age(now)
        used = [c.memory_used for c in self.containers if c.memory_used is not None]
        return NodeSummary(
            name=presented.usage.node,
            card_count=0,
            card_types=[],
            memory_used_bytes=sum(used) if used else None,
            memory_total_bytes=None,
            utilization=[],
            utilization_average_percent=None,
            container_count=len({(c.namespace, c.pod, c.container) for c in self.containers}),
            sources=[],
            data_age_seconds=age,
            health=presented.health(age, interval),
        )

    def detail(self, generation: int, summary: NodeSummary) -> NodeDetail:
        """The tenant's containers under the cards they use, the cards' readings left out."""
        by_card: dict[str, list[ContainerUsage]] = {}
        for reading in self.containers:
            by_card.setdefault(reading.device_uuid, []).append(container_usage(reading))
        known = {c.device_uuid: c for c in self.presented.usage.cards if c.device_uuid}
        cards = [
            CardUsage(
                index=known[uuid].device_index,
                device_uuid=uuid,
                device_type=known[uuid].device_type,
                model=None,
                memory_used_bytes=None,
                memory_total_bytes=None,
                utilization_percent=None,
                memory_controller_utilization_percent=None,
                temperature_celsius=None,
                power_watts=None,
                containers=containers,
            )
            for uuid, containers in sorted(by_card.items())
            if uuid in known
        ]
        unmatched = [c for uuid, found in by_card.items() if uuid not in known for c in found]
        return NodeDetail(
            generation=generation, node=summary, cards=cards, unmatched_containers=unmatched
        )
