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
from collector.web.ui.coverage import Memory, coverage, plural, share
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
    """One node on the grid: its state, its cards' mean utilisation (0-100), its memory used,
    and used of total on the ``compared`` cards that report both (0: none does)."""

    node: str
    state: str
    utilisation: float | None
    memory_used: int | None
    cards: int
    compared: int = 0
    compared_used: int | None = None
    compared_total: int | None = None

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
    memory = Memory.of_node(s)
    return Tile(
        s.name,
        state,
        s.utilization_average_percent,
        s.memory_used_bytes,
        s.card_count,
        memory.compared_cards,
        memory.compared_used,
        memory.compared_total,
    )


_MICRO = 1_000_000
"""Cores are summed in millionths of a card: whole numbers add and subtract exactly."""
_FIELDS = 11
(
    _ALLOCATED,
    _USED,
    _CORES_ALLOCATED,
    _CORES_USED,
    _ALLOCATIONS,
    _IDLE,
    _VGPUS,
    _SM_READINGS,
    _MEMORY_ALLOCATIONS,
    _MEMORY_READINGS,
    _SHARES,
) = range(_FIELDS)
Sums = list[int]
"""Per namespace: memory allocated and used (bytes), cores allocated and used (millionths of
a card), allocations, idle allocations, container vGPUs, and how many vGPUs each sum covers:
those with an SM utilisation, a memory allocation, a memory reading, a core share."""


@dataclass(frozen=True, slots=True)
class Use:
    """What a namespace (or the cluster) holds and uses: bytes, and cards' worth of cores.

    Each figure sums the vGPUs that have it, and is None when none does (an allocation of
    nothing reads as unknown, not 0); the ``*_vgpus`` say how many of ``vgpus`` it covers.
    """

    memory_allocated: int | None
    memory_used: int | None
    cores_allocated: float | None
    cores_used: float | None
    allocations: int
    idle: int
    utilisation: float | None
    """Mean SM utilisation (0-100) of the vGPUs that report one."""
    vgpus: int = 0
    memory_allocated_vgpus: int = 0
    memory_used_vgpus: int = 0
    cores_allocated_vgpus: int = 0
    cores_used_vgpus: int = 0

    @classmethod
    def of(cls, sums: Sums) -> Use:
        """The figures of a :class:`Ledger` row."""
        readings = sums[_SM_READINGS]
        return cls(
            sums[_ALLOCATED] if sums[_MEMORY_ALLOCATIONS] else None,
            sums[_USED] if sums[_MEMORY_READINGS] else None,
            sums[_CORES_ALLOCATED] / _MICRO if sums[_SHARES] else None,
            sums[_CORES_USED] / _MICRO if readings else None,
            sums[_ALLOCATIONS],
            sums[_IDLE],
            sums[_CORES_USED] / _MICRO * 100 / readings if readings else None,
            sums[_VGPUS],
            sums[_MEMORY_ALLOCATIONS],
            sums[_MEMORY_READINGS],
            sums[_SHARES],
            readings,
        )


def node_sums(containers: Iterable[ContainerReading]) -> dict[str, Sums]:
    """One node's container vGPUs summed per namespace."""
    found: dict[str, Sums] = {}
    for c in containers:
        row = found.get(c.namespace)
        if row is None:
            row = found[c.namespace] = [0] * _FIELDS
        row[_VGPUS] += 1
        if c.memory_allocated is not None:
            row[_ALLOCATED] += c.memory_allocated
            row[_MEMORY_ALLOCATIONS] += 1
        if c.memory_used is not None:
            row[_USED] += c.memory_used
            row[_MEMORY_READINGS] += 1
        if c.cores_allocated is not None:
            row[_CORES_ALLOCATED] += round(c.cores_allocated * _MICRO)
            row[_SHARES] += 1
        if c.sm_utilization is not None:
            row[_CORES_USED] += round(c.sm_utilization * (_MICRO / 100))
            row[_SM_READINGS] += 1
        if c.memory_allocated is not None or c.cores_allocated is not None:
            row[_ALLOCATIONS] += 1
            if c.idle_seconds is not None and c.idle_seconds > IDLE_AFTER:
                row[_IDLE] += 1
    return found


_CARD_FIGURES = 11
(
    _CARDS,
    _MEMORY_USED,
    _MEMORY_USED_CARDS,
    _MEMORY_TOTAL,
    _MEMORY_TOTAL_CARDS,
    _COMPARED_CARDS,
    _COMPARED_USED,
    _COMPARED_TOTAL,
    _COMPARED_ALLOCATED,
    _UTILISATION,
    _UTILISATION_CARDS,
) = range(_CARD_FIGURES)
Figures = tuple[int, ...]
"""A node's figures, whole numbers: cards; memory used (bytes) and the cards that report it;
memory total and the cards that report it; the cards reporting both, their used, total and
allocated memory; its cards' utilisation summed (in thousandths of a percent) and how many
report one; last, its utilisation band."""


