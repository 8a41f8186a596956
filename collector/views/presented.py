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
    OverAllocation,
    PodDetail,
)
from collector.views.usage import CardReading, ContainerReading, NodeUsage

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
                "card_models": usage.card_models,
                "memory_used_bytes": usage.memory_used,
                "memory_used_cards": usage.memory_used_cards,
                "memory_total_bytes": usage.memory_total,
                "memory_total_cards": usage.memory_total_cards,
                "memory_compared": None
                if usage.compared is None
                else {
                    "cards": usage.compared.cards,
                    "used_bytes": usage.compared.used,
                    "total_bytes": usage.compared.total,
                    "allocated_bytes": usage.compared.allocated,
                },
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
            card_usage(c, by_card.get(c.device_uuid, []) if c.device_uuid else [])
            for c in self.usage.cards
        ]
        return NodeDetail(
            generation=generation, node=summary, cards=cards, unmatched_containers=unmatched
        )


def card_usage(card: CardReading, containers: list[ContainerUsage]) -> CardUsage:
    """The API form of a card with its containers, and what they were allocated on it."""
    memory = [c.memory_allocated_bytes for c in containers if c.memory_allocated_bytes is not None]
    cores = [c.cores_allocated for c in containers if c.cores_allocated is not None]
    allocated = sum(memory) if memory else None
    shares = sum(cores) if cores else None
    return CardUsage(
        index=card.device_index,
        device_uuid=card.device_uuid,
        device_type=card.device_type,
        model=None if card.device_type is None else labelsets.card_model(card.device_type),
        memory_used_bytes=card.memory_used,
        memory_total_bytes=card.memory_total,
        utilization_percent=card.utilization,
        memory_controller_utilization_percent=card.memory_controller_utilization,
        temperature_celsius=card.temperature,
        power_watts=card.power,
        memory_allocated_bytes=allocated,
        cores_allocated=shares,
        over_allocated=over_allocated(allocated, card.memory_total, cores),
        containers=containers,
    )


WHOLE_CARD = 1 - 1e-9
"""A core share at least this is the whole card (shares are sums of floats)."""


def over_allocated(
    memory: int | None, total: int | None, cores: list[float]
) -> list[OverAllocation]:
    """Why a card's allocations exceed it: more memory than it has (the scheduler scales
    it, as HAMi's ``deviceMemoryScaling`` does), several containers each given the whole
    card (time-slicing), or shares summing past the whole card."""
    found: list[OverAllocation] = []
    if memory is not None and total is not None and memory > total:
        found.append("memory_oversubscribed")
    if sum(cores) > 1 + 1e-9:
        whole = sum(1 for share in cores if share >= WHOLE_CARD)
        found.append("cores_time_shared" if whole >= 2 else "cores_oversubscribed")
    return found


def _known_sum(values: list[int | None]) -> tuple[int | None, int]:
    """The sum of the known values (None when none is) and how many there are."""
    known = [v for v in values if v is not None]
    return (sum(known) if known else None), len(known)


def pod_detail(generation: int, namespace: str, pod: str, rows: list[ContainerRow]) -> PodDetail:
    """One pod's vGPUs and their sums, each over the vGPUs that report it."""
    used, used_count = _known_sum([r.memory_used_bytes for r in rows])
    limit, _ = _known_sum([r.memory_limit_bytes for r in rows])
    allocated, allocated_count = _known_sum([r.memory_allocated_bytes for r in rows])
    return PodDetail(
        generation=generation,
        namespace=namespace,
        pod=pod,
        nodes=sorted({r.node for r in rows}),
        vgpu_count=len(rows),
        memory_used_bytes=used,
        memory_used_vgpus=used_count,
        memory_limit_bytes=limit,
        memory_allocated_bytes=allocated,
        memory_allocated_vgpus=allocated_count,
        containers=rows,
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
            card_models=[],
            memory_used_bytes=sum(used) if used else None,
            memory_used_cards=0,
            memory_total_bytes=None,
            memory_total_cards=0,
            memory_compared=None,
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
                memory_allocated_bytes=None,
                cores_allocated=None,
                over_allocated=[],
                containers=containers,
            )
            for uuid, containers in sorted(by_card.items())
            if uuid in known
        ]
        unmatched = [c for uuid, found in by_card.items() if uuid not in known for c in found]
        return NodeDetail(
            generation=generation, node=summary, cards=cards, unmatched_containers=unmatched
        )
