"""Every surface gives REST's numbers: the demo walked namespace by namespace, node by node,
pod by pod.

The overview, ``/nodes``, each node's page, ``/workloads`` (every page, and filtered to
each namespace), each pod's page, ``/namespaces`` and the usage CSV are read against
REST's answers (``/api/v1/nodes``, ``/api/v1/nodes/{node}``, ``/api/v1/pods``, each pod's,
``/api/v1/usage``). A page's figures are read from its ``data-*`` attributes, which carry
each number it shows, in full.

The demo's readings are held still after their first step (no pod churns, no reading
drifts, the flaky monitor answers), so a page and REST read a moment apart see the same
figures; only times move (idle seconds, data age), and those are not compared. A check
that still meets a moment between two states (a scrape landing between the two reads)
reads both again, within a bound.
"""

from __future__ import annotations

import csv
import io
import math
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest
from helpers import eventually, running_demo

from collector.views.chargeback import CSV_DECIMALS

INTERVAL = 1.0
NODES = 4
"""Monitored nodes: one of each monitor flavour (with the demo's two HAMi-DRA nodes and the
device plugin's node beside them)."""
Attrs = dict[str, str]


class Data(HTMLParser):
    """Every element with ``data-*`` attributes, in the page's order: its tag and those
    attributes (without the prefix)."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[tuple[str, Attrs]] = []
        self.links: list[str] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        data = {k.removeprefix("data-"): v or "" for k, v in attrs if k.startswith("data-")}
        if data:
            self.found.append((tag, data))
        if tag == "a":
            self.links += [v or "" for k, v in attrs if k == "href"]

    def having(self, name: str, tag: str | None = None) -> list[Attrs]:
        return [a for t, a in self.found if name in a and tag in (None, t)]


def number(text: str) -> float | None:
    return None if text == "" else float(text)


def same(shown: str, rest: float | None, rel: float = 1e-9) -> bool:
    """Whether a page's attribute is REST's figure (both unknown, or equal as numbers)."""
    value = number(shown)
    if value is None or rest is None:
        return value is None and rest is None
    return math.isclose(value, rest, rel_tol=rel, abs_tol=1e-9)


def known_sum(values: Iterator[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def namespace_sums(rows: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """REST's container rows summed per namespace, each sum over the rows that have it."""
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by[row["namespace"]].append(row)
    return {
        ns: {
            "memory-allocated": known_sum(r["memory_allocated_bytes"] for r in held),
            "memory-used": known_sum(r["memory_used_bytes"] for r in held),
            "cores-allocated": known_sum(r["cores_allocated"] for r in held),
            "cores-used": known_sum(
                None if r["sm_utilization_percent"] is None else r["sm_utilization_percent"] / 100
                for r in held
            ),
        }
        for ns, held in by.items()
    }


ROW_FIGURES = {
    "memory-allocated-bytes": "memory_allocated_bytes",
    "memory-used-bytes": "memory_used_bytes",
    "cores-allocated": "cores_allocated",
    "sm-utilization-percent": "sm_utilization_percent",
}
"""A container row's figures: the page's attribute -> REST's field."""


def rows_agree(shown: list[Attrs], rest: list[dict[str, Any]]) -> bool:
    """Container rows in the same order with the same identity and figures."""
    if len(shown) != len(rest):
        return False
    for attrs, row in zip(shown, rest, strict=True):
        ident = ("namespace", "pod", "container", "device_uuid")
        if any(attrs[k.replace("_", "-")] != row[k] for k in ident):
            return False
        if not all(same(attrs[a], row[f]) for a, f in ROW_FIGURES.items()):
            return False
    return True


