"""Tenants see only their own namespaces through the Prometheus API, as behind prom-label-proxy.

A collector whose history holds namespaces ``A``, ``B`` and ``AB``, cards and
the collector's own series (``fuzz/tenant_promql.py``: ``A``'s values are
small, everything else's a million or more). A test-only middleware sets the
request's :class:`~collector.auth.access.Access` from ``X-Test-Tenant: A,B``
(absent: a cluster reader; empty: a tenant of no namespace). Each read is made
as tenant ``A``, which must see nothing of the others, and as a cluster reader,
which must see them: so the read does reach them and the tenant's answer is
the restriction's doing.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from helpers import eventually, serving
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from collector.app import STORE, build_app
from collector.auth.access import ACCESS, Access
from collector.promql.plan import (
    SelectorNode,
    children,
    compile_query,
    restrict,
    tenant_matcher,
)
from collector.promql.query import Prepared
from collector.settings import CollectorSettings
from fuzz import tenant_promql
from fuzz.tenant_promql import B_ONLY, CARD, OWN, TENANT, X, Y, check, fill

OTHERS = {"B", "AB"}
HIDDEN_NAMES = {CARD, OWN, B_ONLY}
"""Families a tenant of ``A`` has no series of."""
HIDDEN_LABELS = {"secret_b", "model", "version"}
"""Label names only other namespaces', cards' and the collector's series carry."""
BIG = 1e5
"""Every value of a series not ``A``'s is at least ten times this; every ``A``-only answer
below is under it."""


@web.middleware
async def access_from_header(request: web.Request, handler: Any) -> web.StreamResponse:
    """The request's reader from ``X-Test-Tenant`` (the real one reviews a bearer token)."""
    header = request.headers.get("X-Test-Tenant")
    if header is not None:
        names = frozenset(name for name in header.split(",") if name)
        request[ACCESS] = Access(f"tenant:{header}", names)
    response: web.StreamResponse = await handler(request)
    return response


@dataclass
class Api:
    base: str
    http: aiohttp.ClientSession
    end: float

    async def call(
        self, path: str, params: list[tuple[str, str]], tenant: str | None
    ) -> tuple[int, Any, dict[str, str]]:
        headers = {} if tenant is None else {"X-Test-Tenant": tenant}
        url = f"{self.base}/prometheus/api/v1/{path}"
        async with self.http.get(url, params=params, headers=headers) as resp:
            return resp.status, await resp.json(), dict(resp.headers)

    async def data(self, path: str, params: list[tuple[str, str]], tenant: str | None) -> Any:
        status, body, _ = await self.call(path, params, tenant)
        assert status == 200, body
        return body["data"]


