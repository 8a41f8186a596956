"""The Prometheus-compatible API: Grafana's calls, promtool as a real client, a real Prometheus as the golden peer."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from asyncio.subprocess import PIPE, STDOUT
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from helpers import (
    eventually,
    holds,
    prometheus_tool,
    real_prometheus,
    running_collector,
    scraping_collector,
)

from collector.app import ENGINE, PRIMED, STORE
from collector.memory import malloc
from collector.promql.query import Prepared
from core.payload import Card, ContainerUsage, Payload
from simulator.agents import SimulatedDirectory
from simulator.cluster import build_cluster
from simulator.monitors import MonitorFarm

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "dashboards" / "hami-usage.json"
FROZEN = 1_900_000_000.0


@dataclass
class Api:
    base: str
    http: aiohttp.ClientSession
    app: web.Application

    async def get(self, path: str, **params: Any) -> tuple[int, dict[str, Any]]:
        async with self.http.get(f"{self.base}/prometheus/api/v1/{path}", params=params) as resp:
            return resp.status, await resp.json()

    async def post(self, path: str, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        async with self.http.post(f"{self.base}/prometheus/api/v1/{path}", data=form) as resp:
            return resp.status, await resp.json()


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    """The collector scraping a frozen simulated cluster of every flavour, with its pods' allocations."""
    nodes = build_cluster(4, seed=31, flavours=("hami", "hami-legacy", "volcano", "kai"))
    async with (
        MonitorFarm(nodes, clock=lambda: FROZEN) as farm,
        scraping_collector(
            farm,
            tmp_path,
            pods=SimulatedDirectory(nodes),
            interval=0.5,
            timeout=0.4,
            push_auth="none",
        ) as (base, app),
        aiohttp.ClientSession() as http,
    ):
        client = Api(base, http, app)

        async def scraped() -> bool:
            _, answer = await client.get(
                "query", query="count(count by (node) (hami_host_gpu_utilization_ratio))"
            )
            return bool(
                answer["data"]["result"] != [] and answer["data"]["result"][0]["value"][1] == "4"
            )

        async def idle_known() -> bool:
            # The pod watch's idle times follow the monitors' kernel times a refresh later.
            _, answer = await client.get("query", query="count(hami_container_idle_seconds > 300)")
            return bool(answer["data"]["result"])

        await eventually(scraped, 15, "every node in the history")
        await eventually(idle_known, 15, "idle allocations in the history")
        # the pages' first reports, made once ready, are engine work the tests would count
        await eventually(lambda: holds(app[PRIMED].is_set()), what="the first readers' pages")
        yield client


async def test_grafana_save_and_test(api: Api) -> None:
    status, answer = await api.get("query", query="1+1", time="4")
    assert (status, answer) == (
        200,
        {"status": "success", "data": {"resultType": "scalar", "result": [4.0, "2"]}},
    )
    status, answer = await api.post("query", {"query": "1+1", "time": "4"})
    assert answer["data"]["result"] == [4.0, "2"]
    status, info = await api.get("status/buildinfo")
    assert status == 200
    assert {
        "version",
        "revision",
        "branch",
        "buildUser",
        "buildDate",
        "goVersion",
    } <= set(info["data"])


