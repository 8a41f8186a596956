"""``/nodes`` and ``/nodes/{node}``: the nodes as a table, and one node's cards with their pods.

The rows are the REST API's: the same node summaries (``GET /api/v1/nodes``,
its ``namespace`` filter and sort fields) and the same node detail (``GET
/api/v1/nodes/{node}``), a tenant's as REST gives a tenant (only the nodes
where it has containers, only its containers, no card readings). Only the
page's rows are turned into summaries.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from collector.auth.access import Access, access_of
from collector.store.latest import Store
from collector.views.cache import VIEW_REBUILDS, NodeCache
from collector.views.listing import NODE_SORT_FIELDS
from collector.views.models import CardUsage, ContainerUsage, NodeSummary
from collector.views.presented import Presented, TenantView
from collector.views.usage import NodeUsage
from collector.web.ui import layout
from collector.web.ui.kinds import Kinds
from collector.web.ui.layout import PAGE_ROWS
from collector.web.ui.listing import Page, ViewError, ViewQuery, check_names, page_of, view_query
from collector.web.ui.pages import answering, matcher, render, segment, template

LIST = template("""
<form method="get" action="/nodes" class="filters">
<label>Namespace <input name="namespace" value="{{ query.params.get('namespace', '') }}"></label>
{%- if query.params.get('sort') %}<input type="hidden" name="sort" value="{{ query.params['sort'] }}">{% endif %}
<button>Filter</button></form>
{{ pager }}
<table class="nodes">
<thead><tr>
{{ sortable(query, '/nodes', 'name', 'Node') }}
{{ sortable(query, '/nodes', 'health', 'Health') }}
{{ sortable(query, '/nodes', 'card_count', 'Cards') }}
{{ sortable(query, '/nodes', 'memory_used_bytes', 'Memory used') }}
{{ sortable(query, '/nodes', 'memory_total_bytes', 'of total') }}
{{ sortable(query, '/nodes', 'utilization_average_percent', 'Utilisation') }}
{{ sortable(query, '/nodes', 'container_count', 'Containers') }}
{{ sortable(query, '/nodes', 'data_age_seconds', 'Data age') }}
</tr></thead>
<tbody>
{%- for n in page.rows %}
<tr class="node" data-node="{{ n.name }}" data-memory-used-bytes="{{ n.memory_used_bytes if n.memory_used_bytes is not none else '' }}">
<td><a href="/nodes/{{ segment(n.name) }}">{{ n.name }}</a></td>
<td><span class="state state-{{ n.health }}">{{ n.health }}</span></td>
<td class="num">{{ n.card_count|count }}{% if n.card_types %} <span class="muted">{{ n.card_types|join(', ') }}</span>{% endif %}</td>
<td class="num memory-used">{{ bar('memory of ' ~ n.name, n.memory_used_bytes, None, n.memory_total_bytes, units.size) }} {{ n.memory_used_bytes|size }}</td>
<td class="num">{{ n.memory_total_bytes|size }}</td>
<td class="num">{{ n.utilization_average_percent|percent_100 }}</td>
<td class="num">{{ n.container_count|count }}</td>
<td class="num">{{ n.data_age_seconds|duration }}</td>
</tr>
{%- endfor %}
</tbody></table>
{{ pager }}
""")

DETAIL = template("""
{%- macro pods(rows, caption) %}
{%- if rows %}
<table class="pods"><caption>{{ caption }}</caption>
<thead><tr><th scope="col">Namespace</th><th scope="col">Pod</th><th scope="col">Container</th>
<th scope="col">Kind</th><th scope="col">Memory allocated</th><th scope="col">Memory used</th>
<th scope="col">Cores allocated</th><th scope="col">SM utilisation</th><th scope="col">Idle</th></tr></thead>
<tbody>
{%- for p in rows %}
<tr class="pod" data-namespace="{{ p.usage.namespace }}" data-pod="{{ p.usage.pod }}">
<td>{{ p.usage.namespace }}</td>
<td><a href="/workloads/{{ segment(p.usage.namespace) }}/{{ segment(p.usage.pod) }}">{{ p.usage.pod }}</a></td>
<td>{{ p.usage.container }}</td><td>{{ p.kind }}</td>
<td class="num">{{ p.usage.memory_allocated_bytes|size }}</td>
<td class="num">{{ p.usage.memory_used_bytes|size }}</td>
<td class="num">{{ p.usage.cores_allocated|percent }}</td>
<td class="num">{{ p.usage.sm_utilization_percent|percent_100 }}</td>
<td class="num">{{ p.usage.idle_seconds|duration }}</td>
</tr>
{%- endfor %}
</tbody></table>
{%- else %}<p class="muted">No pod on this card.</p>{% endif %}
{%- endmacro %}
<p>Health: <span class="state state-{{ node.health }}">{{ node.health }}</span>;
{{ node.card_count|count }} cards{% if node.card_types %} ({{ node.card_types|join(', ') }}){% endif %};
memory used {{ node.memory_used_bytes|size }} of {{ node.memory_total_bytes|size }};
utilisation {{ node.utilization_average_percent|percent_100 }};
{{ node.container_count|count }} containers; data {{ node.data_age_seconds|duration }} old
{%- if node.sources %}; fed by {% for s in node.sources %}{{ s.name }} ({{ s.kind }}){% if not loop.last %}, {% endif %}{% endfor %}{% endif %}.</p>
{%- for card in cards %}
<section class="card" data-device-uuid="{{ card.usage.device_uuid }}" data-memory-used-bytes="{{ card.usage.memory_used_bytes if card.usage.memory_used_bytes is not none else '' }}">
<h2>Card {{ card.usage.index if card.usage.index is not none else '?' }}
{% if card.usage.model or card.usage.device_type %}<span class="muted">{{ card.usage.model or card.usage.device_type }}</span>{% endif %}
<span class="muted uuid">{{ card.usage.device_uuid }}</span></h2>
<table class="readings"><thead><tr><th scope="col">Reading</th><th scope="col">Allocated vs used</th><th scope="col">Value</th></tr></thead>
<tbody>
<tr><th scope="row">Memory</th>
<td>{{ bar('memory of card ' ~ card.usage.device_uuid, card.usage.memory_used_bytes, card.memory_allocated, card.usage.memory_total_bytes, units.size) }}</td>
<td class="num card-memory">used {{ card.usage.memory_used_bytes|size }}, allocated {{ card.memory_allocated|size }}, total {{ card.usage.memory_total_bytes|size }}</td></tr>
<tr><th scope="row">Cores</th>
<td>{{ bar('cores of card ' ~ card.usage.device_uuid, card.cores_used, card.cores_allocated, 1.0, units.percent) }}</td>
<td class="num">used {{ card.usage.utilization_percent|percent_100 }}, allocated {{ card.cores_allocated|percent }}</td></tr>
<tr><th scope="row">Temperature</th><td></td><td class="num">{{ card.usage.temperature_celsius|celsius }}</td></tr>
<tr><th scope="row">Power</th><td></td><td class="num">{{ card.usage.power_watts|watts }}</td></tr>
</tbody></table>
{{ pods(card.pods, 'Pods on card ' ~ (card.usage.index if card.usage.index is not none else card.usage.device_uuid)) }}
</section>
{%- endfor %}
{%- if unmatched %}
<section class="unmatched">
<h2>Devices on no listed card</h2>
<p class="muted">MIG instances, and containers whose device the node's cards do not name.</p>
{{ pods(unmatched, 'Containers on no listed card') }}
</section>
{%- endif %}
""")


@dataclass(frozen=True, slots=True)
class PodOnCard:
    """A container vGPU as the REST detail gives it, and its resource kind's label."""

    usage: ContainerUsage
    kind: str