class Walk:
    """The demo at ``base``: its pages and REST's answers, and each comparison retried until
    it holds (a bound of 30 s)."""

    def __init__(self, base: str, http: aiohttp.ClientSession) -> None:
        self.base, self.http = base, http
        self.checked: defaultdict[str, int] = defaultdict(int)

    async def rest(self, path: str) -> Any:
        async with self.http.get(self.base + path) as resp:
            assert resp.status == 200, (path, await resp.text())
            return await resp.json()

    async def page(self, path: str) -> Data:
        separator = "&" if "?" in path else "?"
        async with self.http.get(f"{self.base}{path}{separator}refresh=0") as resp:
            assert resp.status == 200, (path, await resp.text())
            return Data(await resp.text())

    async def text(self, path: str) -> str:
        async with self.http.get(self.base + path) as resp:
            assert resp.status == 200, (path, await resp.text())
            return await resp.text()

    async def agrees(self, what: str, check: Callable[[], Awaitable[bool]]) -> None:
        await eventually(check, 30, what)
        self.checked[what.split(" ")[0]] += 1

    async def overview(self) -> None:
        async def check() -> bool:
            page = await self.page("/")
            nodes = (await self.rest("/api/v1/nodes"))["nodes"]
            rows = (await self.rest("/api/v1/pods"))["containers"]
            totals = {a["total"]: a["value"] for a in page.having("total", "div")}
            compared = [n["memory_compared"] for n in nodes if n["memory_compared"]]
            (cover,) = page.having("compared-cards", "p")
            expected_cover = {
                "cards": sum(n["card_count"] for n in nodes),
                "used-cards": sum(n["memory_used_cards"] for n in nodes),
                "total": known_sum(n["memory_total_bytes"] for n in nodes),
                "total-cards": sum(n["memory_total_cards"] for n in nodes),
                "compared-cards": sum(c["cards"] for c in compared),
                "compared-used": known_sum(c["used_bytes"] for c in compared),
                "compared-total": known_sum(c["total_bytes"] for c in compared),
                "compared-allocated": known_sum(c["allocated_bytes"] for c in compared),
            }
            sums = namespace_sums(rows)
            shown = page.having("namespace", "tr")
            return (
                same(totals["nodes"], len(nodes))
                and same(totals["cards"], expected_cover["cards"])
                and same(totals["memory_used"], known_sum(n["memory_used_bytes"] for n in nodes))
                and same(
                    totals["memory_allocated"], known_sum(r["memory_allocated_bytes"] for r in rows)
                )
                and same(
                    totals["cores_used"],
                    known_sum(
                        None
                        if r["sm_utilization_percent"] is None
                        else r["sm_utilization_percent"] / 100
                        for r in rows
                    ),
                    1e-6,  # the overview sums cores in millionths of a card
                )
                and all(same(cover[k], v) for k, v in expected_cover.items())
                and bool(shown)
                and all(
                    same(a[field], sums[a["namespace"]][field], 1e-6)
                    for a in shown
                    for field in (
                        "memory-allocated",
                        "memory-used",
                        "cores-allocated",
                        "cores-used",
                    )
                )
            )

        await self.agrees("overview totals, coverage and top namespaces", check)

    async def nodes(self) -> list[str]:
        names: list[str] = []

        async def check() -> bool:
            page = await self.page("/nodes")
            listed = (await self.rest("/api/v1/nodes"))["nodes"]
            rows = page.having("node", "tr")
            names[:] = [n["name"] for n in listed]
            return [a["node"] for a in rows] == names and all(
                same(a["card-count"], n["card_count"])
                and same(a["memory-used-bytes"], n["memory_used_bytes"])
                and same(a["memory-used-cards"], n["memory_used_cards"])
                and same(a["memory-total-bytes"], n["memory_total_bytes"])
                and same(a["memory-total-cards"], n["memory_total_cards"])
                for a, n in zip(rows, listed, strict=True)
            )

        await self.agrees("nodes list", check)
        return names

    async def node(self, name: str) -> None:
        async def check() -> bool:
            page = await self.page(f"/nodes/{quote(name, safe='')}")
            detail = await self.rest(f"/api/v1/nodes/{quote(name, safe='')}")
            (summary,) = page.having("card-count", "p")
            cards = page.having("device-uuid", "section")
            containers = [c for card in detail["cards"] for c in card["containers"]]
            containers += detail["unmatched_containers"]
            pods = page.having("pod", "tr")
            return (
                same(summary["memory-used-bytes"], detail["node"]["memory_used_bytes"])
                and same(summary["memory-total-bytes"], detail["node"]["memory_total_bytes"])
                and [a["device-uuid"] for a in cards] == [c["device_uuid"] for c in detail["cards"]]
                and all(
                    same(a["memory-used-bytes"], c["memory_used_bytes"])
                    and same(a["memory-total-bytes"], c["memory_total_bytes"])
                    and same(a["memory-allocated-bytes"], c["memory_allocated_bytes"])
                    and same(a["cores-allocated"], c["cores_allocated"])
                    and a["over-allocated"].split() == c["over_allocated"]
                    for a, c in zip(cards, detail["cards"], strict=True)
                )
                and rows_agree(pods, containers)
            )

        await self.agrees(f"node {name}", check)

    async def workloads(self, query: str = "") -> set[tuple[str, str]]:
        pods: set[tuple[str, str]] = set()

        async def check() -> bool:
            listed = (await self.rest(f"/api/v1/pods?{query}"))["containers"]
            shown: list[Attrs] = []
            for number in range(1, math.ceil(len(listed) / 100) + 1):
                page = await self.page(f"/workloads?{query}&page={number}")
                shown += page.having("pod", "tr")
            pods.update((r["namespace"], r["pod"]) for r in listed)
            return bool(listed) and rows_agree(shown, listed)

        await self.agrees(f"workloads {query or 'every page'}", check)
        return pods

    async def pod(self, namespace: str, pod: str) -> None:
        ns, name = quote(namespace, safe=""), quote(pod, safe="")

        async def check() -> bool:
            page = await self.page(f"/workloads/{ns}/{name}")
            detail = await self.rest(f"/api/v1/namespaces/{ns}/pods/{name}")
            (summary,) = page.having("vgpus", "p")
            return (
                same(summary["vgpus"], detail["vgpu_count"])
                and same(summary["memory-used-bytes"], detail["memory_used_bytes"])
                and same(summary["memory-used-vgpus"], detail["memory_used_vgpus"])
                and same(summary["memory-allocated-bytes"], detail["memory_allocated_bytes"])
                and same(summary["memory-allocated-vgpus"], detail["memory_allocated_vgpus"])
                and rows_agree(page.having("container", "tr"), detail["containers"])
            )

        await self.agrees(f"pod {namespace}/{pod}", check)

    async def namespaces(self, namespaces: set[str]) -> None:
        async def check() -> bool:
            page = await self.page("/namespaces?window=15m")
            csv_link = next(link for link in page.links if "format=csv" in link)
            report = await self.rest(csv_link.replace("format=csv", "format=json"))
            groups = {g["labels"]["namespace"]: g for g in report["groups"]}
            rows = page.having("namespace", "tr")
            fields = (
                "memory_allocated_byte_hours",
                "memory_used_byte_hours",
                "cores_allocated_core_hours",
                "cores_used_core_hours",
                "idle_share",
            )
            table = list(csv.DictReader(io.StringIO(await self.text(csv_link))))
            return (
                {a["namespace"] for a in rows} == set(groups) == namespaces
                and all(
                    same(a[f.replace("_", "-")], groups[a["namespace"]][f])
                    for a in rows
                    for f in fields
                )
                and {r["namespace"] for r in table} == namespaces
                and all(rounded(r, groups[r["namespace"]]) for r in table)
            )

        await self.agrees("namespaces page and its CSV", check)

    async def usage(self) -> None:
        """The report over a window of the held readings: each step's sum is REST's now."""

        async def check() -> bool:
            end = time.time() - INTERVAL
            start = end - 5 * INTERVAL
            report = await self.rest(f"/api/v1/usage?by=namespace&start={start}&end={end}")
            hours = (report["end"] - report["start"]) / 3600
            rows = (await self.rest("/api/v1/pods"))["containers"]
            sums = namespace_sums(rows)
            groups = {g["labels"]["namespace"]: g for g in report["groups"]}
            pairs = {
                "memory-allocated": "memory_allocated_byte_hours",
                "memory-used": "memory_used_byte_hours",
                "cores-allocated": "cores_allocated_core_hours",
                "cores-used": "cores_used_core_hours",
            }
            return set(groups) == set(sums) and all(
                same(
                    "" if groups[ns][field] is None else repr(groups[ns][field] / hours),
                    sums[ns][mine],
                    1e-9,
                )
                for ns in sums
                for mine, field in pairs.items()
            )

        await self.agrees("usage report against REST's rows", check)


