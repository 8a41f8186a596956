"""``GET /api/v1/usage`` and the chargeback recording rules give the same numbers on the demo."""

from __future__ import annotations

import asyncio
import csv
import io
import math
import time
from asyncio.subprocess import PIPE, STDOUT
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from helpers import eventually, prometheus_tool, real_prometheus, running_collector

from simulator.agents import SimulatedDirectory
from simulator.cluster import build_cluster
from simulator.monitors import MonitorFarm
from simulator.run import write_targets

RULES = Path(__file__).resolve().parents[2] / "rules" / "hami-usage.rules.yaml"
GROUP = "hami-usage-chargeback"
LEVEL_OF = {"namespace": "namespace", "pod": "namespace_pod", "node": "node"}
LABELS_OF = {"namespace": ("namespace",), "pod": ("namespace", "pod"), "node": ("node",)}
FIELD_OF = {
    "hami_vgpu_memory_allocated_bytes:sum": "memory_allocated_byte_hours",
    "hami_vgpu_memory_used_bytes:sum": "memory_used_byte_hours",
    "hami_vgpu_core_allocated_ratio:sum": "cores_allocated_core_hours",
    "hami_vgpu_core_used_ratio:sum": "cores_used_core_hours",
    "hami_vgpu_core_idle_allocated_ratio:sum": "idle_core_hours",
}
"""Recorded name (after ``level:``) -> the report's field (idle: idle share x allocated)."""

Collector = tuple[str, float]


def rules() -> list[dict[str, str]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    (group,) = [g for g in groups if g["name"] == GROUP]
    assert groups[-1] is group, "the chargeback group is the file's last"
    recorded: list[dict[str, str]] = group["rules"]
    return recorded


def measured(group: dict[str, Any], field: str) -> float:
    """The report's figure as a rule records it: a measure no series of the group had (null
    in the report) is a sum over nothing, which records no series (0 here)."""
    if field == "idle_core_hours":
        share = group["idle_share"]
        return 0.0 if share is None else share * group["cores_allocated_core_hours"]
    value: float | None = group[field]
    return 0.0 if value is None else value


def close(a: float, b: float, rel: float) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-9)


@pytest.fixture
async def collector(tmp_path: Path, still: None) -> AsyncIterator[Collector]:
    """The demo's monitors and pods, scraped every 0.5 s, holding their first readings: the
    report and Prometheus' recording rules sample them at other times, and must agree."""
    nodes = build_cluster(
        3, seed=3, cards=2, allocations_per_node=5, flavours=("hami", "volcano", "kai")
    )
    async with MonitorFarm(nodes) as farm:
        targets = tmp_path / "targets.json"
        write_targets(targets, farm)
        async with running_collector(
            pods=SimulatedDirectory(nodes),
            kubernetes=False,
            targets_file=targets,
            interval=0.5,
            timeout=0.45,
        ) as (base, _):
            yield base, 0.5


async def _get(http: aiohttp.ClientSession, url: str, **params: str) -> Any:
    async with http.get(url, params=params) as resp:
        assert resp.status == 200, await resp.text()
        return await resp.json()


async def _history_steps(http: aiohttp.ClientSession, base: str, seconds: float) -> bool:
    """Whether the history holds ``seconds`` of allocations and usage of every node."""
    query = f"min(count_over_time(hami_vgpu_memory_allocated_bytes[{seconds}s]))"
    answer = await _get(http, f"{base}/prometheus/api/v1/query", query=query)
    result = answer["data"]["result"]
    return bool(result) and float(result[0]["value"][1]) >= seconds / 0.5 - 1


async def test_promtool_accepts_the_rules() -> None:
    promtool = await asyncio.create_subprocess_exec(
        prometheus_tool("promtool"), "check", "rules", str(RULES), stdout=PIPE, stderr=STDOUT
    )
    output, _ = await asyncio.wait_for(promtool.communicate(), 60)
    assert promtool.returncode == 0, output.decode()
    assert f"{len(rules())} rules found" in output.decode() or "SUCCESS" in output.decode()


async def test_the_report_and_the_rules_agree_in_our_engine(collector: Collector) -> None:
    """Each rule's expression, summed over the report's steps, gives the report's number."""
    base, _ = collector
    async with aiohttp.ClientSession() as http:
        await eventually(lambda: _history_steps(http, base, 7), 30, "7 s of history")
        end = time.time() - 1  # a past window: no point still to come falls in it
        for by, level in LEVEL_OF.items():
            report = await _get(
                http, f"{base}/api/v1/usage", by=by, start=str(end - 5), end=str(end)
            )
            step = report["step_seconds"]
            assert report["end"] <= end
            assert report["end"] - report["start"] >= 4
            groups = {tuple(g["labels"][n] for n in LABELS_OF[by]): g for g in report["groups"]}
            assert groups
            for rule in (r for r in rules() if r["record"].startswith(level + ":")):
                answer = await _get(
                    http,
                    f"{base}/prometheus/api/v1/query_range",
                    query=rule["expr"],
                    start=str(report["start"] + step),
                    end=str(report["end"]),
                    step=str(step),
                )
                from_rule = {
                    tuple(s["metric"].get(n, "") for n in LABELS_OF[by]): sum(
                        float(v) for _, v in s["values"]
                    )
                    * step
                    / 3600
                    for s in answer["data"]["result"]
                }
                field = FIELD_OF[rule["record"].split(":", 1)[1]]
                for key, group in groups.items():
                    assert close(from_rule.get(key, 0.0), measured(group, field), 1e-9), (
                        rule["record"],
                        key,
                    )
        assert any(g["memory_allocated_byte_hours"] > 0 for g in groups.values())


