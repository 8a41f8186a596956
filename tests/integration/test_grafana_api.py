"""Every endpoint Grafana's Prometheus datasource calls on ``/prometheus/api/v1/``.

Against the collector (its history filled as ``tests/integration/test_tenant_promql.py``
fills it, read as tenant ``A`` and as a cluster reader) and, in one test, against
a real Prometheus 2.42 given the same requests: same status codes, envelope
keys, ``data`` types and ``errorType``; ``format_query``'s texts compared one by
one, with the known differences named.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from helpers import real_prometheus, serving
from test_tenant_promql import HIDDEN_NAMES, collector

from collector import __version__
from collector.app import STORE
from fuzz.tenant_promql import B_ONLY, X, Y, fill

PROMETHEUS_BUILDINFO = {"version", "revision", "branch", "buildUser", "buildDate", "goVersion"}


@dataclass
class Api:
    base: str
    http: aiohttp.ClientSession

    async def call(
        self,
        path: str,
        params: list[tuple[str, str]] | None = None,
        method: str = "GET",
        tenant: str | None = None,
    ) -> tuple[int, Any]:
        """Status and JSON body (None for an empty one); POST sends ``params`` as a form."""
        headers = {} if tenant is None else {"X-Test-Tenant": tenant}
        url = f"{self.base}/prometheus/api/v1/{path}"
        query, form = (params, None) if method == "GET" else (None, params)
        async with self.http.request(method, url, params=query, data=form, headers=headers) as resp:
            body = await resp.read()
            if not body or resp.content_type != "application/json":
                return resp.status, None
            return resp.status, await resp.json()

    async def data(self, path: str, params: list[tuple[str, str]] | None = None, **kw: Any) -> Any:
        status, body = await self.call(path, params, **kw)
        assert status == 200, body
        assert body["status"] == "success", body
        return body["data"]

    async def error(self, path: str, params: list[tuple[str, str]] | None = None, **kw: Any) -> str:
        """The ``error`` of a 400 ``bad_data`` answer."""
        status, body = await self.call(path, params, **kw)
        assert status == 400, (status, body)
        assert set(body) == {"status", "errorType", "error"}, body
        assert body["status"] == "error", body
        assert body["errorType"] == "bad_data", body
        message: str = body["error"]
        return message


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    app = collector()
    fill(app[STORE].history, float(int(time.time())))
    async with serving(app) as base, aiohttp.ClientSession() as http:
        yield Api(base, http)


# --- status/buildinfo ---


def _semver(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("+")[0].split("-")[0].split("."))


async def test_buildinfo_is_prometheus_2_42_and_switches_on_what_grafana_checks(api: Api) -> None:
    """What Grafana does with ``status/buildinfo``'s answer, read in grafana/grafana:

    - ``packages/grafana-prometheus/src/datasource.ts``, ``hasLabelsMatchAPISupport()``:
      ``_isDatasourceVersionGreaterOrEqualTo('2.24.0', PromApplication.Prometheus)``
      (``semver.gte``), true for 2.42.0: label names and values come from ``labels`` and
      ``label/<name>/values`` with ``match[]`` (not from ``series``). It is the one
      version check of the datasource (``language_provider.ts``, ``metric_find_query.ts``,
      the query builder and ad-hoc filters call it); the version is what the config
      editor detects from buildinfo, 2.42.0 one of ``configuration/PromFlavorVersions.ts``'s.
    - ``public/app/features/alerting/unified/api/buildInfo.ts``,
      ``discoverDataSourceFeatures()``: a buildinfo answer, ``status/flags`` not
      answering (else Thanos), no ``features`` (else Mimir, by ``application``):
      "modern Prometheus", ``application: Prometheus``, ``rulerApiEnabled: false``
      (rules are read from ``rules``, never edited through a ruler API).
    - ``datasource.ts``, ``areExemplarsAvailable()``: ``query_exemplars?query=test`` with
      ``start``/``end`` in milliseconds; a success switches the exemplar toggle on
      (see :func:`test_query_exemplars_validates_as_prometheus_and_finds_none`);
      ``loadRules()`` reads recording rules from ``rules``.
    """
    info = await api.data("status/buildinfo")
    assert info["version"] == "2.42.0"
    assert _semver(info["version"]) >= (2, 24, 0), "hasLabelsMatchAPISupport"
    assert "features" not in info, "plain Prometheus, not Mimir"
    assert "application" not in info
    assert info["hamiUsageCollectorVersion"] == __version__
    assert set(info) >= PROMETHEUS_BUILDINFO
    assert all(isinstance(value, str) for value in info.values()), info
    status, _ = await api.call("status/flags")
    assert status == 404, "a status/flags answer would make Grafana take us for Thanos"
    status, _ = await api.call("status/buildinfo", method="POST")
    assert status == 405, "2.42 serves buildinfo on GET only"


# --- query_exemplars ---


async def test_query_exemplars_validates_as_prometheus_and_finds_none(api: Api) -> None:
    now_ms = int(time.time() * 1000)
    grafana = [("query", "test"), ("start", str(now_ms - 1_800_000)), ("end", str(now_ms))]
    for method in ("GET", "POST"):
        for tenant in (None, "A"):
            assert await api.data("query_exemplars", grafana, method=method, tenant=tenant) == []
        assert await api.data("query_exemplars", [("query", f"rate({X}[5m])")]) == []
        status, body = await api.call("query_exemplars", [("query", "1+1")], method=method)
        assert (status, body) == (204, None), "no selector: 2.42 answers 204, no body"
        await api.error("query_exemplars", [("query", "sum(")], method=method)
        await api.error("query_exemplars", [], method=method)
        message = await api.error(
            "query_exemplars", [("query", "x"), ("start", "yesterday")], method=method
        )
        assert message.startswith('invalid parameter "start"'), message
        message = await api.error(
            "query_exemplars", [("query", "x"), ("end", "soon")], method=method
        )
        assert message.startswith('invalid parameter "end"'), message
        message = await api.error(
            "query_exemplars", [("query", "x"), ("start", "20"), ("end", "10")], method=method
        )
        assert message == "end timestamp must not be before start timestamp"


# --- rules and alerts ---


async def test_rules_and_alerts_are_empty_and_rules_checks_its_type(api: Api) -> None:
    for tenant in (None, "A"):
        assert await api.data("rules", tenant=tenant) == {"groups": []}
        assert await api.data("alerts", tenant=tenant) == {"alerts": []}
    for kind in ("alert", "record", "ALERT", "Record", ""):
        assert await api.data("rules", [("type", kind)]) == {"groups": []}
    message = await api.error("rules", [("type", "recording")])
    assert message == 'invalid parameter "type": not supported value "recording"'
    for path in ("rules", "alerts"):
        status, _ = await api.call(path, method="POST")
        assert status == 405, f"2.42 serves {path} on GET only"


# --- format_query ---

FORMATTED = {
    "sum(rate(x[5m])) by (node)": "sum by (node) (rate(x[5m]))",
    'foo{b="2",a="1"}': 'foo{a="1",b="2"}',
    "1+2*3": "1 + 2 * 3",
    "avg(a)/ignoring(b) b": "avg(a) / ignoring (b) b",
    "x[10m:30s] @ end()": "x[10m:30s] @ end()",
    'x{a=~"\\\\d+"}': 'x{a=~"\\\\d+"}',
    (
        "histogram_quantile(0.9, sum by (le, job, instance, namespace, pod, container) "
        '(rate(apiserver_request_duration_seconds_bucket{verb!="WATCH"}[5m])))'
    ): (
        "histogram_quantile(\n  0.9,\n  sum by (le, job, instance, namespace, pod, container) (\n"
        '    rate(apiserver_request_duration_seconds_bucket{verb!="WATCH"}[5m])\n  )\n)'
    ),
}
"""Queries and the canonical text both promql-parser and Prometheus 2.42 give them
(past 100 characters, split into lines as Prometheus' ``Pretty(0)``)."""
DIFFERS = {
    "1.5e-7": ("1.5e-07", "0.00000015"),
    "1e20": ("1e+20", "100000000000000000000"),
    "x + Inf": ("x + +Inf", "x + Inf"),
}
"""Where they differ, each (Prometheus', ours): number literals only. Prometheus writes
them with Go's ``%g`` (an exponent past 21 digits or below 1e-4, ``+Inf`` signed);
promql-parser writes every digit and ``Inf`` unsigned. Both texts parse to the same
number, so the formatted query means the same."""


async def test_format_query_gives_the_parsers_canonical_text(api: Api) -> None:
    for method in ("GET", "POST"):
        for query, formatted in FORMATTED.items():
            assert await api.data("format_query", [("query", query)], method=method) == formatted
            assert await api.data("format_query", [("query", formatted)]) == formatted, "a fixpoint"
        for query, (_, ours) in DIFFERS.items():
            assert await api.data("format_query", [("query", query)], method=method) == ours
        message = await api.error("format_query", [("query", "sum(")], method=method)
        assert message.startswith('invalid parameter "query": '), message
        message = await api.error("format_query", [], method=method)
        assert message.startswith('invalid parameter "query": '), message
    assert await api.data("format_query", [("query", "x")], tenant="A") == "x"


# --- metadata ---


async def test_metadata_limit_and_metric_as_2_42_reads_them(api: Api) -> None:
    everything = await api.data("metadata")
    assert {X, Y, B_ONLY} <= set(everything)
    assert all(
        isinstance(entries, list)
        and len(entries) == 1
        and set(entries[0]) == {"type", "help", "unit"}
        for entries in everything.values()
    ), everything
    first = next(iter(everything))
    assert await api.data("metadata", [("limit", "1")]) == {first: everything[first]}
    assert await api.data("metadata", [("limit", "0")]) == {}
    assert await api.data("metadata", [("limit", "-1")]) == everything, "negative: no limit"
    assert await api.data("metadata", [("limit", "")]) == everything
    assert await api.error("metadata", [("limit", "ten")]) == "limit must be a number"
    assert await api.data("metadata", [("limit_per_metric", "1")]) == everything
    assert await api.data("metadata", [("metric", X)]) == {X: everything[X]}
    assert await api.data("metadata", [("metric", "nothing_of_that_name")]) == {}
    tenant = await api.data("metadata", tenant="A")
    assert {X, Y} <= set(tenant), tenant
    assert not HIDDEN_NAMES & set(tenant), tenant
    assert await api.data("metadata", [("metric", B_ONLY)], tenant="A") == {}
    assert len(await api.data("metadata", [("limit", "1")], tenant="A")) == 1


# --- labels and label values ---


async def test_labels_and_label_values_with_match_start_end_and_limit(api: Api) -> None:
    now = time.time()
    window = [("start", str(now - 3600)), ("end", str(now + 60))]
    for method in ("GET", "POST"):
        names = await api.data("labels", method=method)
        assert {"__name__", "namespace", "pod", "model"} <= set(names)
        assert names == sorted(names)
        assert await api.data("labels", [("limit", "1")], method=method) == names, "2.42: ignored"
        of_x = await api.data("labels", [("match[]", X), *window], method=method)
        assert "model" not in of_x
        assert {"__name__", "namespace", "pod"} <= set(of_x)
        assert await api.data("labels", [("start", str(now + 3600))], method=method) == []
        tenant = await api.data(
            "labels", [("match[]", f"{{__name__=~'{B_ONLY}|{X}'}}")], tenant="A"
        )
        assert "model" not in tenant
        assert "secret_b" not in tenant
        await api.error("labels", [("match[]", "sum(")], method=method)
        message = await api.error("labels", [("start", "dawn")], method=method)
        assert message.startswith('invalid parameter "start"')
    namespaces = await api.data("label/namespace/values")
    assert {"A", "B", "AB"} <= set(namespaces)
    assert await api.data("label/namespace/values", [("limit", "1")]) == namespaces
    of_x = await api.data("label/namespace/values", [("match[]", X), *window])
    assert "A" in of_x
    assert set(of_x) <= set(namespaces)
    assert await api.data("label/namespace/values", tenant="A") == ["A"]
    assert await api.data("label/namespace/values", [("match[]", B_ONLY)], tenant="A") == []
    assert await api.data("label/pod/values", [("end", str(now - 86400 * 2))]) == []
    assert await api.error("label/1st/values") == 'invalid label name: "1st"'
    await api.error("label/pod/values", [("match[]", "{")])
    status, _ = await api.call("label/pod/values", method="POST")
    assert status == 405, "2.42 serves label values on GET only"


# --- the same requests to a real Prometheus 2.42 ---

SHAPES: list[tuple[str, str, list[tuple[str, str]]]] = [
    ("GET", "status/buildinfo", []),
    ("GET", "query_exemplars", [("query", "test"), ("start", "1"), ("end", "2")]),
    ("POST", "query_exemplars", [("query", "test")]),
    ("GET", "query_exemplars", [("query", "1+1")]),
    ("GET", "query_exemplars", [("query", "sum(")]),
    ("GET", "query_exemplars", [("query", "x"), ("start", "abc")]),
    ("GET", "query_exemplars", [("query", "x"), ("start", "2"), ("end", "1")]),
    ("GET", "rules", []),
    ("GET", "rules", [("type", "ALERT")]),
    ("GET", "rules", [("type", "x")]),
    ("POST", "rules", []),
    ("GET", "alerts", []),
    ("GET", "format_query", [("query", "sum(x) by (a)")]),
    ("POST", "format_query", [("query", "x")]),
    ("GET", "format_query", []),
    ("GET", "metadata", [("limit", "x")]),
    ("GET", "metadata", [("limit", "-1"), ("limit_per_metric", "x")]),
    ("GET", "metadata", [("metric", "nothing")]),
    ("GET", "labels", [("limit", "x"), ("match[]", "nothing")]),
    ("POST", "labels", [("match[]", "nothing"), ("start", "1"), ("end", "2")]),
    ("GET", "labels", [("match[]", "sum(")]),
    ("GET", "labels", [("end", "never")]),
    ("GET", "label/__name__/values", [("limit", "x"), ("match[]", "nothing")]),
    ("GET", "label/1a/values", []),
    ("GET", "label/a/values", [("match[]", "{")]),
    ("POST", "label/a/values", []),
    ("GET", "status/flags", []),
]


def _shape(status: int, body: Any, fixed: bool) -> tuple[Any, ...]:
    """Status, envelope keys, the type of ``data``, ``errorType``, and the keys of a
    ``data`` object when they are ``fixed`` (not metadata's metric names)."""
    if body is None:
        return (status, None)
    data = body.get("data")
    inner = sorted(data) if fixed and isinstance(data, dict) else None
    return (status, sorted(body), type(data).__name__, body.get("errorType"), inner)


async def test_same_shapes_and_formats_as_a_real_prometheus(api: Api, tmp_path: Path) -> None:
    with real_prometheus(tmp_path, {"global": {"scrape_interval": "1h"}}) as prometheus:

        async def theirs(method: str, path: str, params: list[tuple[str, str]]) -> tuple[int, Any]:
            url = f"{prometheus}/api/v1/{path}"
            query, form = (params, None) if method == "GET" else (None, params)
            async with api.http.request(method, url, params=query, data=form) as resp:
                body = await resp.read()
                if not body or resp.content_type != "application/json":
                    return resp.status, None
                return resp.status, await resp.json()

        for method, path, params in SHAPES:
            fixed = path != "metadata"
            mine = _shape(*await api.call(path, params, method=method), fixed)
            other = _shape(*await theirs(method, path, params), fixed)
            if path == "status/flags":  # Prometheus has it; ours must not (Grafana: Thanos)
                assert mine[0] == 404
                assert other[0] == 200
                continue
            if other[0] == 405:  # 2.42's router answers in text; ours, errors.py, in JSON
                mine, other = mine[:1], other[:1]
            if path == "status/buildinfo":  # ours has two more fields, Grafana ignores them
                assert set(mine[4]) - set(other[4]) == {
                    "hamiUsageCollectorVersion",
                    "pythonVersion",
                }
                mine = (*mine[:4], other[4])
            assert mine == other, (method, path, params)
        _, info = await theirs("GET", "status/buildinfo", [])
        assert info["data"]["version"].startswith("2.42.0"), info
        for query, formatted in FORMATTED.items():
            _, body = await theirs("POST", "format_query", [("query", query)])
            assert body["data"] == formatted, query
        for query, (prometheus_text, ours) in DIFFERS.items():
            _, body = await theirs("POST", "format_query", [("query", query)])
            assert body["data"] == prometheus_text, query
            assert await api.data("format_query", [("query", query)]) == ours
