"""What Grafana asks to draw the dashboard, and the instant queries of the query goals, over HTTP.

Why: a panel is drawn when every query of the dashboard has answered, so the
figure that matters is the time to answer all of them, ours against a
Prometheus holding the same samples. Grafana asks each panel's expression
over the dashboard's range (here the last hour): a range query at the
panel's interval, which for an hour on a normal screen is the datasource's
minimum interval, taken here as the data's own step; panels marked
``instant`` (the tables) ask one instant query. The dashboard's two variables
(``label_values``) are asked first, as Grafana does; with "All" chosen each
variable is ``.*``. Each peer is asked one query at a time (Grafana sends
them in parallel, but this machine has 2 cores, so a sum is the fairer
figure), and the total of each round is what is reported.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.kit.timing import percentile

INSTANT_GOALS = {
    "topk": "topk(10, hami_vgpu_memory_used_bytes)",
    "count_by_namespace": "count by (namespace) (hami_vgpu_memory_used_bytes)",
}
"""The goal's instant queries besides ``sum by (node)`` (which bench/query/run.py times itself)."""
PANEL_REPEATS = 2
"""Timed rounds of the whole dashboard per peer, after the first (each panel is a target)."""
ALL = ".*"
"""What Grafana puts for a variable whose "All" is chosen (the dashboard's ``allValue``)."""
_VARIABLE = re.compile(r"\$\{?(\w+)\}?")

Peers = dict[str, tuple[str, str]]
"""Peer name -> (base URL, API prefix)."""


def instant_path(prefix: str, query: str, at: float) -> str:
    """The path of an instant query."""
    return f"{prefix}/query?{urllib.parse.urlencode({'query': query, 'time': f'{at:.3f}'})}"


def range_path(prefix: str, query: str, start: float, end: float, step: float) -> str:
    """The path of a range query."""
    params = {"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
    return f"{prefix}/query_range?{urllib.parse.urlencode(params)}"


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def requests(dashboard: Path, prefix: str, start: float, end: float, step: float) -> list[str]:
    """Every request drawing ``dashboard`` over ``[start, end]`` asks, variables first."""
    spec = json.loads(dashboard.read_text())
    paths = []
    for variable in spec.get("templating", {}).get("list", []):
        found = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", variable.get("definition", ""))
        if found:
            match, name = _VARIABLE.sub(ALL, found[1]), found[2]
            params = {"match[]": match, "start": f"{start:.3f}", "end": f"{end:.3f}"}
            paths.append(f"{prefix}/label/{name}/values?{urllib.parse.urlencode(params)}")
    for panel in _panels(spec.get("panels", [])):
        for target in panel.get("targets", []):
            expr = _VARIABLE.sub(ALL, target.get("expr", ""))
            if not expr:
                continue
            if target.get("instant") and not target.get("range"):
                paths.append(instant_path(prefix, expr, end))
            else:
                paths.append(range_path(prefix, expr, start, end, step))
    return paths


def panel_targets(
    peers: Peers, dashboard: Path, start: float, end: float, step: float
) -> list[list[Any]]:
    """The client's targets drawing the dashboard once per round for each peer."""
    return [
        [f"{peer}_dashboard_{i:02d}", base, path, PANEL_REPEATS]
        for peer, (base, prefix) in peers.items()
        for i, path in enumerate(requests(dashboard, prefix, start, end, step))
    ]


def instant_targets(peers: Peers, at: float) -> list[list[Any]]:
    """The client's targets for :data:`INSTANT_GOALS`."""
    return [
        [f"{peer}_{name}", base, instant_path(prefix, query, at)]
        for name, query in INSTANT_GOALS.items()
        for peer, (base, prefix) in peers.items()
    ]


def instant_rows(times: dict[str, Any]) -> dict[str, Any]:
    """Each of :data:`INSTANT_GOALS` over HTTP, ours and the peer's, with the p99 ratio."""
    rows = {}
    for name in INSTANT_GOALS:
        ours, peer = times[f"ours_{name}"], times[f"prometheus_{name}"]
        ratio = ours["p99_ms"] / peer["p99_ms"] if peer["p99_ms"] else float("inf")
        rows[name] = {"ours": ours, "prometheus": peer, "ratio_p99": ratio}
    return rows


def drawn(times: dict[str, Any]) -> dict[str, Any]:
    """The dashboard's total per round for each peer (ms): median, max, and ours over theirs."""
    out: dict[str, Any] = {}
    for peer in ("ours", "prometheus"):
        panels = [t for name, t in sorted(times.items()) if name.startswith(f"{peer}_dashboard_")]
        rounds = min((len(p["ms"]) for p in panels), default=0)
        totals = [sum(p["ms"][r] for p in panels) for r in range(rounds)]
        out[peer] = {
            "requests": len(panels),
            "rounds": rounds,
            "totals_ms": totals,
            "p50_ms": percentile(totals, 50) if totals else 0.0,
            "max_ms": max(totals, default=0.0),
            "first_ms": sum(p["first_ms"] for p in panels),
            "statuses": sorted({p["status"] for p in panels}),
        }
    theirs = out["prometheus"]["p50_ms"]
    out["ratio_p50"] = out["ours"]["p50_ms"] / theirs if theirs else float("inf")
    return out
