"""``GET /``: the cluster at a glance: totals, the last hour, top namespaces, the nodes as tiles.

Every number is read from the REST API's read model in one pass over the
nodes: each node's :class:`~collector.web.rest.presented.Presented` summary
(what ``GET /api/v1/nodes`` lists) and its container readings (``GET
/api/v1/pods``); a tenant's from its :class:`~collector.web.rest.presented.TenantView`
of each node, as REST gives a tenant. A node whose monitor's latest scrape
failed is labelled ``failing`` (the status page's word); otherwise its REST
health labels it (``ok``, ``stale``, ``unreported``).

At any size the page stays small: the nodes are counted by state and by
utilisation band, and shown as at most :data:`~collector.web.ui.layout.PAGE_ROWS`
tiles a page, nodes needing a look first. The chart of the last hour comes
from :mod:`collector.web.ui.trend`.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import quote

from aiohttp import web

from collector.sources.scrape import ScrapeManager
from collector.store import Store
from collector.web.access import Access, access_of
from collector.web.rest.cache import NodeCache
from collector.web.rest.chargeback import IDLE_AFTER
from collector.web.status import target_state
from collector.web.ui import charts, layout, units
from collector.web.ui.layout import PAGE_ROWS, Link, promql_link, rest_link
from collector.web.ui.trend import Trend, measures
from collector.web.usage import ContainerReading

TOP_NAMESPACES = 10
"""Namespaces listed in each of the two top tables."""
PARAMETERS = ("page", "refresh")
"""What the overview's query string may hold."""
BANDS = ("no reading", "idle", "1-25%", "25-50%", "50-75%", "75-100%")
"""Utilisation bands of the tiles, each with a colour and this text: "idle" is under 1 %."""
STATES = ("failing", "stale", "unreported", "ok")
"""A node's state on the overview, needing a look first."""