async def test_errors_use_the_envelope_and_status_codes(api: Api) -> None:
    cases = [
        (("query",), {"query": "sum(("}, 400, "bad_data"),
        (("query",), {}, 400, "bad_data"),
        (("query",), {"query": "histogram_count(x)"}, 422, "execution"),  # native histograms
        (("query",), {"query": "holt_winters(x[5m], 2, 0.5)", "time": "1"}, 200, None),
        (
            ("query_range",),
            {"query": "up", "start": "10", "end": "5", "step": "1"},
            400,
            "bad_data",
        ),
        (
            ("query_range",),
            {"query": "up", "start": "0", "end": "100000", "step": "1"},
            400,
            "bad_data",
        ),
        (
            ("query_range",),
            {"query": "up", "start": "0", "end": "10", "step": "soon"},
            400,
            "bad_data",
        ),
        (("query",), {"query": "up", "time": "yesterday"}, 400, "bad_data"),
        (("series",), {}, 400, "bad_data"),
        (("series",), {"match[]": "sum(x)"}, 400, "bad_data"),
    ]
    for (path,), params, status, kind in cases:
        got, answer = await api.get(path, **params)
        if kind is None:  # holt_winters checks its factors only where there are points
            assert (got, answer["status"]) == (status, "success")
            continue
        assert (got, answer["status"], answer["errorType"]) == (status, "error", kind), (
            path,
            params,
        )
        assert answer["error"]
    got, answer = await api.get("query", query="histogram_count(x)")
    assert answer["error"] == "unsupported: native histogram function histogram_count", (
        "features are named"
    )


async def test_query_range_and_duration_steps(api: Api) -> None:
    now = time.time()
    status, answer = await api.get(
        "query_range",
        query="count(hami_host_gpu_utilization_ratio)",
        start=str(now - 4),
        end=str(now),
        step="1s",
    )
    assert status == 200
    (series,) = answer["data"]["result"]
    assert series["metric"] == {}
    assert {v for _, v in series["values"]} == {"32"}
    form = {
        "query": "sum by (node) (hami_vgpu_memory_limit_bytes)",
        "start": str(now - 2),
        "end": str(now),
        "step": "1",
    }
    status, posted = await api.post("query_range", form)
    assert status == 200
    assert {tuple(s["metric"].items()) for s in posted["data"]["result"]} == {
        (("node", f"gpu-node-00{i}"),) for i in range(1, 5)
    }


async def test_metadata_series_labels_and_values(api: Api) -> None:
    _, meta = await api.get("metadata")
    assert meta["data"]["hami_vgpu_memory_used_bytes"] == [
        {"type": "gauge", "help": "vGPU device memory usage in bytes", "unit": ""}
    ]
    assert "hami_build_info" in meta["data"]
    _, one = await api.get("metadata", metric="hami_host_gpu_utilization_ratio")
    assert list(one["data"]) == ["hami_host_gpu_utilization_ratio"]
    _, labels = await api.get("labels")
    assert {"__name__", "node", "device_uuid", "namespace", "pod", "container", "zone"} <= set(
        labels["data"]
    )
    _, names = await api.get("label/__name__/values")
    assert "HostCoreUtilization" not in names["data"]
    assert "hami_container_device_utilization_ratio" in names["data"]
    _, nodes = await api.get(
        "label/node/values", **{"match[]": "hami_host_gpu_memory_controller_utilization_ratio"}
    )
    assert nodes["data"] == ["gpu-node-001"], "only the HAMi v2.10 node has that family"
    _, series = await api.get(
        "series",
        **{"match[]": 'hami_host_gpu_utilization_ratio{node="gpu-node-003"}', "limit": "3"},
    )
    assert len(series["data"]) == 3
    assert all(
        s["node"] == "gpu-node-003" and s["__name__"] == "hami_host_gpu_utilization_ratio"
        for s in series["data"]
    )


def _expand(expr: str) -> str:
    for variable, value in (
        ("$node", ".*"),
        ("$namespace", ".*"),
        ("$__range", "1m"),
        ("$__rate_interval", "1m"),
    ):
        expr = expr.replace(variable, value)
    return expr


HEALTH_NODE = "gpu-agent-health"
AGENT_ATTRIBUTED = ("hami_container_energy_joules_total",)
"""Series that need the agent's processes attributed to pods with container IDs, which
the simulated directory's pods lack: their panels must answer, but may be empty here."""


