"""``/api/v1/…``: what each node, card and vGPU container is using right now, as JSON.

Every response is built synchronously from the store, with no ``await`` between
reading two node views, so it never mixes two store generations; it names the
generation it was built from. What a node's view says is parsed once per view
(:mod:`collector.web.usage`) and its summary kept with it, so listing every
node costs a cache lookup per unchanged node plus the JSON encoding.

Errors share one envelope, ``{"status": "error", "error": "not_found" |
"bad_request", "message": "…"}``; a bad query parameter is named in the message.
``GET /api/v1/openapi.json`` describes every endpoint, generated from the
response models below.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from aiohttp import web
from multidict import MultiMapping
from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import models_json_schema

from collector import __version__
from collector.settings import CollectorSettings
from collector.store import Store
from collector.web.usage import ContainerReading, NodeUsage, UsageIndex

log = logging.getLogger(__name__)

PREFIX = "/api/v1"
JSON = "application/json"
WARM_PERIOD_S = 0.25
WARM_BUDGET_S = 0.01

# --------------------------------------------------------------------------
# Response models
# --------------------------------------------------------------------------


class _Model(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="forbid", json_schema_serialization_defaults_required=True
    )


class Error(_Model):
    """Every error answer of the API."""

    status: Literal["error"] = "error"
    error: Literal["not_found", "bad_request"]
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
_READING_OF = {
    "namespace": "namespace",
    "pod": "pod",
    "container": "container",
    "vdevice_index": "vdevice_index",
    "device_uuid": "device_uuid",
    "memory_used_bytes": "memory_used",
    "memory_limit_bytes": "memory_limit",
    "sm_utilization_percent": "sm_utilization",
    "last_kernel_seconds": "last_kernel_seconds",
}
"""API field of a container row -> attribute of its :class:`ContainerReading` (for sorting)."""
CONTAINER_SORT_FIELDS = ("node", *_READING_OF)

# --------------------------------------------------------------------------
# Endpoints and their parameters (one table: the routes and the OpenAPI document)
# --------------------------------------------------------------------------


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
OPENAPI = Endpoint(f"{PREFIX}/openapi.json", "openapi", "This document (OpenAPI 3.1)", None)
ENDPOINTS: tuple[Endpoint, ...] = (LIST_NODES, GET_NODE, LIST_CONTAINERS, GET_POD, OPENAPI)

# --------------------------------------------------------------------------
# Handlers
# --------------------------------------------------------------------------


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


def _bad(message: str) -> ApiError:
    return ApiError(400, "bad_request", message)


@dataclass(frozen=True, slots=True)
class ListQuery:
    """The checked query of a list endpoint."""

    filters: Mapping[str, str]
    sort: str | None
    descending: bool
    limit: int | None


def list_query(query: MultiMapping[str], endpoint: Endpoint) -> ListQuery:
    """Check a list endpoint's query string; raise a 400 :class:`ApiError` naming a bad parameter."""
    params = {p.name: p for p in endpoint.params if p.where == "query"}
    for name in query:
        if name not in params:
            raise _bad(f"unknown query parameter {name[:40]!r}; allowed: {', '.join(params)}")
        if len(query.getall(name)) > 1:
            raise _bad(f"query parameter {name!r} is given more than once")
    sort = query.get("sort") or None
    descending = False
    if sort is not None:
        allowed: list[str] = params["sort"].schema["enum"]
        if sort not in allowed:
            fields = [f for f in allowed if not f.startswith("-")]
            raise _bad(
                f"query parameter 'sort': unknown field {sort[:40]!r}; allowed: {', '.join(fields)} "
                "(prefix '-' for descending)"
            )
        descending = sort.startswith("-")
        sort = sort.removeprefix("-")
    limit = None
    raw = query.get("limit")
    if raw is not None:
        if not (raw.isascii() and raw.isdigit() and len(raw) <= 12 and int(raw) > 0):
            raise _bad(f"query parameter 'limit' must be a positive integer, not {raw[:40]!r}")
        limit = int(raw)
    filters = {
        name: query[name] for name in params if name not in ("sort", "limit") and query.get(name)
    }
    return ListQuery(filters, sort, descending, limit)


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