@dataclass(frozen=True, slots=True)
class Tile:
    """One node on the grid: its state, its cards' mean utilisation (0-100), its memory."""

    node: str
    state: str
    utilisation: float | None
    memory_used: int | None
    memory_total: int | None
    cards: int

    @property
    def band(self) -> int:
        """Index into :data:`BANDS`."""
        u = self.utilisation
        if u is None:
            return 0
        if u < 1:
            return 1
        return 2 + min(int(u // 25), 3)

    @property
    def href(self) -> str:
        """The node's own view."""
        return "/nodes/" + quote(self.node, safe="")


@dataclass(slots=True)
class Use:
    """What a namespace (or the cluster) holds and uses: bytes, and cards' worth of cores."""

    memory_allocated: int = 0
    memory_used: int = 0
    cores_allocated: float = 0.0
    cores_used: float = 0.0
    allocations: int = 0
    idle: int = 0

    def add(self, c: ContainerReading) -> None:
        """Count one container vGPU's allocation and usage."""
        self.memory_allocated += c.memory_allocated or 0
        self.memory_used += c.memory_used or 0
        self.cores_allocated += c.cores_allocated or 0.0
        self.cores_used += (c.sm_utilization or 0.0) / 100
        if c.memory_allocated is not None or c.cores_allocated is not None:
            self.allocations += 1
            if c.idle_seconds is not None and c.idle_seconds > IDLE_AFTER:
                self.idle += 1


@dataclass(slots=True)
class Totals:
    """The cluster (or a tenant's share of it) summed over every node."""

    generation: int = 0
    nodes: int = 0
    cards: int = 0
    memory_used: int = 0
    memory_total: int = 0
    use: Use = field(default_factory=Use)
    namespaces: dict[str, Use] = field(default_factory=dict)
    states: Counter[str] = field(default_factory=Counter)
    bands: Counter[int] = field(default_factory=Counter)

    def count(self, tile: Tile, containers: Iterable[ContainerReading]) -> None:
        """Add one node: its tile's figures and its containers'."""
        self.nodes += 1
        self.cards += tile.cards
        self.memory_used += tile.memory_used or 0
        self.memory_total += tile.memory_total or 0
        self.states[tile.state] += 1
        self.bands[tile.band] += 1
        for c in containers:
            self.use.add(c)
            one = self.namespaces.get(c.namespace)
            if one is None:
                one = self.namespaces[c.namespace] = Use()
            one.add(c)

    def top(self, by: str) -> list[tuple[str, Use]]:
        """The :data:`TOP_NAMESPACES` namespaces with the most of ``by`` (a :class:`Use` field)."""
        ranked = sorted(self.namespaces.items(), key=lambda item: (-getattr(item[1], by), item[0]))
        return ranked[:TOP_NAMESPACES]


class Overview:
    """The overview's handler: the store and the REST API's node cache, the scrape loops
    (under ``scraper``, set once the app runs) for failing monitors, the trend for the chart."""

    def __init__(
        self,
        store: Store,
        nodes: NodeCache,
        interval: float,
        trend: Trend,
        scraper: web.AppKey[ScrapeManager],
    ) -> None:
        self._store = store
        self._nodes = nodes
        self._interval = interval
        self._trend = trend
        self._scraper = scraper

    def routes(self) -> list[web.RouteDef]:
        """``GET /``."""
        return [web.get("/", self.handle)]

    async def handle(self, request: web.Request) -> web.Response:
        """One page of the overview; 400 naming a bad parameter."""
        self._nodes.read()
        try:
            page = _page(request)
        except ValueError as exc:
            return layout.error(request, 400, str(exc))
        access = access_of(request)
        totals, tiles = self.gather(request.app, access)
        series = await self._trend.series(access.namespaces)
        shown = tiles[(page - 1) * PAGE_ROWS : page * PAGE_ROWS]
        body = BODY.render(
            t=totals,
            cluster=access.cluster,
            tiles=shown,
            pager=layout.pager(request, page, len(tiles)),
            bands=BANDS,
            states=STATES,
            idle_after=units.duration(IDLE_AFTER),
            memory_chart=charts.line_chart(
                [series["memory used"], series["memory allocated"]],
                "GPU memory, last hour",
                units.size,
                width=560,
                height=190,
                rounding=float(1 << 30),
            ),
            utilisation_chart=charts.line_chart(
                [series["utilisation"]],
                "GPU utilisation, last hour" if access.cluster else "SM utilisation, last hour",
                units.percent_100,
                width=560,
                height=190,
                top=100.0,
            ),
            by_allocated=totals.top("memory_allocated"),
            by_used=totals.top("memory_used"),
        )
        return layout.render(request, "Overview", body, _links(access), self._interval)

    def gather(self, app: web.Application, access: Access) -> tuple[Totals, list[Tile]]:
        """Every node once: the totals, and the tiles in the order the grid shows them."""
        now = time.monotonic()
        totals = Totals(generation=self._store.generation)
        tiles: list[Tile] = []
        failing = self._failing(app) if access.cluster else set()
        for presented in self._nodes.all(self._store):
            age = presented.age(now)
            if access.cluster:
                s = presented.summary
                state = "failing" if s.name in failing else presented.health(age, self._interval)
                tile = Tile(
                    s.name,
                    state,
                    s.utilization_average_percent,
                    s.memory_used_bytes,
                    s.memory_total_bytes,
                    s.card_count,
                )
                containers: Iterable[ContainerReading] = presented.usage.containers
            else:
                view = presented.tenant_view(access)
                if view is None:
                    continue
                summary = view.summary(now, self._interval)
                utils = [c.sm_utilization for c in view.containers if c.sm_utilization is not None]
                tile = Tile(
                    summary.name,
                    summary.health,
                    sum(utils) / len(utils) if utils else None,
                    summary.memory_used_bytes,
                    None,
                    0,
                )
                containers = view.containers
            totals.count(tile, containers)
            tiles.append(tile)
        tiles.sort(key=lambda t: (STATES.index(t.state), t.node))
        return totals, tiles

    def _failing(self, app: web.Application) -> set[str]:
        scraper = app.get(self._scraper)
        if scraper is None:
            return set()
        return {loop.target.node for loop in scraper.loops() if target_state(loop) == "failing"}


def _page(request: web.Request) -> int:
    for name in request.query:
        if name not in PARAMETERS:
            raise ValueError(f"unknown parameter {name[:40]!r}; the overview takes page, refresh")
    return layout.page_number(request.query)


def _links(access: Access) -> list[Link]:
    return [
        rest_link("/api/v1/nodes"),
        rest_link("/api/v1/pods"),
        rest_link("/api/v1/usage?by=namespace"),
        *(promql_link(expr) for expr in measures(access.namespaces).values()),
    ]


BODY = layout.template("""
<section aria-labelledby="totals"><h2 id="totals">Totals</h2>
<div class="cards" data-generation="{{ t.generation }}">
{%- macro card(name, value, text, label) %}
<div class="card" data-total="{{ name }}" data-value="{{ value }}"><div class="value">{{ text }}</div><div class="label">{{ label }}</div></div>
{%- endmacro %}
{{ card('nodes', t.nodes, t.nodes|count, 'nodes') }}
{%- if cluster %}
{{ card('cards', t.cards, t.cards|count, 'GPU cards') }}
{{ card('memory_used', t.memory_used, t.memory_used|size, 'memory used of ' ~ (t.memory_total|size) ~ ' on the cards') }}
{%- else %}
{{ card('memory_used', t.memory_used, t.memory_used|size, 'memory used by your vGPUs') }}
{%- endif %}
{{ card('memory_allocated', t.use.memory_allocated, t.use.memory_allocated|size, 'memory allocated to vGPUs') }}
{{ card('cores_used', t.use.cores_used, t.use.cores_used|cores, 'cores used of ' ~ (t.use.cores_allocated|cores) ~ ' allocated') }}
{{ card('idle', t.use.idle, t.use.idle|count, 'of ' ~ (t.use.allocations|count) ~ ' allocations idle over ' ~ idle_after) }}
{%- if cluster %}
{{ card('unreported', t.states['unreported'], t.states['unreported']|count, 'nodes without a usage source') }}
{%- endif %}
</div>
{%- if cluster %}
<p>{{ bar('cluster memory', t.memory_used, t.use.memory_allocated, t.memory_total or None, units.size, 480, 18) }}
<span class="muted">used {{ t.memory_used|size }} · allocated {{ t.use.memory_allocated|size }} · on the cards {{ t.memory_total|size }}</span></p>
{%- endif %}
</section>

<section aria-labelledby="hour"><h2 id="hour">The last hour</h2>
<div class="charts"><figure>{{ memory_chart }}</figure><figure>{{ utilisation_chart }}</figure></div>
</section>

<section aria-labelledby="namespaces"><h2 id="namespaces">Top namespaces</h2>
<div class="charts">
{%- for title, rows in (('by memory allocated', by_allocated), ('by memory used', by_used)) %}
<table class="top-namespaces"><caption>{{ title }}</caption>
<thead><tr><th scope="col">Namespace</th><th scope="col" class="num">Allocated</th><th scope="col" class="num">Used</th><th scope="col">Used of allocated</th><th scope="col" class="num">Cores used / allocated</th></tr></thead>
<tbody>
{%- for name, u in rows %}
<tr class="namespace" data-namespace="{{ name }}"><td><a href="/workloads?namespace={{ name|urlencode }}">{{ name }}</a></td>
<td class="num">{{ u.memory_allocated|size }}</td><td class="num">{{ u.memory_used|size }}</td>
<td>{{ bar(name ~ ' memory', u.memory_used, u.memory_allocated, None, units.size, 140, 14) }}</td>
<td class="num">{{ u.cores_used|cores }} / {{ u.cores_allocated|cores }}</td></tr>
{%- else %}
<tr><td colspan="5" class="muted">No vGPU allocations.</td></tr>
{%- endfor %}
</tbody></table>
{%- endfor %}
</div>
</section>

<section aria-labelledby="nodes"><h2 id="nodes">Nodes</h2>
<table class="node-states"><caption class="sr-only">Nodes by state and by utilisation</caption>
<thead><tr>{% for s in states %}<th scope="col" class="num">{{ s }}</th>{% endfor %}{% for b in bands %}<th scope="col" class="num">{{ b }}</th>{% endfor %}</tr></thead>
<tbody><tr>{% for s in states %}<td class="num" data-state="{{ s }}">{{ t.states[s]|count }}</td>{% endfor %}{% for b in bands %}<td class="num" data-band="{{ b }}">{{ t.bands[loop.index0]|count }}</td>{% endfor %}</tr></tbody>
</table>
<p class="muted">Each tile is a node, shaded by {{ 'its cards\\' mean utilisation' if cluster else 'your vGPUs\\' mean SM utilisation' }}; nodes that need a look (failing, stale, unreported) come first, with a dashed border and their state written out.</p>
{{ pager }}
<div class="tiles">
{%- for tile in tiles %}
<a class="tile band-{{ [tile.band - 1, 0]|max }} {{ tile.state }}" href="{{ tile.href }}" data-node="{{ tile.node }}" data-state="{{ tile.state }}">
<div class="name">{{ tile.node }}</div>
<div>{% if tile.state != 'ok' %}<span class="state state-{{ tile.state }}">{{ tile.state }}</span> {% endif %}{{ bands[tile.band] if tile.band < 2 else tile.utilisation|percent_100 }}{% if tile.cards %} · {{ tile.cards }} card{{ 's' if tile.cards != 1 }}{% endif %}</div>
<div class="muted">{{ tile.memory_used|size }}{% if tile.memory_total %} of {{ tile.memory_total|size }}{% endif %}</div>
</a>
{%- else %}
<p class="muted">No node has data yet.</p>
{%- endfor %}
</div>
{{ pager }}
</section>
""")
