"""Fuzz target ``tenant_promql``: a tenant's query sees exactly what it would over its own series.

The property, prom-label-proxy's: any query text, run as tenant ``A`` over a
history holding ``A``'s, ``B``'s, ``AB``'s, cards' and the collector's own
series, answers exactly as the same text run by a cluster reader over a history
holding ``A``'s series alone: the same series, the same values, the same error.
So nothing of another namespace, and no series without a ``namespace`` label,
reaches a tenant, whatever the selectors, functions, subqueries, ``@`` or
``offset`` (``tests/integration/test_tenant_promql.py`` draws queries from a grammar and
reads the HTTP API; this target takes raw text).

One exception, about labels the query itself writes, never data:
``label_replace``/``label_join`` may write any ``namespace``. Inputs using them
are compared on values only.
"""

from __future__ import annotations

from collections.abc import Callable

from collector.promql.floats import format_float
from collector.promql.query import prepare_instant
from collector.promql.values import Element, Matrix, QueryError, RangeSeries, Scalar, String, Vector
from collector.tsdb.history import History

X = "hami_container_device_memory_bytes"
"""A container family every namespace has (tenant ``A``: 100 and 200; others: a million and up)."""
Y = "hami_container_device_utilization_ratio"
"""A second container family, of ``A`` and ``B``."""
CARD = "hami_host_gpu_memory_total_bytes"
"""A card's family: no ``namespace`` label."""
OWN = "hami_usage_collector_build_info"
"""The collector's own: no ``namespace`` label."""
B_ONLY = "hami_vgpu_memory_limit_bytes"
"""A family only namespace ``B`` has series of."""
TENANT = frozenset({"A"})

SERIES: list[tuple[str, str, float]] = [
    # (node, series, value): A's values small, every other's a million or more.
    ("n1", f'{X}{{namespace="A",pod="a1",container="c",device_uuid="GPU-1"}}', 100.0),
    ("n2", f'{X}{{namespace="A",pod="a2",container="c",device_uuid="GPU-2"}}', 200.0),
    ("n1", f'{X}{{namespace="B",pod="b1",container="c",device_uuid="GPU-1",secret_b="1"}}', 1e6),
    ("n2", f'{X}{{namespace="AB",pod="ab1",container="c",device_uuid="GPU-3"}}', 2e6),
    ("n1", f'{Y}{{namespace="A",pod="a1",container="c",device_uuid="GPU-1"}}', 0.5),
    ("n1", f'{Y}{{namespace="B",pod="b1",container="c",device_uuid="GPU-1"}}', 5e6),
    ("n1", f'{B_ONLY}{{namespace="B",pod="b1",container="c",device_uuid="GPU-1"}}', 4e6),
    ("n1", f'{CARD}{{device_uuid="GPU-1",model="H200"}}', 8e10),
    ("n2", f'{CARD}{{device_uuid="GPU-2",model="H200"}}', 8e10),
    ("n2", f'{CARD}{{device_uuid="GPU-3",model="H200"}}', 8e10),
    ("collector", f'{OWN}{{version="1"}}', 3e6),
]
"""Every stored series: namespaces ``A``, ``B`` and ``AB`` (``A``'s regex must not reach it),
cards and the collector's own."""

POINTS = 21
STEP = 30.0


def fill(history: History, end: float, keep: Callable[[str], bool] = lambda _: True) -> None:
    """Ten minutes at 30 s of every series of :data:`SERIES` whose text ``keep`` accepts."""
    nodes: dict[str, dict[bytes, float]] = {}
    for node, series, value in SERIES:
        if keep(series):
            nodes.setdefault(node, {})[series.encode()] = value
    for k in range(POINTS):
        t = end - (POINTS - 1 - k) * STEP
        for node, values in nodes.items():
            history.record(node, values, t)


def of_a(series: str) -> bool:
    """Whether a series of :data:`SERIES` is namespace ``A``'s."""
    return 'namespace="A"' in series


END = 1_000.0
_ALL = History(clock=lambda: END)
fill(_ALL, END)
_A_ONLY = History(clock=lambda: END)
fill(_A_ONLY, END, of_a)

Outcome = tuple[str, object]


def outcome(text: str, history: History, namespaces: frozenset[str] | None) -> Outcome:
    """What ``text`` answers at :data:`END`: its result, comparable, or its error."""
    try:
        result = prepare_instant(text, END, history, 300.0, 5.0, 100_000, namespaces).run()
    except QueryError as exc:
        return "error", (exc.error_type, str(exc))
    return "result", comparable(result)


def comparable(result: Vector | Scalar | String | Matrix, labels: bool = True) -> object:
    """A result as sorted, printable values (NaNs equal), with its series' labels or not."""
    if isinstance(result, Scalar):
        return format_float(result.value)
    if isinstance(result, String):
        return result.value
    rows: list[tuple[object, object]] = []
    for item in result:
        key = sorted(item.labels.items()) if labels else ()
        if isinstance(item, Element):
            rows.append((key, format_float(item.value)))
        else:
            assert isinstance(item, RangeSeries)
            rows.append((key, [(t, format_float(v)) for t, v in item.points]))
    return sorted(rows, key=repr)


def relabels(text: str) -> bool:
    """Whether the query writes labels itself (see the module's note)."""
    return "label_" in text


class Leak(AssertionError):
    """A tenant's query answered otherwise than over its own series alone."""


def check(text: str) -> bool:
    """Assert the property for ``text``; answer whether it was a query that ran."""
    tenant = outcome(text, _ALL, TENANT)
    own = outcome(text, _A_ONLY, None)
    if "timeout" in repr(tenant) or "timeout" in repr(own):
        return False  # one of them ran out of time: nothing to compare
    ran = tenant[0] == "result"
    if ran and own[0] == "result" and relabels(text):
        tenant, own = _values_only(text, _ALL, TENANT), _values_only(text, _A_ONLY, None)
    if tenant != own:
        raise Leak(f"{text!r}: as tenant {tenant!r}, over its own series {own!r}")
    return ran


def _values_only(text: str, history: History, namespaces: frozenset[str] | None) -> Outcome:
    result = prepare_instant(text, END, history, 300.0, 5.0, 100_000, namespaces).run()
    return "values", comparable(result, labels=False)


def tenant_promql(data: bytes) -> bool:
    """Any query text: as tenant ``A`` it answers as over ``A``'s series alone."""
    return check(data.decode("utf-8", "replace"))


def seeds() -> list[bytes]:
    """Queries of every shape the tenant restriction must reach."""
    return [
        text.encode()
        for text in (
            f"sum({X})",
            f"count by (namespace) ({X})",
            '{__name__=~".+"}',
            f'label_replace({X}, "namespace", "B", "", "")',
            f'absent({X}{{namespace="B"}})',
            f"{X} or vector(1)",
            f"sum_over_time({X}[5m:1m])",
            f"{X} @ end() offset 5m",
            f'{X}{{namespace=~"A|B|.*"}} / on(device_uuid) group_left {CARD}',
            f'topk(1, {X}{{namespace!="A"}})',
            'count({__name__=~"hami_.*"})',
            f"scalar(sum({Y})) * {OWN}",
        )
    ]
