"""Autoscaling on GPU usage: prometheus-adapter and KEDA, as they speak to ``/prometheus``.

The demo (simulated nodes, pushed and scraped) is asked exactly what each
client sends (docs/autoscaling.md), with the queries of the chart's rendered
adapter rules (``autoscaling.adapterRules``) and of the README's KEDA
ScaledObject, so the chart, the README and these requests are one source:

- prometheus-adapter (``pkg/custom-provider``, ``pkg/client``) lists series
  with GET ``/api/v1/series`` (``match[]`` = the rule's ``seriesQuery``,
  ``start`` = now - metrics-max-age as Prometheus model time, no ``end``), then
  for a list of pods GET ``/api/v1/query`` with ``query`` = the rule's
  ``metricsQuery`` expanded (``<<.LabelMatchers>>`` ->
  ``namespace="ns",pod=~"a|b"``, ``<<.GroupBy>>`` -> ``pod``) and ``time``
  (model time); it wants a vector, one sample per pod carrying ``pod``.
- KEDA's Prometheus scaler GETs ``/api/v1/query?query=...&time=<RFC 3339>``
  and refuses an answer of more than one element.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from helpers import eventually, running_demo
from test_chart import CHART, template

Doc = dict[str, Any]

METRICS_MAX_AGE = 600.0
"""prometheus-adapter's default --metrics-relist-interval (and so --metrics-max-age), 10m."""


def adapter_rules() -> dict[str, Doc]:
    """The rendered ConfigMap's rules (its config.yaml), by the custom metric's name."""
    docs = template("--set", "autoscaling.adapterRules.enabled=true")
    (config_map,) = [
        d
        for d in docs
        if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-adapter-rules")
    ]
    rules: list[Doc] = yaml.safe_load(config_map["data"]["config.yaml"])["rules"]
    return {rule["name"]["as"]: rule for rule in rules}


def keda_example() -> Doc:
    """The ScaledObject of the chart README's "Autoscaling on GPU usage" section."""
    readme = (CHART / "README.md").read_text()
    section = readme.partition("## Autoscaling on GPU usage")[2].partition("\n## ")[0]
    for block in re.findall(r"```yaml\n(.*?)```", section, re.S):
        for doc in yaml.safe_load_all(block):
            if doc and doc.get("kind") == "ScaledObject":
                found: Doc = doc
                return found
    raise AssertionError("no ScaledObject in the README's autoscaling section")


def model_time(seconds: float) -> str:
    """Prometheus' ``model.Time.String()``: seconds with (at most) millisecond digits."""
    millis = int(seconds * 1000)
    return f"{millis // 1000}.{millis % 1000:03d}".rstrip("0").rstrip(".")


def expand(template_text: str, series: str, namespace: str, pods: list[str]) -> str:
    """The adapter's ``metricsQuery`` for ``pods`` of ``namespace`` (naming.metricsQuery.Build)."""
    pod_matcher = f'pod="{pods[0]}"' if len(pods) == 1 else f'pod=~"{"|".join(pods)}"'
    args = {
        "<<.Series>>": series,
        "<<.LabelMatchers>>": f'namespace="{namespace}",{pod_matcher}',
        "<<.GroupBy>>": "pod",
    }
    out = template_text
    for placeholder, value in args.items():
        out = out.replace(placeholder, value)
    assert "<<" not in out, out
    return out


def deployment_like(rows: list[Doc]) -> tuple[str, str, list[str]]:
    """A (namespace, deployment, pods) of the demo whose pods share ``<deployment>-``:
    the namespace with the most pods of one name prefix, two pods at least."""
    groups: dict[tuple[str, str], set[str]] = {}
    unallocated = {(r["namespace"], r["pod"]) for r in rows if not r["cores_allocated"]}
    for row in rows:
        prefix = row["pod"].split("-", 1)[0]
        if "-" in row["pod"] and (row["namespace"], row["pod"]) not in unallocated:
            groups.setdefault((row["namespace"], prefix), set()).add(row["pod"])
    (namespace, deployment), pods = max(groups.items(), key=lambda kv: (len(kv[1]), kv[0]))
    assert len(pods) >= 2, groups
    return namespace, deployment, sorted(pods)


