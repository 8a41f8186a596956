"""The endpoints, their parameters, and the checking of a list endpoint's query string.

One table, :data:`ENDPOINTS`, is what the routes are made from and what the
OpenAPI document describes; a query string is checked against the same table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from multidict import MultiMapping
from pydantic import BaseModel

from collector.views.listing import (
    CONTAINER_SORT_FIELDS,
    NODE_SORT_FIELDS,
    ListQuery,
    bad,
    check_names,
)
from collector.views.models import (
    ContainerList,
    NodeDetail,
    NodeList,
    PodDetail,
    ShardInfo,
    UsageReport,
)

PREFIX = "/api/v1"


@dataclass(frozen=True, slots=True)
class Param:
    """One parameter of an endpoint."""

    name: str
    where: Literal["path", "query"]
    description: str
    schema: Mapping[str, Any]


@dataclass(frozen=True, slots=True, eq=False)
class Endpoint:
    """One GET endpoint: its path, answer model, parameters and error answers."""

    path: str
    operation: str
    summary: str
    response: type[BaseModel] | None
    params: tuple[Param, ...] = ()
    errors: tuple[int, ...] = ()
    csv: bool = False
    """Whether ``format=csv`` answers ``text/csv`` too."""


def _sort_param(fields: Sequence[str]) -> Param:
    return Param(
        "sort",
        "query",
        "Field to sort by, ascending; prefix '-' for descending. Nulls sort last either way; "
        "ties keep the default order.",
        {"type": "string", "enum": [*fields, *(f"-{f}" for f in fields)]},
    )


_LIMIT = Param(
    "limit",
    "query",
    "Return at most this many items (after sorting).",
    {"type": "integer", "minimum": 1},
)
_NAMESPACE_FILTER = Param(
    "namespace",
    "query",
    "Only what belongs to this namespace (empty: no filter).",
    {"type": "string"},
)
_NODE_FILTER = Param("node", "query", "Only this node (empty: no filter).", {"type": "string"})

LIST_NODES = Endpoint(
    f"{PREFIX}/nodes",
    "listNodes",
    "Every node: cards, memory, utilisation, containers, sources, data age, health",
    NodeList,
    (
        Param(
            "namespace",
            "query",
            "Only nodes running a vGPU container of this namespace (empty: no filter).",
            {"type": "string"},
        ),
        _sort_param(NODE_SORT_FIELDS),
        _LIMIT,
    ),
    (400,),
)
GET_NODE = Endpoint(
    f"{PREFIX}/nodes/{{node}}",
    "getNode",
    "One node's cards with their usage and containers",
    NodeDetail,
    (Param("node", "path", "Node name", {"type": "string"}),),
    (404,),
)
LIST_CONTAINERS = Endpoint(
    f"{PREFIX}/pods",
    "listContainers",
    "Per-container vGPU usage rows of every node",
    ContainerList,
    (_NAMESPACE_FILTER, _NODE_FILTER, _sort_param(CONTAINER_SORT_FIELDS), _LIMIT),
    (400,),
)
GET_POD = Endpoint(
    f"{PREFIX}/namespaces/{{namespace}}/pods/{{pod}}",
    "getPod",
    "One pod's vGPU usage rows",
    PodDetail,
    (
        Param("namespace", "path", "Namespace", {"type": "string"}),
        Param("pod", "path", "Pod name", {"type": "string"}),
    ),
    (404,),
)
SHARDS = Endpoint(
    f"{PREFIX}/shards",
    "getShards",
    "This collector's shard (index, count, hash rule) and the nodes it holds",
    ShardInfo,
    (
        Param(
            "node",
            "query",
            "A node name: node_shard says which shard holds it (empty: none asked).",
            {"type": "string"},
        ),
    ),
    (400,),
)
USAGE = Endpoint(
    f"{PREFIX}/usage",
    "usageReport",
    "Chargeback: GPU memory and cores allocated and used per group over a window, idle share",
    UsageReport,
    (
        Param(
            "by",
            "query",
            "Group by namespace, pod (namespace and pod) or node (default namespace).",
            {"type": "string", "enum": ["namespace", "pod", "node"]},
        ),
        Param(
            "start",
            "query",
            "Window start, Unix seconds or RFC 3339 (default: as far back as the history holds).",
            {"type": "string"},
        ),
        Param(
            "end",
            "query",
            "Window end, Unix seconds or RFC 3339 (default: now).",
            {"type": "string"},
        ),
        Param(
            "format",
            "query",
            "json (default) or csv (one row per group, a header first).",
            {"type": "string", "enum": ["json", "csv"]},
        ),
    ),
    (400, 422, 503),
    csv=True,
)
OPENAPI = Endpoint(f"{PREFIX}/openapi.json", "openapi", "This document (OpenAPI 3.1)", None)
ENDPOINTS: tuple[Endpoint, ...] = (
    LIST_NODES,
    GET_NODE,
    LIST_CONTAINERS,
    GET_POD,
    SHARDS,
    USAGE,
    OPENAPI,
)


def query_names(endpoint: Endpoint) -> list[str]:
    """The query parameters ``endpoint`` takes."""
    return [p.name for p in endpoint.params if p.where == "query"]


def list_query(query: MultiMapping[str], endpoint: Endpoint) -> ListQuery:
    """Check a list endpoint's query string; raise a 400 :class:`ApiError` naming a bad parameter."""
    params = {p.name: p for p in endpoint.params if p.where == "query"}
    check_names(query, list(params))
    sort = query.get("sort") or None
    descending = False
    if sort is not None:
        allowed: list[str] = params["sort"].schema["enum"]
        if sort not in allowed:
            fields = [f for f in allowed if not f.startswith("-")]
            raise bad(
                f"query parameter 'sort': unknown field {sort[:40]!r}; allowed: {', '.join(fields)} "
                "(prefix '-' for descending)"
            )
        descending = sort.startswith("-")
        sort = sort.removeprefix("-")
    limit = None
    raw = query.get("limit")
    if raw is not None:
        if not (raw.isascii() and raw.isdigit() and len(raw) <= 12 and int(raw) > 0):
            raise bad(f"query parameter 'limit' must be a positive integer, not {raw[:40]!r}")
        limit = int(raw)
    filters = {
        name: query[name] for name in params if name not in ("sort", "limit") and query.get(name)
    }
    return ListQuery(filters, sort, descending, limit)