def rounded(row: dict[str, str], group: dict[str, Any]) -> bool:
    """A CSV row's measures are the JSON's, rounded as the CSV rounds them; its window is
    RFC 3339."""
    for field, decimals in CSV_DECIMALS.items():
        value = group[field]
        if (row[field] == "") != (value is None):
            return False
        if value is not None and float(row[field]) != round(value, decimals):
            return False
    return row["start"].endswith("Z") and "T" in row["start"]


@pytest.mark.timeout(400)
async def test_every_surface_gives_rests_numbers(tmp_path: Path, still: None) -> None:
    async with (
        running_demo(tmp_path, NODES, INTERVAL) as (base, _),
        aiohttp.ClientSession() as http,
    ):
        walk = Walk(base, http)

        async def settled() -> bool:
            nodes = (await walk.rest("/api/v1/nodes"))["nodes"]
            query = "min(count_over_time(hami_vgpu_memory_allocated_bytes[8s]))"
            answer = await walk.rest(f"/prometheus/api/v1/query?query={quote(query)}")
            result = answer["data"]["result"]
            held = bool(result) and float(result[0]["value"][1]) >= 8
            return held and len(nodes) == NODES + 3 and all(n["memory_used_bytes"] for n in nodes)

        await eventually(settled, 120, "every node reporting, with 8 s of history")
        await walk.overview()
        for name in await walk.nodes():
            await walk.node(name)
        pods = await walk.workloads()
        namespaces = {ns for ns, _ in pods}
        for namespace in sorted(namespaces):
            await walk.workloads(f"namespace={quote(namespace)}")
        for namespace, pod in sorted(pods):
            await walk.pod(namespace, pod)
        await walk.namespaces(namespaces)
        await walk.usage()
        assert {"team-train", "team-serve", "team-embed", "team-fresh"} <= namespaces
        assert walk.checked["node"] == NODES + 3
        assert walk.checked["pod"] == len(pods) > 100