async def _push_health(api: Api) -> None:
    """Two snapshots of an agent's card health (the Health row), a rise between them."""
    for sequence, count in enumerate((1, 2)):
        card = Card(
            index=0,
            uuid="GPU-health-0",
            name="NVIDIA H200",
            memory_used=8 << 30,
            memory_total=80 << 30,
            energy=1000.0 * count,
            idle_energy=100.0 * count,
            ecc_corrected=count,
            ecc_uncorrected=0,
            clock_events=0x20,  # sw_thermal_slowdown
            xid_errors={79: count},
        )
        host = ContainerUsage(device="GPU-health-0", processes=1, memory_used=2 << 30)
        payload = Payload(
            node=HEALTH_NODE,
            agent="health",
            sequence=sequence,
            time=time.time(),
            nvml=True,
            cards=[card],
            processes=[host],
        )
        body = payload.model_dump_json().encode()
        headers = {"Content-Type": "application/json"}
        async with api.http.post(f"{api.base}/api/v1/push", data=body, headers=headers) as resp:
            assert resp.status == 204, await resp.text()

        async def recorded(count: int = count) -> bool:
            _, answer = await api.get(
                "query", query=f'hami_host_gpu_xid_errors_total{{node="{HEALTH_NODE}"}} == {count}'
            )
            return bool(answer["data"]["result"])

        await eventually(recorded, 15, f"the health snapshot {sequence} in the history")


async def test_every_dashboard_query_returns_data(api: Api) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    variables = [v for v in dashboard["templating"]["list"] if v["type"] == "query"]
    assert {v["name"] for v in variables} == {"node", "namespace"}
    for variable in variables:
        match = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["query"]["query"])
        assert match, variable
        selector, label = match.groups()
        status, answer = await api.get(f"label/{label}/values", **{"match[]": _expand(selector)})
        assert status == 200
        assert answer["data"], f"variable {variable['name']} has values"
    queries = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert len(queries) >= 15
    await _push_health(api)
    now = time.time()
    for expr in queries:
        status, answer = await api.get("query", query=_expand(expr))
        assert status == 200, (expr, answer)
        present = not any(name in expr for name in AGENT_ATTRIBUTED)
        assert answer["data"]["result"] or not present, f"no data for {expr}"
        status, answer = await api.post(
            "query_range",
            {"query": _expand(expr), "start": str(now - 10), "end": str(now), "step": "2"},
        )
        assert status == 200, (expr, answer)
        assert answer["data"]["result"] or not present, f"no range data for {expr}"


async def promtool(*args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        prometheus_tool("promtool"), "query", *args, stdout=PIPE, stderr=STDOUT
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, out.decode()
    return out.decode()


async def test_promtool_is_a_client(api: Api) -> None:
    url = f"{api.base}/prometheus"
    instant = await promtool("instant", url, "sum by (node) (hami_vgpu_memory_used_bytes)")
    assert len(re.findall(r'\{node="gpu-node-00\d"\} => \d+', instant)) == 4
    now = int(time.time()) + 1  # whole seconds: never before the first point
    ranged = await promtool(
        "range",
        f"--start={now - 4}",
        f"--end={now}",
        "--step=1s",
        url,
        "count(hami_vgpu_memory_limit_bytes)",
    )
    assert re.search(r"\d+ @\[\d+", ranged), ranged
    series = await promtool(
        "series", '--match=hami_host_gpu_utilization_ratio{node="gpu-node-002"}', url
    )
    assert series.count('node="gpu-node-002"') == 8
    labels = await promtool("labels", url, "node")
    assert labels.split() == ["gpu-node-001", "gpu-node-002", "gpu-node-003", "gpu-node-004"]


GOLDEN = [
    "hami_vgpu_memory_used_bytes",
    "sum by (node) (hami_vgpu_memory_used_bytes)",
    "100 * hami_vgpu_memory_used_bytes / hami_vgpu_memory_limit_bytes",
    "topk(10, hami_vgpu_memory_used_bytes)",
    "count(hami_host_gpu_utilization_ratio)",
    "avg by (node) (hami_host_gpu_utilization_ratio)",
    "max without (zone) (hami_container_device_utilization_ratio)",
    "hami_host_gpu_memory_used_bytes and on (device_uuid) hami_host_gpu_utilization_ratio > 10",
    'label_replace(hami_vgpu_memory_limit_bytes, "ns", "$1", "namespace", "team-(.*)")',
    "quantile(0.9, hami_container_last_kernel_elapsed_seconds)",
    'count_values("limit", hami_vgpu_memory_limit_bytes)',
    "hami_host_gpu_utilization_ratio > bool 50",
]


def _comparable(result: list[dict[str, Any]]) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(
            sorted((k, v) for k, v in r["metric"].items() if k not in ("instance", "job"))
        ): float(r["value"][1])
        for r in result
    }


