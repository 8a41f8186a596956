"""Every panel and variable of the shipped dashboard, as Grafana would ask, against the demo.

Grafana substitutes its built-ins before a query leaves it (``$__interval``,
``$__rate_interval``, ``$__range``, ``$__range_s``) and formats a multi-value
variable for Prometheus as a regex alternation of the escaped values
(``(a|b)``), or ``.*`` for "All"; the walk does the same, with the values the
variables' own ``label_values`` queries answer, runs every target (panels in
collapsed rows included) through ``/prometheus`` as an instant and as a range
query, and fails on an error, or on an empty answer where the demo has data.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
from helpers import eventually, running_demo

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((ROOT / "dashboards").glob("*.json"))
BUILT_INS = {
    "$__rate_interval": "1m",  # 4 x the demo's 1 s scrape interval, at least Grafana's 1m floor
    "$__interval": "2s",
    "$__range_s": "60",
    "$__range": "1m",
}
QUIET = (
    "hami_host_gpu_xid_errors_total",  # an XID lands at the demo's start: increase over 1m may miss it
    "hami_host_gpu_ecc_errors_total",  # no simulated card has an ECC error (its panel shows > 0 only)
    "hami_host_gpu_unattributed_memory_bytes > ",  # thresholds the demo need not cross
    "hami_container_idle_seconds{",  # > 300 s idle: the demo's pods are seconds old
)
"""Targets whose answer may be empty on a demo that has run for seconds."""


def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in items:
        yield panel
        yield from panels(panel.get("panels", []))


REGEX_SPECIAL = set("$^*{}[]'+?.()|")


def escaped(value: str) -> str:
    """A value as Grafana's Prometheus datasource escapes it for a regex inside a PromQL
    string: a backslash before each regex metacharacter, itself escaped for the string."""
    out = []
    for ch in value:
        if ch == "\\":
            out.append("\\\\\\\\")
        elif ch in REGEX_SPECIAL:
            out.append("\\\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def alternation(values: list[str]) -> str:
    """A multi-value variable as Grafana formats it for Prometheus."""
    if len(values) == 1:
        return escaped(values[0])
    return "(" + "|".join(escaped(v) for v in values) + ")"


def expand(expr: str, chosen: dict[str, str]) -> str:
    for name, value in BUILT_INS.items():
        expr = expr.replace(name, value)
    for name, value in chosen.items():
        expr = expr.replace(f"${{{name}}}", value).replace(f"${name}", value)
    assert "$" not in expr, f"an unknown variable in {expr}"
    return expr


async def test_every_panel_of_every_dashboard_answers_on_the_demo(tmp_path: Path) -> None:
    async with running_demo(tmp_path, 3, 1.0) as (served, _):
        base = f"{served}/prometheus/api/v1"
        async with aiohttp.ClientSession() as http:

            async def get(path: str, **params: str) -> Any:
                async with http.get(f"{base}/{path}", params=params) as resp:
                    body = await resp.json()
                    assert resp.status == 200, (path, params, body)
                    return body["data"]

            async def every_node_has_history() -> bool:
                nodes = await get("label/node/values")
                energy = await get(
                    "query", query="increase(hami_container_energy_joules_total[1m]) > 0"
                )
                return "gpu-plugin-01" in nodes and len(nodes) >= 5 and bool(energy["result"])

            await eventually(every_node_has_history, 30, "every node, and energy risen")
            for dashboard in DASHBOARDS:
                await _walk(json.loads(dashboard.read_text()), get)


async def _walk(dashboard: dict[str, Any], get: Any) -> None:
    """Every target with "All" chosen (each must have data, but the :data:`QUIET`), then
    with two values of each multi-value variable (each must answer, maybe empty)."""
    targets = [t["expr"] for p in panels(dashboard["panels"]) for t in p.get("targets", [])]
    assert targets
    for everything in (True, False):
        chosen = await _choose(dashboard["templating"]["list"], get, everything)
        now = time.time()
        empty = []
        for target in targets:
            expr = expand(target, chosen)
            instant = await get("query", query=expr, time=str(now))
            ranged = await get(
                "query_range", query=expr, start=str(now - 30), end=str(now), step="2"
            )
            if not (instant["result"] and ranged["result"]) and not any(q in target for q in QUIET):
                empty.append(expr)
        if everything:
            assert empty == [], f"no data on the demo for {empty}"


async def _choose(variables: list[dict[str, Any]], get: Any, everything: bool) -> dict[str, str]:
    """Each query variable's value as Grafana sends it: its allValue for "All", else the
    alternation of two of the values its own ``label_values`` query answers."""
    chosen: dict[str, str] = {}
    for variable in variables:
        if variable["type"] != "query":
            continue
        query = variable["query"]
        query = query["query"] if isinstance(query, dict) else query
        match = re.fullmatch(r"label_values\((.+), (\w+)\)", query)
        assert match, variable
        selector, label = match.groups()
        values = await get(f"label/{label}/values", **{"match[]": expand(selector, chosen)})
        assert values, f"variable {variable['name']} has no values"
        if everything and variable.get("includeAll"):
            chosen[variable["name"]] = variable.get("allValue") or alternation(values)
        else:
            chosen[variable["name"]] = alternation(
                values[:2] if variable.get("multi") else values[:1]
            )
    return chosen