def container_usage(reading: ContainerReading) -> ContainerUsage:
    """The API form of a container reading."""
    return ContainerUsage(**_container_fields(reading))


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
    }


class _Presented:
    """The API forms of one :class:`NodeUsage`, each built on first use."""

    __slots__ = ("_pods", "_rows", "fragment", "summary", "usage")

    def __init__(self, usage: NodeUsage) -> None:
        self.usage = usage
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

    def age(self, now: float) -> float:
        """Seconds from the newest batch behind the view to ``now`` (monotonic)."""
        return round(max(now - self.usage.newest, 0.0), 3)

    def at(self, now: float, interval: float) -> NodeSummary:
        """The summary with its data age and health as of ``now``."""
        age = self.age(now)
        return self.summary.model_copy(
            update={"data_age_seconds": age, "health": _health(age, interval)}
        )

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
            self._rows = tuple(
                (c, ContainerRow(node=node, **_container_fields(c)).model_dump_json().encode())
                for c in self.usage.containers
            )
        return self._rows

    def pod(self, namespace: str, pod: str) -> list[ContainerReading]:
        """The container vGPUs of one pod on this node."""
        if self._pods is None:
            pods: dict[tuple[str, str], list[ContainerReading]] = {}
            for c in self.usage.containers:
                pods.setdefault((c.namespace, c.pod), []).append(c)
            self._pods = pods
        return self._pods.get((namespace, pod), [])

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


Handler = Callable[[web.Request], Awaitable[web.Response]]
_TIMELY = {"data_age_seconds", "health"}


def _health(age: float, interval: float) -> Literal["ok", "stale"]:
    return "ok" if age <= 2 * interval else "stale"