async def test_same_answers_as_a_real_prometheus_that_scraped_us(api: Api, tmp_path: Path) -> None:
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "900ms"},
        "scrape_configs": [
            {
                "job_name": "hami",
                "static_configs": [{"targets": [api.base.removeprefix("http://")]}],
            }
        ],
    }
    with real_prometheus(tmp_path, config) as prometheus:
        real_base = f"{prometheus}/api/v1"

        async def scraped_twice() -> bool:
            try:
                async with api.http.get(
                    f"{real_base}/query", params={"query": 'count_over_time(up{job="hami"}[1m])'}
                ) as resp:
                    result = (await resp.json())["data"]["result"]
            except aiohttp.ClientError:
                return False
            return bool(result) and float(result[0]["value"][1]) >= 2

        await eventually(scraped_twice, 40, "Prometheus to scrape the collector twice")
        at = str(time.time())
        for query in GOLDEN:
            async with api.http.get(
                f"{real_base}/query", params={"query": query, "time": at}
            ) as resp:
                theirs = (await resp.json())["data"]["result"]
            _, ours = await api.get("query", query=query, time=at)
            assert _comparable(ours["data"]["result"]) == pytest.approx(
                _comparable(theirs), rel=1e-9
            ), query
            assert theirs, f"the golden query {query} must return data"


async def test_an_instant_range_selector_is_a_matrix_even_when_empty(api: Api) -> None:
    _, answer = await api.get("query", query="nothing_matches[5m]")
    assert answer["data"] == {"resultType": "matrix", "result": []}
    later = str(time.time() + 5)  # whole-second steps after the first scrape
    _, answer = await api.get("query", query="hami_host_gpu_utilization_ratio[10s:1s]", time=later)
    assert answer["data"]["resultType"] == "matrix"
    assert answer["data"]["result"]


# --- limits, and evaluation off the event loop ---

NODES, SERIES, POINTS = 100, 20, 121


def fill(history: Any, end: float) -> None:
    """An hour at 30 s of NODES nodes with SERIES series each; series j of node i is i + j."""
    keys = [f'synthetic{{pod="p{j}"}}'.encode() for j in range(SERIES)]
    for k in range(POINTS):
        t = end - (POINTS - 1 - k) * 30
        for i in range(NODES):
            history.record(f"n{i:03}", {key: float(i + j) for j, key in enumerate(keys)}, t)


@pytest.fixture
async def synthetic() -> AsyncIterator[tuple[Api, Any, float]]:
    """A collector with no sources, its history filled directly; one query at a time."""
    async with (
        running_collector(kubernetes=False, history_retention=86400.0, query_max_concurrency=1) as (
            base,
            app,
        ),
        aiohttp.ClientSession() as http,
    ):
        end = float(int(time.time()))
        fill(app[STORE].history, end)
        yield Api(base, http, app), app[STORE].history, end