def _memory(figures: Sequence[int]) -> Memory:
    """The cards' memory of the sums of :class:`Ledger` figures."""
    compared = figures[_COMPARED_CARDS]
    return Memory(
        figures[_CARDS],
        figures[_MEMORY_USED] if figures[_MEMORY_USED_CARDS] else None,
        figures[_MEMORY_USED_CARDS],
        figures[_MEMORY_TOTAL] if figures[_MEMORY_TOTAL_CARDS] else None,
        figures[_MEMORY_TOTAL_CARDS],
        compared,
        figures[_COMPARED_USED] if compared else None,
        figures[_COMPARED_TOTAL] if compared else None,
        figures[_COMPARED_ALLOCATED] if compared and figures[_COMPARED_ALLOCATED] else None,
    )


class Ledger:
    """Every node's figures and container readings summed, kept up to date by difference.

    Why: summed per request, the overview took 18 ms at 1,000 nodes of 28
    vGPUs each (9.6 ms kept this way), so over 80 ms at 5,000. A node's sums are kept with the
    read model they came from (its :class:`Presented`, replaced when the node's view changes:
    a scrape, a push) and redone only then; the totals take the old sums off and the new ones
    on, in whole numbers, so they stay exact. Once the overview is read (or primed, once the
    collector is ready), the ledger follows the node cache (:meth:`NodeCache.follow`): a
    node's sums are redone as warming presents it again, so the first request after a round
    finds them done (at 5,000 nodes it summed every node: 0.5-0.7 s).
    """

    def __init__(self) -> None:
        self._nodes: dict[str, tuple[Presented, Figures, dict[str, Sums]]] = {}
        self.namespaces: dict[str, Sums] = {}
        self.figures = [0] * _CARD_FIGURES
        """The cluster's :data:`Figures` summed (the band aside)."""
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
        m = Memory.of_node(s)
        figures = (
            m.cards,
            m.used or 0,
            m.used_cards,
            m.total or 0,
            m.total_cards,
            m.compared_cards,
            m.compared_used or 0,
            m.compared_total or 0,
            m.compared_allocated or 0,
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
        for i in range(_CARD_FIGURES):
            self.figures[i] += sign * figures[i]
        self.bands[figures[_CARD_FIGURES]] += sign
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
    memory: Memory = field(default_factory=Memory)
    """The cards' memory (a tenant's: its vGPUs' used memory only)."""
    utilisation: float | None = None
    """The cards' mean utilisation (0-100); a tenant's: its vGPUs' mean SM utilisation."""
    use: Use = field(default_factory=lambda: Use.of([0] * _FIELDS))
    namespaces: dict[str, Use] = field(default_factory=dict)
    states: Counter[str] = field(default_factory=Counter)
    bands: Counter[int] = field(default_factory=Counter)

    def count(self, tiles: list[Tile]) -> None:
        """Add a tenant's nodes' tiles (their memory used is the tenant's vGPUs')."""
        self.nodes += len(tiles)
        self.states.update(t.state for t in tiles)
        self.bands.update(t.band for t in tiles)

    def top(self, by: str) -> list[tuple[str, Use]]:
        """The :data:`TOP_NAMESPACES` namespaces with the most of ``by`` (a :class:`Use` field;
        unknown last)."""
        ranked = sorted(
            self.namespaces.items(), key=lambda item: (-(getattr(item[1], by) or -1), item[0])
        )
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

    async def prime(self) -> None:
        """Make what a cluster reader's first overview would wait for: the ledger follows the
        node cache from now (its warming sums each node as it presents it), and the chart's
        hour is read."""
        self._nodes.follow(self._ledger)
        await self._trend.refresh(None)

    async def handle(self, request: web.Request) -> web.Response:
        """One page of the overview; 400 naming a bad parameter."""
        self._nodes.read()
        try:
            page = _page(request)
        except ValueError as exc:
            return layout.error(request, 400, str(exc))
        access = access_of(request)
        totals, entries = self.gather(request.app, access)
        used = totals.memory.used if access.cluster else totals.use.memory_used
        now = {
            "memory used": used if totals.nodes else None,
            "memory allocated": totals.use.memory_allocated,
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
            coverage=coverage(totals.memory),
            plural=plural,
            share=share,
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
            figures = self._ledger.figures
            totals.memory = _memory(figures)
            cards = figures[_UTILISATION_CARDS]
            totals.utilisation = figures[_UTILISATION] / 1000 / cards if cards else None
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
{%- macro card(name, value, text, label, cover='') %}
<div class="card" data-total="{{ name }}" data-value="{{ '' if value is none else value }}"><div class="value">{{ text }}</div><div class="label">{{ label }}</div>
{%- if cover %}<div class="coverage">{{ cover }}</div>{% endif %}</div>
{%- endmacro %}
{%- set u = t.use %}
{{ card('nodes', t.nodes, t.nodes|count, 'nodes') }}
{%- if cluster %}
{{ card('cards', t.memory.cards, t.memory.cards|count, 'GPU cards') }}
{{ card('memory_used', t.memory.used, t.memory.used|size, 'memory used on the cards', coverage) }}
{%- else %}
{{ card('memory_used', u.memory_used, u.memory_used|size, 'memory used by your vGPUs', share(u.memory_used_vgpus, u.vgpus, 'used memory reported')) }}
{%- endif %}
{{ card('memory_allocated', u.memory_allocated, u.memory_allocated|size, 'memory allocated to vGPUs', share(u.memory_allocated_vgpus, u.vgpus, 'a memory allocation')) }}
{{ card('cores_used', u.cores_used, u.cores_used|cores, 'cores used of ' ~ (u.cores_allocated|cores) ~ ' allocated', 'used: ' ~ share(u.cores_used_vgpus, u.vgpus, 'SM utilisation reported') ~ '; allocated: ' ~ share(u.cores_allocated_vgpus, u.vgpus, 'a core share')) }}
{{ card('idle', u.idle, u.idle|count, 'of ' ~ (u.allocations|count) ~ ' allocations idle over ' ~ idle_after) }}
{%- if cluster %}
{{ card('unreported', t.states['unreported'], t.states['unreported']|count, 'nodes without a usage source') }}
{%- endif %}
</div>
{%- if cluster %}
{%- set m = t.memory %}
<p class="memory-coverage" data-cards="{{ m.cards }}" data-used-cards="{{ m.used_cards }}" data-total="{{ '' if m.total is none else m.total }}" data-total-cards="{{ m.total_cards }}" data-compared-cards="{{ m.compared_cards }}" data-compared-used="{{ '' if m.compared_used is none else m.compared_used }}" data-compared-total="{{ '' if m.compared_total is none else m.compared_total }}" data-compared-allocated="{{ '' if m.compared_allocated is none else m.compared_allocated }}">
{{ bar('cluster memory', m.compared_used, m.compared_allocated, m.compared_total, units.size, 480, 18) }}
<span class="muted">{{ coverage }}{% if m.compared_cards %}; allocated to vGPUs on those cards: {{ m.compared_allocated|size }}{% endif %}</span></p>
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
<p class="muted">Each tile is a node, shaded by {{ 'its cards\\' mean utilisation' if cluster else 'your vGPUs\\' mean SM utilisation' }}; nodes that need a look (failing, stale, unreported) come first, with a dashed border and their state written out. Memory reads used of total on the cards that report both.</p>
{{ pager }}
<div class="tiles">
{%- for tile in tiles %}
<a class="tile band-{{ [tile.band - 1, 0]|max }} {{ tile.state }}" href="{{ tile.href }}" data-node="{{ tile.node }}" data-state="{{ tile.state }}">
<div class="name">{{ tile.node }}</div>
<div>{% if tile.state != 'ok' %}<span class="state state-{{ tile.state }}">{{ tile.state }}</span> {% endif %}{{ bands[tile.band] if tile.band < 2 else tile.utilisation|percent_100 }}{% if tile.cards %} · {{ plural(tile.cards, 'card') }}{% endif %}</div>
<div class="muted">
{%- if tile.compared %}{{ tile.compared_used|size }} of {{ tile.compared_total|size }}{% if tile.compared < tile.cards %} on {{ tile.compared }}/{{ tile.cards }} cards{% endif %}
{%- else %}{{ tile.memory_used|size }} used{% endif %}</div>
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
<tr class="namespace" data-namespace="{{ name }}" data-memory-allocated="{{ '' if u.memory_allocated is none else u.memory_allocated }}" data-memory-used="{{ '' if u.memory_used is none else u.memory_used }}" data-cores-allocated="{{ '' if u.cores_allocated is none else u.cores_allocated }}" data-cores-used="{{ '' if u.cores_used is none else u.cores_used }}"><td><a href="/workloads?namespace={{ name|urlencode }}">{{ name }}</a></td>
<td class="num">{{ u.memory_allocated|size }}</td><td class="num">{{ u.memory_used|size }}</td>
<td>{{ bar(name ~ ' memory', u.memory_used, u.memory_allocated, None, units.size, 140, 14) or units.MISSING }}</td>
<td class="num">{{ u.cores_used|cores }} / {{ u.cores_allocated|cores }}</td></tr>
{%- else %}
<tr><td colspan="5" class="muted">No vGPU allocations.</td></tr>
{%- endfor %}
</tbody></table>
{%- endfor %}
</div>
<p class="muted">A namespace whose vGPUs have no memory allocation (whole cards, MIG instances without a node agent) reads {{ units.MISSING }} allocated and draws no bar.</p>
</section>
""")