async def test_prometheus_running_the_rules_agrees_with_the_report(
    collector: Collector, tmp_path: Path
) -> None:
    """A real Prometheus scrapes the collector and evaluates the rule file (each second)."""
    base, _ = collector
    document = yaml.safe_load(RULES.read_text())
    for group in document["groups"]:
        group["interval"] = "1s"  # the file's own minute is too slow for a test
    rule_file = tmp_path / "rules.yaml"
    rule_file.write_text(yaml.safe_dump(document))
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "900ms", "evaluation_interval": "1s"},
        "rule_files": [str(rule_file)],
        "scrape_configs": [
            {
                "job_name": "hami-usage",
                "static_configs": [{"targets": [base.removeprefix("http://")]}],
            }
        ],
    }
    window = 12
    with real_prometheus(tmp_path, config) as prometheus:
        async with aiohttp.ClientSession() as http:

            async def recorded() -> bool:
                query = (
                    f"min(count_over_time(node:hami_vgpu_memory_allocated_bytes:sum[{window}s]))"
                )
                answer = await _get(http, f"{prometheus}/api/v1/query", query=query)
                result = answer["data"]["result"]
                return bool(result) and float(result[0]["value"][1]) >= window - 1

            await eventually(recorded, 60, f"{window} s of recorded rules in Prometheus")
            at = time.time() - 1
            for by, level in LEVEL_OF.items():
                report = await _get(
                    http, f"{base}/api/v1/usage", by=by, start=str(at - window), end=str(at)
                )
                hours = (report["end"] - report["start"]) / 3600
                for recorded_name, field in FIELD_OF.items():
                    answer = await _get(
                        http,
                        f"{prometheus}/api/v1/query",
                        query=f"avg_over_time({level}:{recorded_name}[{window}s])",
                        time=str(at),
                    )
                    prometheus_mean = {
                        tuple(s["metric"].get(n, "") for n in LABELS_OF[by]): float(s["value"][1])
                        for s in answer["data"]["result"]
                    }
                    # the readings hold still, so the two samplings (ours each 0.5 s,
                    # Prometheus' each second) see the same values
                    rel = 1e-6
                    for group in report["groups"]:
                        key = tuple(group["labels"][n] for n in LABELS_OF[by])
                        ours = measured(group, field) / hours
                        # A sum over nothing (no vGPU of the group has that series) records no series.
                        theirs = prometheus_mean.get(key, 0.0)
                        assert close(theirs, ours, rel), (by, recorded_name, key, theirs, ours)


async def test_csv_and_bad_parameters(collector: Collector) -> None:
    base, _ = collector
    async with aiohttp.ClientSession() as http:
        await eventually(lambda: _history_steps(http, base, 2), 30, "2 s of history")
        report = await _get(http, f"{base}/api/v1/usage", by="pod")
        async with http.get(f"{base}/api/v1/usage", params={"by": "pod", "format": "csv"}) as resp:
            assert resp.status == 200
            assert resp.content_type == "text/csv"
            rows = list(csv.DictReader(io.StringIO(await resp.text())))
        assert {(r["namespace"], r["pod"]) for r in rows} >= {
            (g["labels"]["namespace"], g["labels"]["pod"]) for g in report["groups"][:3]
        }
        # unknown (no vGPU of the pod had a memory allocation) is an empty cell, never 0
        assert all(
            r["memory_allocated_byte_hours"] == "" or float(r["memory_allocated_byte_hours"]) >= 0
            for r in rows
        )
        assert (
            report["requested_end"] >= report["end"] > report["start"] >= report["requested_start"]
        )
        for params, named in (
            ({"by": "team"}, "'by'"),
            ({"format": "xml"}, "'format'"),
            ({"start": "yesterday"}, "'start'"),
            ({"end": "1e400"}, "'end'"),
            ({"start": "200", "end": "100"}, "'start'"),
            ({"window": "1h"}, "'window'"),
        ):
            async with http.get(f"{base}/api/v1/usage", params=params) as resp:
                assert resp.status == 400, params
                body = await resp.json()
                assert body["error"] == "bad_request", body
                assert named in body["message"], body
        async with http.get(f"{base}/api/v1/usage?by=pod&by=node") as resp:
            assert resp.status == 400
        async with http.get(f"{base}/api/v1/openapi.json") as resp:
            usage = (await resp.json())["paths"]["/api/v1/usage"]["get"]
        assert set(usage["responses"]["200"]["content"]) == {"application/json", "text/csv"}
        assert {p["name"] for p in usage["parameters"]} == {"by", "start", "end", "format"}


async def test_a_report_over_the_sample_limit_answers_422(tmp_path: Path) -> None:
    nodes = build_cluster(1, seed=4, cards=1, allocations_per_node=2, flavours=("hami",))
    async with MonitorFarm(nodes) as farm:
        targets = tmp_path / "targets.json"
        write_targets(targets, farm)
        async with (
            running_collector(
                pods=SimulatedDirectory(nodes),
                kubernetes=False,
                targets_file=targets,
                interval=0.5,
                timeout=0.45,
                query_max_samples=1,
            ) as (base, _),
            aiohttp.ClientSession() as http,
        ):

            async def refused() -> bool:
                async with http.get(f"{base}/api/v1/usage") as resp:
                    return resp.status == 422 and (await resp.json())["error"] == "too_many_samples"

            await eventually(refused, 30, "the report refused past --query-max-samples")