def collector(**overrides: object) -> web.Application:
    """The collector app, with the test's access middleware innermost."""
    app = build_app(
        CollectorSettings(
            listen="127.0.0.1:0",
            kubernetes=False,
            history_retention=86400.0,
            **overrides,  # type: ignore[arg-type]
        )
    )
    app.middlewares.append(access_from_header)
    return app


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    app = collector()
    # Half a minute off the minute: a subquery's steps fall on multiples of its step
    # (Prometheus 2.42's engine.go, SubqueryExpr) and its range is closed, so
    # `[5m:1m]` holds six steps when the time is on the minute and five otherwise; the
    # reads' expected values count five.
    end = float(int(time.time()) // 60 * 60 - 30)
    fill(app[STORE].history, end)
    async with serving(app) as base, aiohttp.ClientSession() as http:
        yield Api(base, http, end)


# --- what a tenant's answer may hold, and what shows a cluster reader's reaches the others ---


def rows(data: Any) -> list[tuple[dict[str, str], list[str]]]:
    """Label sets and values of any read's ``data``."""
    if isinstance(data, dict) and "resultType" in data:
        kind, result = data["resultType"], data["result"]
        if kind in ("scalar", "string"):
            return [({}, [result[1]])]
        if kind == "vector":
            return [(r["metric"], [r["value"][1]]) for r in result]
        return [(r["metric"], [v for _, v in r["values"]]) for r in result]
    if isinstance(data, list) and all(isinstance(d, dict) for d in data):
        return [(d, []) for d in data]  # /series
    return []


def words(data: Any) -> set[str]:
    """Label names, label values or family names: what /labels, /label/x/values, /metadata list."""
    if isinstance(data, dict) and "resultType" not in data:
        return set(data)  # /metadata
    if isinstance(data, list) and all(isinstance(d, str) for d in data):
        return set(data)
    return set()


def number(text: str) -> float:
    return float(text)


def hides_others(data: Any, relabelled: bool = False) -> None:
    """Nothing of another namespace, a card or the collector's own in ``data``."""
    for labels, values in rows(data):
        assert labels.get("__name__") not in HIDDEN_NAMES, labels
        assert not HIDDEN_LABELS & set(labels), labels
        if not relabelled:
            assert labels.get("namespace", "A") == "A", labels
            for value in values:
                assert not abs(number(value)) >= BIG, (labels, value)
    listed = words(data)
    assert not listed & (OTHERS | HIDDEN_NAMES | HIDDEN_LABELS | {"b1", "ab1", "H200"}), listed


def shows_others(data: Any) -> bool:
    """Whether ``data`` holds something of another namespace, a card or the collector's own."""
    for labels, values in rows(data):
        if labels.get("namespace", "A") != "A" or labels.get("__name__") in HIDDEN_NAMES:
            return True
        if HIDDEN_LABELS & set(labels):
            return True
        if any(abs(number(v)) >= BIG for v in values if not math.isnan(number(v))):
            return True
    return bool(words(data) & (OTHERS | HIDDEN_NAMES | HIDDEN_LABELS | {"b1", "ab1", "H200"}))


def values_of(data: Any) -> list[tuple[tuple[tuple[str, str], ...], list[str]]]:
    """``rows`` without ``node``, sorted: what the expectations below name."""
    out = [
        (tuple(sorted((k, v) for k, v in labels.items() if k != "node")), values)
        for labels, values in rows(data)
    ]
    return sorted(out)


def pods(data: Any) -> list[str]:
    return sorted(labels.get("pod", "") for labels, _ in rows(data))


def scalar(data: Any) -> str:
    assert data["resultType"] == "scalar", data
    value: str = data["result"][1]
    return value


@dataclass(frozen=True)
class Read:
    """One read of the API, as tenant ``A`` and as a cluster reader."""

    path: str
    params: tuple[tuple[str, str], ...]
    tenant: Callable[[Any], object] | None = None
    """A check of the tenant's ``data``: returns False (or raises) when wrong."""
    cluster: Callable[[Any], bool] | None = shows_others
    """Whether the cluster reader's ``data`` is as it should be (default: shows the others)."""
    relabelled: bool = False
    """The query writes ``namespace`` itself (``label_replace``), or its values are no series'
    (``time()``): only the tenant check applies, and the names and labels it may not show."""


def q(query: str, **kw: Any) -> Read:
    return Read("query", (("query", query),), **kw)


def qr(query: str, **kw: Any) -> Read:
    return Read("query_range", (("query", query),), **kw)


def empty(data: Any) -> bool:
    return not rows(data) and not words(data)


READS: dict[str, Read] = {
    "sum": q(f"sum({X})", tenant=lambda d: values_of(d) == [((), ["300"])]),
    "count by namespace": q(
        f"count by (namespace) ({X})",
        tenant=lambda d: values_of(d) == [((("namespace", "A"),), ["2"])],
    ),
    "every name": q('{__name__=~".+"}', tenant=lambda d: pods(d) == ["a1", "a1", "a2"]),
    "label_replace to B": q(
        f'label_replace({X}, "namespace", "B", "", "")',
        tenant=lambda d: (
            pods(d) == ["a1", "a2"]
            and sorted(v for _, vs in rows(d) for v in vs) == ["100", "200"]
            and all(labels["namespace"] == "B" for labels, _ in rows(d))
        ),
        cluster=lambda d: pods(d) == ["a1", "a2", "ab1", "b1"],
        relabelled=True,
    ),
    "absent of B": q(
        f'absent({X}{{namespace="B"}})',
        tenant=lambda d: values_of(d) == [((("namespace", "B"),), ["1"])],
        cluster=lambda d: rows(d) == [],  # B's series exist
        relabelled=True,  # the label is the query's own matcher's
    ),
    "absent of B's range": q(
        f'absent_over_time({X}{{namespace="B"}}[5m])',
        tenant=lambda d: values_of(d) == [((("namespace", "B"),), ["1"])],
        cluster=lambda d: rows(d) == [],
        relabelled=True,  # the label is the query's own matcher's
    ),
    "or vector(1)": q(f"{X} or vector(1)", tenant=lambda d: pods(d) == ["", "a1", "a2"]),
    "subquery": q(
        f"sum_over_time({X}[5m:1m])",
        tenant=lambda d: sorted(v for _, vs in rows(d) for v in vs) == ["1000", "500"],
    ),
    "at end()": q(f"{X} @ end()", tenant=lambda d: pods(d) == ["a1", "a2"]),
    "offset": q(f"{X} offset 5m", tenant=lambda d: pods(d) == ["a1", "a2"]),
    "at and offset in a range": q(
        f"max_over_time({X}[2m] @ end() offset 1m)", tenant=lambda d: pods(d) == ["a1", "a2"]
    ),
    "namespace A or B": q(f'{X}{{namespace=~"A|B"}}', tenant=lambda d: pods(d) == ["a1", "a2"]),
    "namespace not A": q(f'{X}{{namespace!="A"}}', tenant=empty),
    "namespace anything": q(f'{X}{{namespace=~".*"}}', tenant=lambda d: pods(d) == ["a1", "a2"]),
    "namespace prefix": q(f'{X}{{namespace=~"A.+"}}', tenant=empty),
    "namespace B": q(f'{X}{{namespace="B"}}', tenant=empty),
    "B only family": q(B_ONLY, tenant=empty),
    "topk": q(f"topk(1, {X})", tenant=lambda d: pods(d) == ["a2"]),
    "bottomk of others": q(f'bottomk(1, {X}{{namespace!~"A"}})', tenant=empty),
    "group_left card": q(
        f"{X} * on(device_uuid) group_left {CARD}",
        tenant=empty,
        cluster=lambda d: len(rows(d)) == 4 and shows_others(d),
    ),
    "unless card": q(
        f"{X} unless on(device_uuid) {CARD}",
        tenant=lambda d: pods(d) == ["a1", "a2"],
        cluster=lambda d: rows(d) == [],  # every container's card is there for the cluster
    ),
    "count hami": q(
        'count({__name__=~"hami_.*"})',
        tenant=lambda d: values_of(d) == [((), ["3"])],
        cluster=lambda d: int(rows(d)[0][1][0]) >= 11,
    ),
    "scalar sum": q(f"scalar(sum({X}))", tenant=lambda d: scalar(d) == "300"),
    "time": q("time()", tenant=lambda d: number(scalar(d)) > BIG, cluster=None, relabelled=True),
    "card": q(CARD, tenant=empty),
    "collector's own": q(OWN, tenant=empty),
    "count_values": q(
        f'count_values("v", {X})',
        tenant=lambda d: sorted(labels["v"] for labels, _ in rows(d)) == ["100", "200"],
        cluster=lambda d: "1000000" in {labels["v"] for labels, _ in rows(d)},
    ),
    "sum by device": q(
        f"sum by (device_uuid) ({X})",
        tenant=lambda d: (
            values_of(d)
            == [((("device_uuid", "GPU-1"),), ["100"]), ((("device_uuid", "GPU-2"),), ["200"])]
        ),
    ),
    "label_join": q(
        f'label_join({X}, "who", "/", "namespace", "pod")',
        tenant=lambda d: sorted(labels["who"] for labels, _ in rows(d)) == ["A/a1", "A/a2"],
    ),
    "ratio over everything": q(
        f"sum({X}) / scalar(count({{__name__=~'.+'}}))",
        tenant=lambda d: values_of(d) == [((), ["100"])],
    ),
    "range selector": q(f"{X}[1m]", tenant=lambda d: pods(d) == ["a1", "a2"]),
    "range sum": qr(f"sum({X})", tenant=lambda d: {v for _, vs in rows(d) for v in vs} == {"300"}),
    "range raw": qr(X, tenant=lambda d: pods(d) == ["a1", "a2"]),
    "range rate": qr(f"rate({X}[5m])", tenant=lambda d: pods(d) == ["a1", "a2"]),
    "range subquery": qr(f"max_over_time({Y}[5m:1m])", tenant=lambda d: pods(d) == ["a1"]),
    "range offset": qr(f"{X} offset 5m", tenant=lambda d: pods(d) == ["a1", "a2"]),
    "series of x": Read("series", (("match[]", X),), tenant=lambda d: pods(d) == ["a1", "a2"]),
    "series of every name": Read(
        "series", (("match[]", '{__name__=~".+"}'),), tenant=lambda d: pods(d) == ["a1", "a1", "a2"]
    ),
    "series of B": Read("series", (("match[]", '{namespace="B"}'),), tenant=empty),
    "series of cards": Read("series", (("match[]", CARD),), tenant=empty),
    "series, two matches": Read(
        "series",
        (("match[]", f'{X}{{namespace="B"}}'), ("match[]", Y)),
        tenant=lambda d: [labels["__name__"] for labels, _ in rows(d)] == [Y],
    ),
    "labels": Read(
        "labels",
        (),
        tenant=lambda d: d == ["__name__", "container", "device_uuid", "namespace", "node", "pod"],
    ),
    "labels of B": Read("labels", (("match[]", '{namespace="B"}'),), tenant=lambda d: d == []),
    "labels of every name": Read(
        "labels", (("match[]", '{__name__=~".+"}'),), tenant=lambda d: "pod" in d
    ),
    "namespace values": Read("label/namespace/values", (), tenant=lambda d: d == ["A"]),
    "namespace values of x": Read(
        "label/namespace/values",
        (("match[]", f'{X}{{namespace=~".*"}}'),),
        tenant=lambda d: d == ["A"],
    ),
    "pod values": Read("label/pod/values", (), tenant=lambda d: d == ["a1", "a2"]),
    "name values": Read("label/__name__/values", (), tenant=lambda d: d == [X, Y]),
    "card label values": Read(
        "label/model/values", (), tenant=lambda d: d == [], cluster=lambda d: d == ["H200"]
    ),
    "metadata": Read(
        "metadata", (), tenant=lambda d: X in d and Y in d and not HIDDEN_NAMES & set(d)
    ),
    "metadata of B's family": Read(
        "metadata",
        (("metric", B_ONLY),),
        tenant=lambda d: d == {},
        cluster=lambda d: set(d) == {B_ONLY},
    ),
}


def _params(read: Read, end: float) -> list[tuple[str, str]]:
    params = list(read.params)
    if read.path == "query":
        params.append(("time", str(end)))
    elif read.path == "query_range":
        params += [("start", str(end - 300)), ("end", str(end)), ("step", "60")]
    return params


def test_at_least_thirty_reads_try_to_see_the_others() -> None:
    assert len(READS) >= 30
    assert {r.path.split("/")[0] for r in READS.values()} >= {
        "query",
        "query_range",
        "series",
        "labels",
        "label",
        "metadata",
    }


@pytest.mark.parametrize("name", list(READS))
async def test_a_tenant_sees_only_its_namespace(api: Api, name: str) -> None:
    read = READS[name]
    params = _params(read, api.end)
    mine = await api.data(read.path, params, "A")
    hides_others(mine, read.relabelled)
    if read.tenant is not None:
        assert read.tenant(mine), mine
    cluster = await api.data(read.path, params, None)
    if read.cluster is not None:
        assert read.cluster(cluster), cluster


async def test_a_tenant_of_two_namespaces_sees_both(api: Api) -> None:
    at = [("time", str(api.end))]
    data = await api.data("query", [("query", f"count by (namespace) ({X})"), *at], "A,B")
    assert values_of(data) == [((("namespace", "A"),), ["2"]), ((("namespace", "B"),), ["1"])]
    assert await api.data("label/namespace/values", [], "B,A") == ["A", "B"]
    assert B_ONLY in await api.data("metadata", [], "A,B")


async def test_absent_tells_a_tenant_nothing_about_other_namespaces(api: Api) -> None:
    """``absent`` of another namespace's series is 1 whether it has them or not, labelled
    from the query's own matchers alone, as for a namespace nobody has."""
    at = [("time", str(api.end))]
    of_b = await api.data("query", [("query", f'absent({X}{{namespace="B"}})'), *at], "A")
    of_none = await api.data("query", [("query", f'absent({X}{{namespace="none"}})'), *at], "A")
    assert values_of(of_b) == [((("namespace", "B"),), ["1"])]
    assert values_of(of_none) == [((("namespace", "none"),), ["1"])]
    # While to the cluster reader B's series are there, and the absent namespace's not.
    assert (
        rows(await api.data("query", [("query", f'absent({X}{{namespace="B"}})'), *at], None)) == []
    )
    assert values_of(
        await api.data("query", [("query", f'absent({X}{{namespace="none"}})'), *at], None)
    ) == [((("namespace", "none"),), ["1"])]


async def test_a_tenant_of_no_namespace_reads_nothing(api: Api) -> None:
    at = [("time", str(api.end))]
    for query in ('{__name__=~".+"}', f"sum({X})", f'{X}{{namespace=~".*"}}', CARD):
        data = await api.data("query", [("query", query), *at], "")
        assert data["result"] == [], query
    assert await api.data("series", [("match[]", '{__name__=~".+"}')], "") == []
    assert await api.data("labels", [], "") == []
    assert await api.data("label/namespace/values", [], "") == []
    assert await api.data("metadata", [], "") == {}


async def test_namespace_names_are_matched_literally(api: Api) -> None:
    """A tenant's namespace names are escaped: ``A.`` or ``.*`` is no regex."""
    at = [("time", str(api.end))]
    for tenant in (".*", "A.", "A|AB", "(A)"):
        data = await api.data("query", [("query", '{__name__=~".+"}'), *at], tenant)
        assert data["result"] == [], tenant
    data = await api.data("query", [("query", '{__name__=~".+"}'), *at], "AB")
    assert pods(data) == ["ab1"]


# --- the restriction in the plan ---


def _selectors(node: Any) -> list[SelectorNode]:
    if isinstance(node, SelectorNode):
        return [node]
    return [s for child in children(node) for s in _selectors(child)]


def test_restrict_adds_the_matcher_to_every_selector_and_keeps_their_own() -> None:
    text = (
        f'sum_over_time((label_replace({X}{{namespace=~".+"}} @ end() offset 1m, "a", "b", "", ""))'
        f"[5m:1m]) * on(device_uuid) group_left topk(1, rate({CARD}[5m] offset 1m))"
        f" or absent({Y}) + scalar(sum({X}))"
    )
    plan = restrict(compile_query(text), frozenset({"A", "b.c"}))
    found = _selectors(plan)
    assert len(found) == 4
    matcher = tenant_matcher(frozenset({"A", "b.c"}))
    for sel in found:
        assert sel.matchers[-1] == matcher
        assert sel.matchers.count(matcher) == 1
    assert matcher.matches({"namespace": "b.c"})
    assert matcher.matches({"namespace": "A"})
    assert not matcher.matches({"namespace": "bxc"})
    assert not matcher.matches({})
    first = found[0]
    assert [m.value for m in first.matchers[:-1]] == [X, ".+"], "the selector's own kept"


def test_an_empty_tenant_matcher_matches_nothing() -> None:
    nothing = tenant_matcher(frozenset())
    for labels in ({}, {"namespace": ""}, {"namespace": "A"}, {"namespace": "(?!)"}):
        assert not nothing.matches(labels)
    assert not tenant_matcher(frozenset({""})).matches({}), "the empty name is no namespace"


# --- the limit per identity ---


async def test_an_identity_past_its_query_limit_is_answered_429(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = collector(query_max_concurrency_per_identity=1)
    end = float(int(time.time()))
    fill(app[STORE].history, end)
    started, release = threading.Event(), threading.Event()
    run = Prepared.run

    def held(self: Prepared) -> Any:
        started.set()
        assert release.wait(60), "the test never released the query"
        return run(self)

    monkeypatch.setattr(Prepared, "run", held)
    async with serving(app) as base, aiohttp.ClientSession() as http:
        api = Api(base, http, end)
        params = [("query", f"sum({X})"), ("time", str(end))]
        for tenant in (None, "A"):  # cluster readers are limited too
            started.clear()
            release.clear()
            first = asyncio.ensure_future(api.call("query", params, tenant))

            async def running() -> bool:
                return started.is_set()

            await eventually(running, 30, "the first query to run")
            status, body, headers = await api.call("query", params, tenant)
            assert status == 429, body
            assert (body["status"], body["errorType"]) == ("error", "unavailable"), body
            assert headers["Retry-After"] == "1"
            release.set()  # another identity's query runs meanwhile: held() passes through
            other = "B" if tenant is None else None
            status, body, _ = await api.call("query", params, other)
            assert status == 200, body
            status, body, _ = await first
            assert status == 200, body
            status, body, _ = await api.call("query", params, tenant)
            assert status == 200, "its place is given back once the query is done"


# --- any query, drawn from a grammar: as tenant A it answers as over A's series alone ---

_NAMES = [X, Y, CARD, OWN, B_ONLY, "nope"]
_MATCHERS = [
    'namespace="A"',
    'namespace="B"',
    'namespace=~".*"',
    'namespace=~".+"',
    'namespace=~"A|B"',
    'namespace!="A"',
    'namespace!~"A"',
    'pod=~"a.*|b.*"',
    'device_uuid="GPU-1"',
]


_MODIFIERS = ["", "", " offset 1m", " @ end()", " @ start() offset 2m"]


@st.composite
def selector(draw: st.DrawFn, modified: bool = True) -> str:
    if draw(st.integers(0, 5)) == 0:
        inside = [draw(st.sampled_from(['__name__=~".+"', '__name__=~"hami_.*"']))]
        inside += draw(st.lists(st.sampled_from(_MATCHERS), max_size=2))
        text = "{" + ",".join(inside) + "}"
    else:
        name = draw(st.sampled_from(_NAMES))
        matchers = draw(st.lists(st.sampled_from(_MATCHERS), max_size=2))
        text = name + ("{" + ",".join(matchers) + "}" if matchers else "")
    return text + (draw(st.sampled_from(_MODIFIERS)) if modified else "")


_SCALARS = st.sampled_from(["2", "time()", f"scalar(sum({X}))", f"scalar({Y})"])


def _grow(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    agg = st.sampled_from(["sum", "max", "min", "count", "avg", "group"])
    by = st.sampled_from(["", " by (namespace)", " by (device_uuid)", " without (pod)"])
    fn = st.sampled_from(["abs", "sort", "ceil", "timestamp", "-"])
    over = st.sampled_from(["sum_over_time", "max_over_time", "rate", "count_over_time"])
    op = st.sampled_from(["+", "*", "/", ">", "and", "or", "unless"])
    arith = st.sampled_from(["+", "*", "/", ">", "<= bool"])
    matching = st.sampled_from(
        ["", " on(device_uuid)", " on(device_uuid) group_left", " ignoring(pod)"]
    )
    return st.one_of(
        st.tuples(agg, by, inner).map(lambda t: f"{t[0]}{t[1]} ({t[2]})"),
        st.tuples(fn, inner).map(lambda t: f"{t[0]}({t[1]})" if t[0] != "-" else f"-({t[1]})"),
        st.tuples(over, inner, st.sampled_from(_MODIFIERS)).map(
            lambda t: f"{t[0]}(({t[1]})[5m:1m]{t[2]})"
        ),
        st.tuples(inner, op, matching, inner).map(lambda t: f"({t[0]}) {t[1]}{t[2]} ({t[3]})"),
        st.tuples(inner, arith, _SCALARS).map(lambda t: f"({t[0]}) {t[1]} {t[2]}"),
        st.tuples(st.sampled_from(["topk", "bottomk"]), inner).map(lambda t: f"{t[0]}(1, {t[1]})"),
        inner.map(lambda t: f'count_values("v", {t})'),
    )


def _leaf() -> st.SearchStrategy[str]:
    over = st.sampled_from(["sum_over_time", "rate", "last_over_time", "absent_over_time"])
    return st.one_of(
        selector(),
        st.tuples(over, selector(modified=False), st.sampled_from(_MODIFIERS)).map(
            lambda t: f"{t[0]}({t[1]}[5m]{t[2]})"
        ),
        st.sampled_from(_NAMES).map(lambda n: f"absent({n})"),
        st.just("vector(1)"),
    )


QUERIES = st.recursive(_leaf(), _grow, max_leaves=6)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(QUERIES)
@example('(absent_over_time({__name__=~".+",namespace="B"}[5m])) + (vector(1))')
def test_any_query_as_a_tenant_answers_as_over_its_own_series(text: str) -> None:
    check(text)


@settings(max_examples=200, deadline=None)
@given(QUERIES)
def test_a_tenant_s_sums_are_sums_of_its_own_series(text: str) -> None:
    """``sum`` over a tenant's answer is the sum over ``A``'s series alone, never ``B``'s."""
    query = f"sum({text})"
    tenant = tenant_promql.outcome(query, tenant_promql._ALL, TENANT)
    own = tenant_promql.outcome(query, tenant_promql._A_ONLY, None)
    assert tenant == own
    if tenant[0] == "result" and isinstance(tenant[1], list):
        for labels, value in tenant[1]:
            assert dict(labels).get("namespace", "A") == "A" or "label_" in text
            assert not isinstance(value, str) or value == "NaN" or abs(float(value)) < 1e12