@pytest.fixture(scope="module")
def rules() -> dict[str, Doc]:
    return adapter_rules()


@pytest.fixture
async def demo(tmp_path: Path) -> AsyncIterator[tuple[str, aiohttp.ClientSession, list[Doc]]]:
    """The demo served on loopback, once its pods have memory and core allocations."""
    async with running_demo(tmp_path, 2, 1.0) as (served, _):
        base = served
        async with aiohttp.ClientSession() as http:
            rows: list[Doc] = []

            async def pods_shown() -> bool:
                nonlocal rows
                async with http.get(f"{base}/api/v1/pods") as response:
                    rows = (await response.json())["containers"]
                ready = [r for r in rows if r["cores_allocated"] and r["memory_used_bytes"]]
                return len({(r["namespace"], r["pod"]) for r in ready}) >= 10

            await eventually(pods_shown, 60, "the demo's pods with usage and allocation")

            async def history_of_two_seconds() -> bool:
                # KEDA's time is now cut to the second: the data must be older than that.
                at = model_time(time.time() - 2)
                params = {"query": "hami_vgpu_core_allocated_ratio", "time": at}
                async with http.get(f"{base}/prometheus/api/v1/query", params=params) as r:
                    return bool((await r.json())["data"]["result"])

            await eventually(history_of_two_seconds, 60, "two seconds of the demo's history")
            yield base, http, rows


async def get(http: aiohttp.ClientSession, url: str, params: list[tuple[str, str]]) -> Any:
    """GET with the query string as given, order and repeats kept; the ``data`` of a success."""
    async with http.get(url, params=params) as response:
        body = await response.json()
        assert response.status == 200, body
    assert body["status"] == "success", body
    return body["data"]


async def raw(http: aiohttp.ClientSession, base: str, query: str, at: str) -> dict[str, float]:
    """``query`` at ``at``, its samples' values by pod, summed."""
    data = await get(http, f"{base}/prometheus/api/v1/query", [("query", query), ("time", at)])
    out: dict[str, float] = {}
    for sample in data["result"]:
        pod = sample["metric"]["pod"]
        out[pod] = out.get(pod, 0.0) + float(sample["value"][1])
    return out


def test_rules_are_the_two_custom_metrics_per_pod(rules: dict[str, Doc]) -> None:
    assert set(rules) == {"gpu_memory_used_bytes", "gpu_utilization_of_allocation"}
    for rule in rules.values():
        assert rule["resources"] == {
            "overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}
        }
        assert "<<.Series>>{<<.LabelMatchers>>}" in rule["metricsQuery"]
        assert "by (<<.GroupBy>>)" in rule["metricsQuery"]
        series = rule["seriesQuery"].partition("{")[0]
        assert re.fullmatch(rule["name"]["matches"], series)
    assert rules["gpu_memory_used_bytes"]["seriesQuery"].startswith("hami_vgpu_memory_used_bytes{")
    assert (
        "hami_vgpu_core_allocated_ratio{<<.LabelMatchers>>}"
        in (rules["gpu_utilization_of_allocation"]["metricsQuery"])
    )


def test_adapter_rules_are_off_by_default() -> None:
    names = [d["metadata"]["name"] for d in template() if d["kind"] == "ConfigMap"]
    assert not [n for n in names if n.endswith("-adapter-rules")]