class RestApi:
    """The handlers, and the per-node caches they share (valid while a node's view is current)."""

    def __init__(self, store_key: web.AppKey[Store], settings_key: web.AppKey[CollectorSettings]):
        self._store_key = store_key
        self._settings_key = settings_key
        self._index = UsageIndex()
        self._presented: dict[str, _Presented] = {}
        self._openapi: bytes | None = None

    def routes(self) -> list[web.RouteDef]:
        """One GET route per :data:`ENDPOINTS` entry."""
        handlers: dict[Endpoint, Handler] = {
            LIST_NODES: self.list_nodes,
            GET_NODE: self.get_node,
            LIST_CONTAINERS: self.list_containers,
            GET_POD: self.get_pod,
            OPENAPI: self.openapi,
        }
        # A path parameter may hold braces (label values are not Kubernetes names).
        return [
            web.get(re.sub(r"{(\w+)}", r"{\1:[^/]+}", e.path), _answering(handlers[e]))
            for e in ENDPOINTS
        ]

    # -- the handlers: synchronous bodies, so one answer is one store generation --

    async def list_nodes(self, request: web.Request) -> web.Response:
        """``GET /api/v1/nodes``."""
        query = list_query(request.query, LIST_NODES)
        store, interval = request.app[self._store_key], request.app[self._settings_key].interval
        now = time.monotonic()
        namespace = query.filters.get("namespace")
        # (presented, data age): JSON is spliced from each node's cached fragment.
        nodes = [
            (p, p.age(now))
            for p in self._all(store)
            if namespace is None or namespace in p.usage.namespaces
        ]

        def value(item: tuple[_Presented, float], field: str) -> Any:
            if field == "data_age_seconds":
                return item[1]
            if field == "health":
                return _health(item[1], interval)
            return getattr(item[0].summary, field)

        chosen = sort_and_limit(nodes, query, value)
        body = b'{"status":"success","generation":%d,"total":%d,"nodes":[%s]}' % (
            store.generation,
            len(nodes),
            b",".join(p.json_at(age, _health(age, interval)) for p, age in chosen),
        )
        return web.Response(body=body, content_type=JSON)

    async def get_node(self, request: web.Request) -> web.Response:
        """``GET /api/v1/nodes/{node}``."""
        store, interval = request.app[self._store_key], request.app[self._settings_key].interval
        node = request.match_info["node"]
        presented = self._one(store, node)
        if presented is None:
            raise ApiError(404, "not_found", f"no node {node!r} has data")
        summary = presented.at(time.monotonic(), interval)
        return _json(presented.detail(store.generation, summary))

    async def list_containers(self, request: web.Request) -> web.Response:
        """``GET /api/v1/pods``."""
        query = list_query(request.query, LIST_CONTAINERS)
        store = request.app[self._store_key]
        node = query.filters.get("node")
        namespace = query.filters.get("namespace")
        if node is not None:
            one = self._one(store, node)
            nodes = [] if one is None else [one]
        else:
            nodes = self._all(store)
        # (node, reading, row JSON): JSON is joined from each node's cached rows.
        rows: list[tuple[str, ContainerReading, bytes]] = []
        for presented in nodes:
            name = presented.usage.node
            if namespace is None:
                rows.extend((name, c, row) for c, row in presented.rows())
            elif namespace in presented.usage.namespaces:
                rows.extend(
                    (name, c, row) for c, row in presented.rows() if c.namespace == namespace
                )

        def value(item: tuple[str, ContainerReading, bytes], field: str) -> Any:
            return item[0] if field == "node" else getattr(item[1], _READING_OF[field])

        chosen = sort_and_limit(rows, query, value)
        body = b'{"status":"success","generation":%d,"total":%d,"containers":[%s]}' % (
            store.generation,
            len(rows),
            b",".join(row for _, _, row in chosen),
        )
        return web.Response(body=body, content_type=JSON)

    async def get_pod(self, request: web.Request) -> web.Response:
        """``GET /api/v1/namespaces/{namespace}/pods/{pod}``."""
        store = request.app[self._store_key]
        namespace, pod = request.match_info["namespace"], request.match_info["pod"]
        rows: list[ContainerRow] = []
        for presented in self._all(store):
            if namespace in presented.usage.namespaces:
                node = presented.usage.node
                rows.extend(
                    ContainerRow(node=node, **_container_fields(c))
                    for c in presented.pod(namespace, pod)
                )
        if not rows:
            raise ApiError(404, "not_found", f"no pod {namespace}/{pod} has vGPU data")
        body = PodDetail(
            generation=store.generation,
            namespace=namespace,
            pod=pod,
            nodes=sorted({r.node for r in rows}),
            memory_used_bytes=sum(r.memory_used_bytes or 0 for r in rows),
            memory_limit_bytes=sum(r.memory_limit_bytes or 0 for r in rows),
            containers=rows,
        )
        return _json(body)

    async def openapi(self, request: web.Request) -> web.Response:
        """``GET /api/v1/openapi.json``."""
        if self._openapi is None:
            self._openapi = json.dumps(openapi_document(), indent=1).encode()
        return web.Response(body=self._openapi, content_type=JSON)

    # -- keeping the read model warm --

    async def warming(self, app: web.Application) -> AsyncIterator[None]:
        """A cleanup context: between requests, bring changed nodes' summaries up to date.

        A slice of at most ``WARM_BUDGET_S`` every ``WARM_PERIOD_S``, so a request
        finds little to rebuild and the event loop is never held for long.
        """

        async def loop() -> None:
            store = app[self._store_key]
            while True:
                await asyncio.sleep(WARM_PERIOD_S)
                try:
                    self.refresh(store, WARM_BUDGET_S)
                except Exception:
                    log.exception("refreshing the REST read model failed")

        task = asyncio.create_task(loop(), name="rest api warming")
        try:
            yield
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def refresh(self, store: Store, budget: float) -> bool:
        """Rebuild stale node summaries for about ``budget`` seconds; True once all are current."""
        deadline = time.perf_counter() + budget
        nodes = store.nodes()
        for node in nodes:
            view = store.view(node)
            cached = self._presented.get(node)
            if view is None or (cached is not None and cached.usage.view is view):
                continue
            if time.perf_counter() > deadline:
                return False
            self._one(store, node)
        self._prune(nodes)
        return True

    # -- the read model --

    def _all(self, store: Store) -> list[_Presented]:
        nodes = store.nodes()
        out = []
        for node in nodes:
            presented = self._one(store, node)
            if presented is not None:
                out.append(presented)
        if len(self._presented) > len(out):
            self._prune(p.usage.node for p in out)
        return out

    def _prune(self, nodes: Iterable[str]) -> None:
        live = set(nodes)
        for gone in self._presented.keys() - live:
            del self._presented[gone]
        self._index.prune(live)

    def _one(self, store: Store, node: str) -> _Presented | None:
        view = store.view(node)
        if view is None:
            return None
        presented = self._presented.get(node)
        if presented is None or presented.usage.view is not view:
            presented = _Presented(self._index.usage(view))
            self._presented[node] = presented
        return presented


