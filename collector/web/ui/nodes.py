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
from collector.web.ui import layout, units
from collector.web.ui.coverage import Memory, coverage
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
{%- set c = n.memory_compared %}
<tr class="node" data-node="{{ n.name }}" data-card-count="{{ n.card_count }}" {{ known('memory-used-bytes', n.memory_used_bytes) }} data-memory-used-cards="{{ n.memory_used_cards }}" {{ known('memory-total-bytes', n.memory_total_bytes) }} data-memory-total-cards="{{ n.memory_total_cards }}">
<td><a href="/nodes/{{ segment(n.name) }}">{{ n.name }}</a></td>
<td><span class="state state-{{ n.health }}">{{ n.health }}</span></td>
<td class="num">{{ n.card_count|count }}{% if n.card_models %} <span class="muted">{{ n.card_models|join(', ') }}</span>{% endif %}</td>
<td class="num memory-used">{% if c %}{{ bar('memory of ' ~ n.name ~ ' (' ~ c.cards ~ ' cards reporting used and total)', c.used_bytes, None, c.total_bytes, units.size) }} {% endif %}{{ n.memory_used_bytes|size }}{{ cards_of(n.memory_used_cards, n.card_count) }}</td>
<td class="num">{{ n.memory_total_bytes|size }}{{ cards_of(n.memory_total_cards, n.card_count) }}</td>
<td class="num">{{ n.utilization_average_percent|percent_100 }}</td>
<td class="num">{{ n.container_count|count }}</td>
<td class="num">{{ n.data_age_seconds|duration }}</td>
</tr>
{%- endfor %}
</tbody></table>
<p class="muted">Each sum covers the cards that report it: "on 6/8 cards" says a node's other cards sent no such reading (never counted as 0). A bar compares used with total on the cards that report both; a node where none does draws none.</p>
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
{%- set u = p.usage %}
<tr class="pod" data-namespace="{{ u.namespace }}" data-pod="{{ u.pod }}" data-container="{{ u.container }}" data-device-uuid="{{ u.device_uuid }}" {{ known('memory-allocated-bytes', u.memory_allocated_bytes) }} {{ known('memory-used-bytes', u.memory_used_bytes) }} {{ known('cores-allocated', u.cores_allocated) }} {{ known('sm-utilization-percent', u.sm_utilization_percent) }}>
<td>{{ u.namespace }}</td>
<td><a href="/workloads/{{ segment(u.namespace) }}/{{ segment(u.pod) }}">{{ u.pod }}</a></td>
<td>{{ u.container }}</td><td>{{ p.kind }}</td>
<td class="num">{{ u.memory_allocated_bytes|size }}</td>
<td class="num">{{ u.memory_used_bytes|size }}</td>
<td class="num">{{ u.cores_allocated|percent }}</td>
<td class="num">{{ u.sm_utilization_percent|percent_100 }}</td>
<td class="num">{{ u.idle_seconds|duration }}</td>
</tr>
{%- endfor %}
</tbody></table>
{%- else %}<p class="muted">No pod on this card.</p>{% endif %}
{%- endmacro %}
<p class="node-summary" data-card-count="{{ node.card_count }}" {{ known('memory-used-bytes', node.memory_used_bytes) }} {{ known('memory-total-bytes', node.memory_total_bytes) }}>Health: <span class="state state-{{ node.health }}">{{ node.health }}</span>;
{{ node.card_count|count }} cards{% if node.card_models %} ({{ node.card_models|join(', ') }}){% endif %};
memory {{ coverage }};
utilisation {{ node.utilization_average_percent|percent_100 }};
{{ node.container_count|count }} containers; data {{ node.data_age_seconds|duration }} old
{%- if node.sources %}; fed by {% for s in node.sources %}{{ s.name }} ({{ s.kind }}){% if not loop.last %}, {% endif %}{% endfor %}{% endif %}.</p>
{%- for card in cards %}
{%- set u = card.usage %}
<section class="card" data-device-uuid="{{ u.device_uuid }}" {{ known('memory-used-bytes', u.memory_used_bytes) }} {{ known('memory-total-bytes', u.memory_total_bytes) }} {{ known('memory-allocated-bytes', u.memory_allocated_bytes) }} {{ known('cores-allocated', u.cores_allocated) }} data-over-allocated="{{ u.over_allocated|join(' ') }}">
<h2>Card {{ u.index if u.index is not none else '?' }}
{% if u.model %}<span class="muted">{{ u.model }}</span>{% endif %}
<span class="muted uuid">{{ u.device_uuid }}</span></h2>
<table class="readings"><thead><tr><th scope="col">Reading</th><th scope="col">Allocated vs used</th><th scope="col">Value</th></tr></thead>
<tbody>
<tr><th scope="row">Memory</th>
<td>{{ bar('memory of card ' ~ u.device_uuid, u.memory_used_bytes, u.memory_allocated_bytes, u.memory_total_bytes, units.size) or units.MISSING }}</td>
<td class="num card-memory">used {{ u.memory_used_bytes|size }}, allocated {{ u.memory_allocated_bytes|size }}, total {{ u.memory_total_bytes|size }}
{%- if card.memory_over %} <span class="over">({{ card.memory_over|percent }} of the card: {{ reasons['memory_oversubscribed'] }})</span>{% endif %}</td></tr>
<tr><th scope="row">Cores</th>
<td>{{ bar('cores of card ' ~ u.device_uuid, card.cores_used, u.cores_allocated, 1.0, units.percent) }}</td>
<td class="num">used {{ u.utilization_percent|percent_100 }}, allocated {{ u.cores_allocated|percent }}
{%- for why in u.over_allocated if why != 'memory_oversubscribed' %} <span class="over">({{ reasons[why] }})</span>{% endfor %}</td></tr>
<tr><th scope="row">Temperature</th><td></td><td class="num">{{ u.temperature_celsius|celsius }}</td></tr>
<tr><th scope="row">Power</th><td></td><td class="num">{{ u.power_watts|watts }}</td></tr>
</tbody></table>
{{ pods(card.pods, 'Pods on card ' ~ (u.index if u.index is not none else u.device_uuid)) }}
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

