"""The REST API's handlers: one answer per request, built from one store generation.

Each handler's body is synchronous, so no ``await`` falls between reading two
node views. List answers are spliced from each node's cached JSON
(:mod:`collector.views.presented`); the others are validated models.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any

from aiohttp import web
from pydantic import BaseModel

from collector.auth.access import Access, access_of
from collector.store.latest import Store
from collector.views.cache import NodeCache
from collector.views.chargeback import GROUPS, Chargeback, to_csv
from collector.views.listing import READING_OF, ListQuery, bad, check_names, sort_and_limit
from collector.views.models import (
    JSON,
    ApiError,
    ContainerRow,
    NodeList,
    ShardInfo,
)
from collector.views.presented import Presented, TenantView, container_row, pod_detail
from collector.views.usage import ContainerReading
from collector.web.rest.endpoints import (
    ENDPOINTS,
    GET_NODE,
    GET_POD,
    LIST_CONTAINERS,
    LIST_NODES,
    OPENAPI,
    SHARDS,
    USAGE,
    Endpoint,
    list_query,
    query_names,
)
from collector.web.rest.openapi import openapi_document
from core.shards import HASH_RULE, WHOLE, Shard, shard_of
from core.tasks import Supervisor

Handler = Callable[[web.Request], Awaitable[web.Response]]


class RestApi:
    """The handlers, reading the store the app holds under ``store_key``.

    ``interval`` is the scrape interval a node's data age is judged by: a node
    is stale once its data is older than twice that. ``tasks`` names the app's
    :class:`Supervisor`, which runs the warming task (:meth:`warming`); without
    it, the warming task has a supervisor of its own. ``nodes`` is the cache of
    presented nodes (a fresh one by default).
    """

    def __init__(
        self,
        store_key: web.AppKey[Store],
        interval: float,
        chargeback: Chargeback | None = None,
        shard: Shard = WHOLE,
        tasks: web.AppKey[Supervisor] | None = None,
        nodes: NodeCache | None = None,
    ) -> None:
        self._store_key = store_key
        self._interval = interval
        self._chargeback = chargeback
        self._shard = shard
        self._tasks = tasks
        self._nodes = nodes if nodes is not None else NodeCache()
        self._openapi: bytes | None = None

    def routes(self) -> list[web.RouteDef]:
        """One GET route per :data:`ENDPOINTS` entry."""
        handlers: dict[Endpoint, Handler] = {
            LIST_NODES: self.list_nodes,
            GET_NODE: self.get_node,
            LIST_CONTAINERS: self.list_containers,
            GET_POD: self.get_pod,
            SHARDS: self.shards,
            USAGE: self.usage,
            OPENAPI: self.openapi,
        }
        # A path parameter may hold braces (label values are not Kubernetes names).
        return [
            web.get(
                re.sub(r"{(\w+)}", r"{\1:[^/]+}", e.path),
                _answering(handlers[e], self._nodes.read),
            )
            for e in ENDPOINTS
        ]

    async def list_nodes(self, request: web.Request) -> web.Response:
        """``GET /api/v1/nodes``."""
        query = list_query(request.query, LIST_NODES)
        store, interval = request.app[self._store_key], self._interval
        now = time.monotonic()
        namespace = query.filters.get("namespace")
        access = access_of(request)
        if not access.cluster:
            return self._tenant_nodes(access, query, namespace, store)
        # (presented, data age): JSON is spliced from each node's cached fragment.
        nodes = [
            (p, p.age(now))
            for p in self._nodes.all(store)
            if namespace is None or namespace in p.usage.namespaces
        ]

        def value(item: tuple[Presented, float], field: str) -> Any:
            presented, age = item
            if field == "data_age_seconds":
                return age
            if field == "health":
                return presented.health(age, interval)
            return getattr(presented.summary, field)

        chosen = sort_and_limit(nodes, query, value)
        body = b'{"status":"success","generation":%d,"total":%d,"nodes":[%s]}' % (
            store.generation,
            len(nodes),
            b",".join(p.json_at(age, p.health(age, interval)) for p, age in chosen),
        )
        return web.Response(body=body, content_type=JSON)

    def _tenant_nodes(
        self, access: Access, query: ListQuery, namespace: str | None, store: Store
    ) -> web.Response:
        """The nodes where the tenant has containers, each showing only those."""
        now = time.monotonic()
        summaries = [
            view.summary(now, self._interval)
            for p in self._nodes.all(store)
            if (view := p.tenant_view(access)) is not None
            and (namespace is None or any(c.namespace == namespace for c in view.containers))
        ]
        chosen = sort_and_limit(summaries, query, getattr)
        return _json(NodeList(generation=store.generation, total=len(summaries), nodes=chosen))

    async def get_node(self, request: web.Request) -> web.Response:
        """``GET /api/v1/nodes/{node}``."""
        store = request.app[self._store_key]
        node = request.match_info["node"]
        presented = self._nodes.one(store, node)
        access = access_of(request)
        view = presented if presented is None or access.cluster else presented.tenant_view(access)
        if presented is None or view is None:
            raise ApiError(404, "not_found", f"no node {node!r} has data")
        now = time.monotonic()
        if isinstance(view, TenantView):
            return _json(view.detail(store.generation, view.summary(now, self._interval)))
        summary = presented.at(now, self._interval)
        return _json(presented.detail(store.generation, summary))

    async def list_containers(self, request: web.Request) -> web.Response:
        """``GET /api/v1/pods``."""
        query = list_query(request.query, LIST_CONTAINERS)
        store = request.app[self._store_key]
        node = query.filters.get("node")
        namespace = query.filters.get("namespace")
        if node is not None:
            one = self._nodes.one(store, node)
            nodes = [] if one is None else [one]
        else:
            nodes = self._nodes.all(store)
        access = access_of(request)
        # (node, reading, row JSON): JSON is joined from each node's cached rows.
        rows: list[tuple[str, ContainerReading, bytes]] = []
        for presented in nodes:
            name = presented.usage.node
            if not access.cluster:
                rows.extend(
                    (name, c, row)
                    for c, row in presented.rows()
                    if access.sees(c.namespace) and namespace in (None, c.namespace)
                )
            elif namespace is None:
                rows.extend((name, c, row) for c, row in presented.rows())
            elif namespace in presented.usage.namespaces:
                rows.extend(
                    (name, c, row) for c, row in presented.rows() if c.namespace == namespace
                )

        def value(item: tuple[str, ContainerReading, bytes], field: str) -> Any:
            node, reading, _ = item
            return node if field == "node" else getattr(reading, READING_OF[field])

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
        if not access_of(request).sees(namespace):  # as if it did not exist: nothing to guess
            raise ApiError(404, "not_found", f"no pod {namespace}/{pod} has vGPU data")
        rows: list[ContainerRow] = []
        for presented in self._nodes.all(store):
            if namespace in presented.usage.namespaces:
                node = presented.usage.node
                rows.extend(container_row(node, c) for c in presented.pod(namespace, pod))
        if not rows:
            raise ApiError(404, "not_found", f"no pod {namespace}/{pod} has vGPU data")
        return _json(pod_detail(store.generation, namespace, pod, rows))

    async def shards(self, request: web.Request) -> web.Response:
        """``GET /api/v1/shards``."""
        if not access_of(request).cluster:
            raise ApiError(403, "forbidden", "not allowed")
        node = list_query(request.query, SHARDS).filters.get("node")
        store, shard = request.app[self._store_key], self._shard
        body = ShardInfo(
            generation=store.generation,
            index=shard.index,
            count=shard.count,
            hash=HASH_RULE,
            nodes=store.nodes(),
            node=node,
            node_shard=None if node is None else shard_of(node, shard.count),
        )
        return _json(body)

    async def usage(self, request: web.Request) -> web.Response:
        """``GET /api/v1/usage``: the report of :mod:`collector.views.chargeback`, as JSON or CSV."""
        if self._chargeback is None:
            raise ApiError(404, "not_found", "usage reports need the history, which this API lacks")
        query = request.query
        check_names(query, query_names(USAGE))
        by = query.get("by", "namespace")
        if by not in GROUPS:
            raise bad(f"query parameter 'by' must be namespace, pod or node, not {by[:40]!r}")
        fmt = query.get("format", "json")
        if fmt not in ("json", "csv"):
            raise bad(f"query parameter 'format' must be json or csv, not {fmt[:40]!r}")
        window = self._chargeback.window(query.get("start"), query.get("end"))
        access = access_of(request)
        report = await self._chargeback.report(by, window, access.identity, access.namespaces)
        if fmt == "csv":
            return web.Response(text=to_csv(report), content_type="text/csv")
        return web.Response(text=report.model_dump_json(), content_type=JSON)

    async def openapi(self, request: web.Request) -> web.Response:
        """``GET /api/v1/openapi.json``."""
        if self._openapi is None:
            self._openapi = json.dumps(openapi_document(), indent=1).encode()
        return web.Response(body=self._openapi, content_type=JSON)

    async def warming(self, app: web.Application) -> AsyncIterator[None]:
        """A cleanup context: while the API is read, bring changed nodes' summaries up to date.

        The task runs under the app's supervisor (restarted when it crashes,
        named by ``/healthz`` once it cannot go on).
        """
        keep_warm = partial(self._nodes.keep_warm, app[self._store_key])
        async with contextlib.AsyncExitStack() as stack:
            if self._tasks is None:
                tasks = await stack.enter_async_context(Supervisor())
            else:
                tasks = app[self._tasks]
            await stack.enter_async_context(tasks.running("rest api warming", keep_warm))
            yield

    def refresh(self, store: Store, budget: float) -> bool:
        """Rebuild stale node summaries for about ``budget`` seconds; True once all are current."""
        return self._nodes.refresh(store, budget)


def _answering(handler: Handler, read: Callable[[], None]) -> Handler:
    async def answer(request: web.Request) -> web.Response:
        read()
        try:
            return await handler(request)
        except ApiError as error:
            return error.response()

    return answer


def _json(model: BaseModel) -> web.Response:
    return web.Response(body=model.model_dump_json().encode(), content_type=JSON)