async def test_prometheus_adapter_discovers_series_and_gets_one_value_per_pod(
    demo: tuple[str, aiohttp.ClientSession, list[Doc]], rules: dict[str, Doc]
) -> None:
    base, http, rows = demo
    namespace, _, pods = deployment_like(rows)
    for name, rule in rules.items():
        # The relist: GET /api/v1/series?start=<now - max age>&match[]=<seriesQuery>.
        start = model_time(time.time() - METRICS_MAX_AGE)
        found = await get(
            http,
            f"{base}/prometheus/api/v1/series",
            [("start", start), ("match[]", rule["seriesQuery"])],
        )
        names = {s["__name__"] for s in found}
        assert len(names) == 1, (name, names)
        (series,) = names
        assert re.fullmatch(rule["name"]["matches"], series)
        assert all(s.get("namespace") and s.get("pod") for s in found), name
        assert {s["pod"] for s in found if s["namespace"] == namespace} >= set(pods), name

        # The values: GET /api/v1/query?query=<metricsQuery for the pods>&time=<now>.
        query = expand(rule["metricsQuery"], series, namespace, pods)
        for _ in range(3):  # a scrape landing between two reads changes the instant's data
            at = model_time(time.time())
            data = await get(
                http, f"{base}/prometheus/api/v1/query", [("query", query), ("time", at)]
            )
            assert data["resultType"] == "vector", data
            got = {s["metric"]["pod"]: float(s["value"][1]) for s in data["result"]}
            assert len(got) == len(data["result"]), (name, data)
            assert set(got) == set(pods), (name, data)
            assert all(s["metric"] == {"pod": s["metric"]["pod"]} for s in data["result"])
            selector = f'{{namespace="{namespace}",pod=~"{"|".join(pods)}"}}'
            used = await raw(http, base, f"{series}{selector}", at)
            if name == "gpu_memory_used_bytes":
                want = used
            else:
                cores = await raw(http, base, f"hami_vgpu_core_allocated_ratio{selector}", at)
                want = {pod: used[pod] / (100 * cores[pod]) for pod in pods}
            if all(math.isclose(got[p], want[p], rel_tol=1e-9) for p in pods):
                break
        else:
            raise AssertionError((name, got, want))


async def test_keda_prometheus_scaler_gets_exactly_one_sample(
    demo: tuple[str, aiohttp.ClientSession, list[Doc]],
) -> None:
    base, http, rows = demo
    namespace, deployment, pods = deployment_like(rows)
    trigger = keda_example()["spec"]["triggers"][0]
    assert trigger["type"] == "prometheus"
    metadata = trigger["metadata"]
    assert metadata["authModes"] == "bearer"
    assert metadata["serverAddress"].endswith(":9396/prometheus")
    # The README's query is for its deployment: aim it at the demo's.
    query, count = re.subn(
        r'\{namespace="[^"]*",pod=~"[^"]*-\.\*"\}',
        f'{{namespace="{namespace}",pod=~"{deployment}-.*"}}',
        metadata["query"],
    )
    assert count == 1, metadata["query"]

    for _ in range(3):  # a scrape landing between two reads changes the instant's data
        # ExecutePromQuery: GET <serverAddress>/api/v1/query?query=...&time=<RFC 3339, UTC>.
        at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        data = await get(http, f"{base}/prometheus/api/v1/query", [("query", query), ("time", at)])
        assert data["resultType"] == "vector", data
        assert len(data["result"]) == 1, (
            query,
            at,
            data,
        )  # KEDA: "returned multiple elements" otherwise
        value = data["result"][0]["value"]
        assert len(value) == 2, value
        assert isinstance(value[1], str), value
        level = float(value[1])
        assert math.isfinite(level), value
        assert level >= 0, value
        # It is the sum of the deployment's vGPUs' utilisation at that instant.
        selector = f'{{namespace="{namespace}",pod=~"{deployment}-.*"}}'
        per_pod = await raw(http, base, f"hami_container_device_utilization_ratio{selector}", at)
        assert set(per_pod) == set(pods), (per_pod, pods)
        if math.isclose(level, sum(per_pod.values()), rel_tol=1e-9, abs_tol=1e-9):
            break
    else:
        raise AssertionError((level, per_pod))


async def test_prometheus_adapter_empty_timeout_is_ignored(
    demo: tuple[str, aiohttp.ClientSession, list[Doc]], rules: dict[str, Doc]
) -> None:
    """pkg/client: ``timeout`` = model.Duration(time.Since(deadline)), negative: "" on the wire."""
    base, http, rows = demo
    namespace, _, pods = deployment_like(rows)
    rule = rules["gpu_memory_used_bytes"]
    query = expand(rule["metricsQuery"], "hami_vgpu_memory_used_bytes", namespace, pods)
    params = [("query", query), ("time", model_time(time.time())), ("timeout", "")]
    data = await get(http, f"{base}/prometheus/api/v1/query", params)
    assert len(data["result"]) == len(pods)