REASONS = {
    "memory_oversubscribed": "oversubscribed: more memory allocated than the card has, as a"
    " scheduler that scales the card's memory (HAMi's deviceMemoryScaling) grants",
    "cores_time_shared": "time-shared: several containers each given the whole card",
    "cores_oversubscribed": "oversubscribed: the core shares sum past the whole card",
}
"""What a person reads for each reason a card's allocations exceed it (REST's over_allocated)."""


@dataclass(frozen=True, slots=True)
class PodOnCard:
    """A container vGPU as the REST detail gives it, and its resource kind's label."""

    usage: ContainerUsage
    kind: str


@dataclass(frozen=True, slots=True)
class Card:
    """A card of the REST detail and its pods; its cores used as a share of the card, and its
    memory allocated as a share of the card's where that is over the whole card."""

    usage: CardUsage
    cores_used: float | None
    memory_over: float | None
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
            said = f"used by your vGPUs {units.size(detail.node.memory_used_bytes)}"
        else:
            detail = presented.detail(store.generation, presented.at(now, self._interval))
            said = coverage(Memory.of_node(detail.node))
        usage = presented.usage
        cards = [self._card(usage, c) for c in detail.cards]
        unmatched = [self._pod(usage, c) for c in detail.unmatched_containers]
        body = render(
            DETAIL,
            node=detail.node,
            cards=cards,
            unmatched=unmatched,
            coverage=said,
            reasons=REASONS,
        )
        links = [
            layout.rest_link(f"/api/v1/nodes/{segment(node)}"),
            layout.promql_link(f"{{{matcher('node', node)}}}"),
        ]
        return layout.render(request, f"Node {node}", body, links, self._interval)

    def _card(self, usage: NodeUsage, card: CardUsage) -> Card:
        util = card.utilization_percent
        over = "memory_oversubscribed" in card.over_allocated
        return Card(
            card,
            None if util is None else util / 100,
            (card.memory_allocated_bytes or 0) / (card.memory_total_bytes or 1) if over else None,
            [self._pod(usage, c) for c in card.containers],
        )

    def _pod(self, usage: NodeUsage, container: ContainerUsage) -> PodOnCard:
        key = (container.namespace, container.pod, container.container)
        return PodOnCard(container, self._kinds.label(usage, key))
