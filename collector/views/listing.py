"""What a list of the read model is sorted by and filtered on, as REST and the pages ask.

The fields a node or container row may be sorted by, a checked list query, and
the one sort: nulls last, stable, then cut to the limit. A query string's
names are checked here for every list and report, REST's and the pages'.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from multidict import MultiMapping

from collector.views.models import ApiError

NODE_SORT_FIELDS = (
    "name",
    "card_count",
    "memory_used_bytes",
    "memory_total_bytes",
    "utilization_average_percent",
    "container_count",
    "data_age_seconds",
    "health",
)
"""Fields of a node summary that ``GET /api/v1/nodes?sort=`` accepts."""
READING_OF = {
    "namespace": "namespace",
    "pod": "pod",
    "container": "container",
    "vdevice_index": "vdevice_index",
    "device_uuid": "device_uuid",
    "memory_used_bytes": "memory_used",
    "memory_limit_bytes": "memory_limit",
    "sm_utilization_percent": "sm_utilization",
    "last_kernel_seconds": "last_kernel_seconds",
    "memory_allocated_bytes": "memory_allocated",
    "cores_allocated": "cores_allocated",
    "idle_seconds": "idle_seconds",
    "energy_joules": "energy",
}
"""API field of a container row -> attribute of its :class:`~collector.views.usage.ContainerReading`."""
CONTAINER_SORT_FIELDS = ("node", *READING_OF)
"""Fields of a container row that ``GET /api/v1/pods?sort=`` accepts."""


@dataclass(frozen=True, slots=True)
class ListQuery:
    """The checked query of a list endpoint."""

    filters: Mapping[str, str]
    sort: str | None
    descending: bool
    limit: int | None


def check_names(query: MultiMapping[str], allowed: Sequence[str]) -> None:
    """Raise a 400 :class:`~collector.views.models.ApiError` for a parameter not in
    ``allowed``, or one given twice."""
    for name in query:
        if name not in allowed:
            raise bad(f"unknown query parameter {name[:40]!r}; allowed: {', '.join(allowed)}")
        if len(query.getall(name)) > 1:
            raise bad(f"query parameter {name!r} is given more than once")


def bad(message: str) -> ApiError:
    """A 400 answer naming what is wrong with the query."""
    return ApiError(400, "bad_request", message)


T = TypeVar("T")


def sort_and_limit(
    items: list[T], query: ListQuery, value: Callable[[T, str], Any] = getattr
) -> list[T]:
    """Sort by the query's field (nulls last, stable) and cut to its limit."""
    if query.sort is not None:
        field = query.sort
        keyed = [(value(i, field), i) for i in items]
        present = [k for k in keyed if k[0] is not None]
        present.sort(key=lambda k: k[0], reverse=query.descending)
        items = [i for _, i in present] + [i for v, i in keyed if v is None]
    return items if query.limit is None else items[: query.limit]