async def test_queries_are_evaluated_off_the_event_loop(
    synthetic: tuple[Api, Any, float], monkeypatch: pytest.MonkeyPatch
) -> None:
    api, history, end = synthetic
    started, release = threading.Event(), threading.Event()
    evaluate = Prepared.columns  # how a range query is evaluated

    def held(self: Prepared) -> Any:
        started.set()
        assert release.wait(60), "the test never released the query"
        return evaluate(self)

    monkeypatch.setattr(Prepared, "columns", held)
    form = {
        "query": "sum by (node) (synthetic)",
        "start": str(end - 3600),
        "end": str(end),
        "step": "60",
    }
    query = asyncio.ensure_future(api.post("query_range", form))

    async def evaluating() -> bool:
        return started.is_set()

    await eventually(evaluating, 30, "the range query to be evaluating")
    async with api.http.get(f"{api.base}/metrics") as resp:
        assert resp.status == 200, "the loop serves /metrics while the query is evaluated"
        assert "hami_usage_collector" in await resp.text()
    # The history changes meanwhile; the query evaluates what it read before.
    history.record("n999", {b'synthetic{pod="p0"}': 1.0}, end)
    # A second query waits for the one slot, and gives up within its timeout.
    status, late = await api.get("query", query="sum(synthetic)", timeout="1s")
    assert (status, late["errorType"], late["error"]) == (
        503,
        "timeout",
        "query timed out in query queue",
    )
    release.set()
    status, answer = await query
    assert status == 200
    result = answer["data"]["result"]
    assert len(result) == NODES
    for series in result:
        i = int(series["metric"]["node"][1:])
        assert {v for _, v in series["values"]} == {str(SERIES * i + SERIES * (SERIES - 1) // 2)}
        assert len(series["values"]) == 61


async def test_sample_limit_and_timeout_answer_as_prometheus(tmp_path: Path) -> None:
    async with (
        running_collector(kubernetes=False, history_retention=86400.0, query_max_samples=1000) as (
            base,
            app,
        ),
        aiohttp.ClientSession() as http,
    ):
        end = float(int(time.time()))
        fill(app[STORE].history, end)
        client = Api(base, http, app)
        status, answer = await client.get("query", query="sum(synthetic)", time=str(end))
        assert (status, answer["errorType"], answer["error"]) == (
            422,
            "execution",
            "query processing would load too many samples into memory in query execution",
        )
        status, answer = await client.get(
            "query", query='sum(synthetic{node="n001"})', time=str(end)
        )
        assert status == 200
        assert answer["data"]["result"] == [{"metric": {}, "value": [end, "210"]}]
        status, answer = await client.get("query", query="1", timeout="0s")
        assert (status, answer["errorType"]) == (503, "timeout")


async def test_the_count_of_queries_being_evaluated_comes_back_to_zero(api: Api) -> None:
    """The heap task waits while it is above zero: a query that fails, or one that answers,
    must give its count back."""
    promql = api.app[ENGINE]
    assert (await api.get("query", query="sum(("))[0] == 400
    assert (await api.get("query", query="count(up)"))[0] == 200
    assert (await api.get("query", query='label_replace(up, "a", "$1", "b", "(")'))[0] == 422
    assert promql.evaluating == 0
    assert promql.idle.is_set()


async def test_the_app_s_memory_policy_follows_its_queries(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The application's own task switches the process' memory policy while a query runs and
    back once it ended (collector/memory/malloc.py); the query path only says that it runs."""
    calls: list[str] = []
    monkeypatch.setattr(malloc, "for_queries", lambda: calls.append("queries"))
    monkeypatch.setattr(malloc, "queries_done", lambda: calls.append("done"))
    assert (await api.get("query", query="count(up)"))[0] == 200
    assert not api.app[ENGINE].busy.is_set()
    await eventually(lambda: holds(calls[-2:] == ["queries", "done"]), 5, "policy switched back")
    assert (await api.get("query", query="count(up)"))[0] == 200
    await eventually(
        lambda: holds(calls[-2:] == ["queries", "done"] and len(calls) >= 4), 5, "again"
    )