def routes(
    store_key: web.AppKey[Store], settings_key: web.AppKey[CollectorSettings]
) -> list[web.RouteDef]:
    """The REST API's routes, reading the store and settings the app holds under these keys."""
    return RestApi(store_key, settings_key).routes()


def _answering(handler: Handler) -> Handler:
    async def answer(request: web.Request) -> web.Response:
        try:
            return await handler(request)
        except ApiError as error:
            return error.response()

    return answer


def _json(model: BaseModel) -> web.Response:
    return web.Response(body=model.model_dump_json().encode(), content_type=JSON)


# --------------------------------------------------------------------------
# OpenAPI
# --------------------------------------------------------------------------

_ERRORS = {
    400: ("BadRequest", "A query parameter is unknown, repeated or invalid; the message names it."),
    404: ("NotFound", "No such node or pod has data."),
}


def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of :data:`ENDPOINTS`, schemas generated from the models."""
    models: list[type[BaseModel]] = [Error]
    models += [e.response for e in ENDPOINTS if e.response is not None]
    refs, definitions = models_json_schema(
        [(m, "serialization") for m in models], ref_template="#/components/schemas/{model}"
    )
    ref = {m: refs[(m, "serialization")] for m in models}
    paths: dict[str, Any] = {}
    for endpoint in ENDPOINTS:
        responses: dict[str, Any] = {
            "200": {
                "description": endpoint.summary,
                "content": {
                    JSON: {
                        "schema": ref[endpoint.response]
                        if endpoint.response is not None
                        else {"type": "object", "description": "an OpenAPI 3.1 document"}
                    }
                },
            }
        }
        for status in endpoint.errors:
            responses[str(status)] = {"$ref": f"#/components/responses/{_ERRORS[status][0]}"}
        operation: dict[str, Any] = {
            "operationId": endpoint.operation,
            "summary": endpoint.summary,
            "responses": responses,
        }
        if endpoint.params:
            operation["parameters"] = [_parameter(p) for p in endpoint.params]
        paths[endpoint.path] = {"get": operation}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "hami-usage-collector",
            "version": __version__,
            "description": (__doc__ or "").strip(),
        },
        "paths": paths,
        "components": {
            "schemas": definitions.get("$defs", {}),
            "responses": {
                name: {
                    "description": description,
                    "content": {JSON: {"schema": ref[Error]}},
                }
                for name, description in _ERRORS.values()
            },
        },
    }


def _parameter(param: Param) -> dict[str, Any]:
    return {
        "name": param.name,
        "in": param.where,
        "required": param.where == "path",
        "description": param.description,
        "schema": dict(param.schema),
    }
