"""``GET /``: the cluster at a glance: totals, the last hour, top namespaces, the nodes as tiles.

Every number is read from the REST API's read model in one pass over the
nodes: each node's :class:`~collector.views.presented.Presented` summary
(what ``GET /api/v1/nodes`` lists) and its container readings (``GET
/api/v1/pods``), those summed per namespace and kept per node (:class:`Ledger`);
a tenant's from its :class:`~collector.views.presented.TenantView` of each
node and its namespaces' sums, as REST gives a tenant. A node whose monitor's latest scrape
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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from urllib.parse import quote

from aiohttp import web

from collector.auth.access import Access, access_of
from collector.store.latest import Store
from collector.views.cache import VIEW_REBUILDS, NodeCache
from collector.views.chargeback import IDLE_AFTER
from collector.views.presented import Presented
from collector.views.sourcestate import Scraped, target_state
from collector.views.usage import ContainerReading
from collector.web.ui import charts, layout, units
from collector.web.ui.layout import PAGE_ROWS, Link, promql_link, rest_link
from collector.web.ui.trend import Trend, measures

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
        return band(self.utilisation)

    @property
    def href(self) -> str:
        """The node's own view."""
        return "/nodes/" + quote(self.node, safe="")


def band(utilisation: float | None) -> int:
    """The index into :data:`BANDS` of a mean utilisation (0-100)."""
    if utilisation is None:
        return 0
    if utilisation < 1:
        return 1
    return 2 + min(int(utilisation // 25), 3)


def cluster_tile(presented: Presented, state: str) -> Tile:
    """A node's tile for a cluster reader: its REST summary's figures."""
    s = presented.summary
    return Tile(
        s.name,
        state,
        s.utilization_average_percent,
        s.memory_used_bytes,
        s.memory_total_bytes,
        s.card_count,
    )


_MICRO = 1_000_000
"""Cores are summed in millionths of a card: whole numbers add and subtract exactly."""
_FIELDS = 8
(_ALLOCATED, _USED, _CORES_ALLOCATED, _CORES_USED, _ALLOCATIONS, _IDLE, _VGPUS, _SM_READINGS) = (
    range(_FIELDS)
)
Sums = list[int]
"""Per namespace: memory allocated and used (bytes), cores allocated and used (millionths of
a card), allocations, idle allocations, container vGPUs, vGPUs with an SM utilisation."""


@dataclass(frozen=True, slots=True)
class Use:
    """What a namespace (or the cluster) holds and uses: bytes, and cards' worth of cores."""

    memory_allocated: int
    memory_used: int
    cores_allocated: float
    cores_used: float
    allocations: int
    idle: int
    utilisation: float | None
    """Mean SM utilisation (0-100) of the vGPUs that report one."""

    @classmethod
    def of(cls, sums: Sums) -> Use:
        """The figures of a :class:`Ledger` row."""
        readings = sums[_SM_READINGS]
        return cls(
            sums[_ALLOCATED],
            sums[_USED],
            sums[_CORES_ALLOCATED] / _MICRO,
            sums[_CORES_USED] / _MICRO,
            sums[_ALLOCATIONS],
            sums[_IDLE],
            sums[_CORES_USED] / _MICRO * 100 / readings if readings else None,
        )


def node_sums(containers: Iterable[ContainerReading]) -> dict[str, Sums]:
    """One node's container vGPUs summed per namespace."""
    found: dict[str, Sums] = {}
    for c in containers:
        row = found.get(c.namespace)
        if row is None:
            row = found[c.namespace] = [0] * _FIELDS
        row[_ALLOCATED] += c.memory_allocated or 0
        row[_USED] += c.memory_used or 0
        row[_CORES_ALLOCATED] += round((c.cores_allocated or 0.0) * _MICRO)
        row[_VGPUS] += 1
        if c.sm_utilization is not None:
            row[_CORES_USED] += round(c.sm_utilization * (_MICRO / 100))
            row[_SM_READINGS] += 1
        if c.memory_allocated is not None or c.cores_allocated is not None:
            row[_ALLOCATIONS] += 1
            if c.idle_seconds is not None and c.idle_seconds > IDLE_AFTER:
                row[_IDLE] += 1
    return found


Figures = tuple[int, int, int, int, int, int]
"""A node's cards, memory used and memory total (bytes), its cards' utilisation summed (in
thousandths of a percent) and how many report one, and its utilisation band."""


class Ledger:
    """Every node's figures and container readings summed, kept up to date by difference.

    Why: summed per request, the overview took 18 ms at 1,000 nodes of 28
    vGPUs each (9.6 ms kept this way), so over 80 ms at 5,000. A node's sums are kept with the
    read model they came from (its :class:`Presented`, replaced when the node's view changes:
    a scrape, a push) and redone only then; the totals take the old sums off and the new ones
    on, in whole numbers, so they stay exact. Once the overview is read, the ledger follows
    the node cache (:meth:`NodeCache.follow`): a node's sums are redone as warming presents
    it again, so the first request after a round finds them done (at 5,000 nodes it summed
    every node: 0.5-0.7 s).
    """

    def __init__(self) -> None:
        self._nodes: dict[str, tuple[Presented, Figures, dict[str, Sums]]] = {}
        self.namespaces: dict[str, Sums] = {}
        self.figures = [0, 0, 0, 0, 0]
        """The cluster's cards, memory used, memory total, utilisation summed, cards reporting."""
        self.bands: Counter[int] = Counter()

    def update(self, presented: Iterable[Presented]) -> None:
        """Bring the sums to these nodes' read models (nodes not among them are dropped)."""
        seen = set()
        for one in presented:
            seen.add(one.usage.node)
            self.presented(one)
        if len(self._nodes) > len(seen):
            self.pruned(seen)

    def presented(self, presented: Presented) -> None:
        """Bring the node's sums to ``presented``, its read model from now on."""
        node = presented.usage.node
        held = self._nodes.get(node)
        if held is not None and held[0] is presented:
            return
        if held is not None:
            self._apply(held[1], held[2], -1)
        s = presented.summary
        utils = [c.utilization_percent for c in s.utilization if c.utilization_percent is not None]
        figures = (
            s.card_count,
            s.memory_used_bytes or 0,
            s.memory_total_bytes or 0,
            round(sum(utils) * 1000),
            len(utils),
            band(s.utilization_average_percent),
        )
        sums = node_sums(presented.usage.containers)
        self._apply(figures, sums, 1)
        self._nodes[node] = (presented, figures, sums)

    def pruned(self, live: set[str]) -> None:
        """Drop the sums of the nodes not in ``live``."""
        for gone in self._nodes.keys() - live:
            _, figures, sums = self._nodes.pop(gone)
            self._apply(figures, sums, -1)

    def _apply(self, figures: Figures, sums: dict[str, Sums], sign: int) -> None:
        for i in range(5):
            self.figures[i] += sign * figures[i]
        self.bands[figures[5]] += sign
        for namespace, row in sums.items():
            total = self.namespaces.get(namespace)
            if total is None:
                total = self.namespaces[namespace] = [0] * _FIELDS
            for i, value in enumerate(row):
                total[i] += sign * value
            if total[_VGPUS] == 0:
                del self.namespaces[namespace]

    def total(self, access: Access) -> tuple[Use, dict[str, Use]]:
        """The sums over the namespaces ``access`` sees, and each of those namespaces'."""
        shown = {ns: row for ns, row in self.namespaces.items() if access.sees(ns)}
        whole = [sum(column) for column in zip(*shown.values(), strict=True)] or [0] * _FIELDS
        return Use.of(whole), {ns: Use.of(row) for ns, row in shown.items()}


@dataclass(slots=True)
class Totals:
    """The cluster (or a tenant's share of it) summed over every node."""

    generation: int = 0
    nodes: int = 0
    cards: int = 0
    memory_used: int = 0
    memory_total: int = 0
    utilisation: float | None = None
    """The cards' mean utilisation (0-100); a tenant's: its vGPUs' mean SM utilisation."""
    use: Use = field(default_factory=lambda: Use.of([0] * _FIELDS))
    namespaces: dict[str, Use] = field(default_factory=dict)
    states: Counter[str] = field(default_factory=Counter)
    bands: Counter[int] = field(default_factory=Counter)

    def count(self, tiles: list[Tile]) -> None:
        """Add the nodes' tiles."""
        self.nodes += len(tiles)
        self.cards += sum(t.cards for t in tiles)
        self.memory_used += sum(t.memory_used or 0 for t in tiles)
        self.memory_total += sum(t.memory_total or 0 for t in tiles)
        self.states.update(t.state for t in tiles)
        self.bands.update(t.band for t in tiles)

    def top(self, by: str) -> list[tuple[str, Use]]:
        """The :data:`TOP_NAMESPACES` namespaces with the most of ``by`` (a :class:`Use` field)."""
        ranked = sorted(self.namespaces.items(), key=lambda item: (-getattr(item[1], by), item[0]))
        return ranked[:TOP_NAMESPACES]


Entry = tuple[int, str, str, Presented | Tile]
"""A node on the grid as sorted: its state's rank, name, state, and its read model (a cluster
reader's) or its tile (a tenant's)."""
_RANK = {state: rank for rank, state in enumerate(STATES)}
_BY_RANK_AND_NAME = itemgetter(0, 1)


def tile_of(entry: Entry) -> Tile:
    """The tile of a grid entry."""
    found = entry[3]
    return found if isinstance(found, Tile) else cluster_tile(found, entry[2])


class Overview:
    """The overview's handler: the store and the REST API's node cache, the scrape loops
    running in the app (``scraped``) for failing monitors, the trend for the chart."""

    def __init__(
        self,
        store: Store,
        nodes: NodeCache,
        interval: float,
        trend: Trend,
        scraped: Callable[[web.Application], Sequence[Scraped]],
    ) -> None:
        self._store = store
        self._nodes = nodes
        self._interval = interval
        self._trend = trend
        self._scraped = scraped
        self._ledger = Ledger()

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
        totals, entries = self.gather(request.app, access)
        now = {
            "memory used": totals.memory_used if totals.nodes else None,
            "memory allocated": totals.use.memory_allocated or None,
            "utilisation": totals.utilisation,
        }
        series = await self._trend.series(access.namespaces, now)
        shown = [tile_of(e) for e in entries[(page - 1) * PAGE_ROWS : page * PAGE_ROWS]]
        body = BODY.render(
            t=totals,
            cluster=access.cluster,
            tiles=shown,
            pager=layout.pager(request, page, len(entries)),
            bands=BANDS,
            states=STATES,
            idle_after=units.duration(IDLE_AFTER),
            memory_chart=charts.line_chart(
                [series["memory used"], series["memory allocated"]],
                "GPU memory, last hour",
                units.size,
                width=560,
                height=190,
                binary=True,
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

    def gather(self, app: web.Application, access: Access) -> tuple[Totals, list[Entry]]:
        """Every node once: the totals, and the grid's entries in the order it shows them
        (only a page of them is made into tiles, by :func:`tile_of`)."""
        now = time.monotonic()
        totals = Totals(generation=self._store.generation)
        presented = self._nodes.all(self._store, VIEW_REBUILDS)
        self._ledger.update(presented)
        self._nodes.follow(self._ledger)
        totals.use, totals.namespaces = self._ledger.total(access)
        entries: list[Entry] = []
        if access.cluster:
            failing = self._failing(app)
            interval = self._interval
            for one in presented:
                name = one.usage.node
                state = "failing" if name in failing else one.health(one.age(now), interval)
                entries.append((_RANK[state], name, state, one))
            totals.nodes = len(entries)
            totals.cards, totals.memory_used, totals.memory_total, summed, cards = (
                self._ledger.figures
            )
            totals.utilisation = summed / 1000 / cards if cards else None
            totals.bands = self._ledger.bands
        else:
            tiles = [t for one in presented if (t := self._tenant_tile(one, access, now))]
            totals.count(tiles)
            totals.utilisation = totals.use.utilisation
            entries = [(_RANK[t.state], t.node, t.state, t) for t in tiles]
        totals.states.update(entry[2] for entry in entries)
        entries.sort(key=_BY_RANK_AND_NAME)
        return totals, entries

    def _tenant_tile(self, presented: Presented, access: Access, now: float) -> Tile | None:
        """The tile of a node where the tenant has containers: their usage only."""
        view = presented.tenant_view(access)
        if view is None:
            return None
        summary = view.summary(now, self._interval)
        utils = [c.sm_utilization for c in view.containers if c.sm_utilization is not None]
        return Tile(
            summary.name,
            summary.health,
            sum(utils) / len(utils) if utils else None,
            summary.memory_used_bytes,
            None,
            0,
        )

    def _failing(self, app: web.Application) -> set[str]:
        return {loop.target.node for loop in self._scraped(app) if target_state(loop) == "failing"}


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
""")