@dataclass(frozen=True, slots=True)
class Card:
    """A card of the REST detail, what its pods are allocated, and its pods."""

    usage: CardUsage
    memory_allocated: int | None
    cores_allocated: float | None
    cores_used: float | None
    pods: list[PodOnCard]


class NodeViews:
    """The two node views, reading the store under ``store_key`` through the REST API's
    node cache; ``interval`` judges a node's data stale, as REST does."""

    def __init__(
        self, store_key: web.AppKey[Store], nodes: NodeCache, interval: float, kinds: Kinds
    ) -> None:
        self._store_key = store_key
        self._nodes = nodes
        self._interval = interval
        self._kinds = kinds

    def routes(self) -> list[web.RouteDef]:
        """``GET /nodes`` and ``GET /nodes/{node}``."""
        return [
            web.get("/nodes", answering(self.table, self._nodes.read)),
            web.get("/nodes/{node:[^/]+}", answering(self.detail, self._nodes.read)),
        ]

    async def table(self, request: web.Request) -> web.Response:
        """One page of nodes, sorted and filtered as ``GET /api/v1/nodes``."""
        query = view_query(request.query, NODE_SORT_FIELDS, ("namespace",))
        store, now = request.app[self._store_key], time.monotonic()
        namespace = query.listing.filters.get("namespace")
        access = access_of(request)
        page: Page[NodeSummary]
        if access.cluster and namespace is None and query.listing.sort is None:
            page = self._plain(store, query.page, now)
        else:
            page = self._chosen(store, query, access, now)
        expr = "sum by (node) (hami_host_gpu_memory_used_bytes)"
        if namespace is not None:
            expr = (
                f"sum by (node) (hami_vgpu_memory_used_bytes{{{matcher('namespace', namespace)}}})"
            )
        links = [
            layout.rest_link(query.href("/api/v1/nodes", page=None, refresh=None)),
            layout.promql_link(expr),
        ]
        pager = layout.pager(request, page.number, page.total)
        body = render(LIST, query=query, page=page, pager=pager)
        return layout.render(request, "Nodes", body, links, self._interval)

    def _plain(self, store: Store, number: int, now: float) -> Page[NodeSummary]:
        """Page ``number`` of every node in REST's order: only its nodes' summaries are
        made (after a scrape round most nodes' are out of date)."""
        names = [node for node in store.nodes() if store.view(node) is not None]
        start = (number - 1) * PAGE_ROWS
        chosen = [self._nodes.one(store, node) for node in names[start : start + PAGE_ROWS]]
        rows = [p.at(now, self._interval) for p in chosen if p is not None]
        return Page(rows, len(names), number)

    def _chosen(
        self, store: Store, query: ViewQuery, access: Access, now: float
    ) -> Page[NodeSummary]:
        """The query's page of nodes, filtered and sorted as REST's list of nodes."""
        interval, namespace = self._interval, query.listing.filters.get("namespace")
        every = self._nodes.all(store, VIEW_REBUILDS)
        self._kinds.prune([p.usage for p in every])
        if not access.cluster:
            summaries = [
                view.summary(now, interval)
                for p in every
                if (view := p.tenant_view(access)) is not None
                and (namespace is None or any(c.namespace == namespace for c in view.containers))
            ]
            return page_of(summaries, query, getattr)
        items = [
            (p, p.age(now)) for p in every if namespace is None or namespace in p.usage.namespaces
        ]

        def value(item: tuple[Presented, float], field: str) -> Any:
            presented, age = item
            if field == "data_age_seconds":
                return age
            if field == "health":
                return presented.health(age, interval)
            return getattr(presented.summary, field)

        chosen = page_of(items, query, value)
        return Page([p.at(now, interval) for p, _ in chosen.rows], chosen.total, chosen.number)

    async def detail(self, request: web.Request) -> web.Response:
        """One node: each card with its allocated and used memory and cores, and its pods."""
        check_names(request.query)
        store, node = request.app[self._store_key], request.match_info["node"]
        presented = self._nodes.one(store, node)
        access = access_of(request)
        view = presented if presented is None or access.cluster else presented.tenant_view(access)
        if presented is None or view is None:
            raise ViewError(404, f"no node {node!r} has data")
        now = time.monotonic()
        if isinstance(view, TenantView):
            detail = view.detail(store.generation, view.summary(now, self._interval))
        else:
            detail = presented.detail(store.generation, presented.at(now, self._interval))
        usage = presented.usage
        cards = [self._card(usage, c) for c in detail.cards]
        unmatched = [self._pod(usage, c) for c in detail.unmatched_containers]
        body = render(DETAIL, node=detail.node, cards=cards, unmatched=unmatched)
        links = [
            layout.rest_link(f"/api/v1/nodes/{segment(node)}"),
            layout.promql_link(f"{{{matcher('node', node)}}}"),
        ]
        return layout.render(request, f"Node {node}", body, links, self._interval)

    def _card(self, usage: NodeUsage, card: CardUsage) -> Card:
        memory = [c.memory_allocated_bytes for c in card.containers if c.memory_allocated_bytes]
        cores = [c.cores_allocated for c in card.containers if c.cores_allocated is not None]
        util = card.utilization_percent
        return Card(
            card,
            sum(memory) if memory else None,
            sum(cores) if cores else None,
            None if util is None else util / 100,
            [self._pod(usage, c) for c in card.containers],
        )

    def _pod(self, usage: NodeUsage, container: ContainerUsage) -> PodOnCard:
        key = (container.namespace, container.pod, container.container)
        return PodOnCard(container, self._kinds.label(usage, key))
