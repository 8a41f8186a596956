"""The alert rules of ``rules/`` evaluated by a real vmalert 1.79 on the simulated cluster.

The alerting rules run as written except for one documented substitution
(:func:`quick_rules`, checked by :func:`test_copy_of_rules`): every ``for:`` is
removed, so an alert fires at its first evaluation instead of minutes later,
and the agent-silence window (``< 120`` seconds) becomes ``< 10``. The
expressions, thresholds and ranges are otherwise the file's own.

Two datasources:

- the collector's own ``/prometheus`` API, the datasource operators point
  vmalert or Grafana at: the usage alerts the simulated cluster drives fire
  (a container pushed to 99 % of its vGPU memory, a pushed card near full), the
  others stay silent, and vmalert evaluates every rule without an error;
- a real Prometheus scraping the collector's ``/metrics``, for the alerts over
  the collector's own series (source up, errors, pushes), which the history
  behind ``/prometheus`` does not hold: a monitor answering 500 and one sending
  a broken line are down, the broken one raises parse errors, pushes with a
  wrong token are refused, an agent that stops pushing is silent.

Alerts over the allocation series (``hami_vgpu_memory_allocated_bytes``,
``hami_container_idle_seconds``) have nothing to fire on here: the promtool unit
tests (tests/test_rules.py) prove them.
"""

from __future__ import annotations

import gzip
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web
from helpers import eventually, real_prometheus, real_vmalert, scraping_collector, serving
from oracle import expected_canonical

from collector.demo.cluster import build_cluster
from collector.demo.monitors import MonitorFarm
from collector.demo.node import SimulatedNode
from collector.demo.run import collector_flavour
from core.payload import Card, Payload

RULES = Path(__file__).resolve().parent.parent / "rules" / "hami-usage.rules.yaml"
TOKEN = "e2e-shared-token"
GIB = 1 << 30
# Labels vmalert adds to every alert, the rule's own, and Prometheus' target labels
# (job, instance): not the ones the expressions compute.
RULE_LABELS = {"alertname", "alertgroup", "severity", "job", "instance"}

Alert = tuple[str, frozenset[tuple[str, str]]]


def quick_rules(path: Path) -> Path:
    """The file's alerting rules with no ``for:`` and a 10 s agent-silence window, to ``path``.

    Recording rules are left out: vmalert refuses to start with them unless it
    has a remote-write destination to store their results in.
    """
    text = RULES.read_text()
    assert text.count("< 120)") == 1
    document = yaml.safe_load(text.replace("< 120)", "< 10)"))
    groups = []
    for group in document["groups"]:
        group["rules"] = [rule for rule in group["rules"] if "alert" in rule]
        for rule in group["rules"]:
            rule.pop("for", None)
        if group["rules"]:
            groups.append(group)
    path.write_text(yaml.safe_dump({"groups": groups}))
    return path


def alert_count() -> int:
    """How many alerting rules the rule file holds."""
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return sum("alert" in rule for group in groups for rule in group["rules"])


def test_copy_of_rules(tmp_path: Path) -> None:
    """The substitution changes only what the module docstring says."""
    original = yaml.safe_load(RULES.read_text())["groups"]
    quick = yaml.safe_load(quick_rules(tmp_path / "quick.yaml").read_text())["groups"]
    alerting = [rule for group in original for rule in group["rules"] if "alert" in rule]
    pairs = list(zip(alerting, [rule for group in quick for rule in group["rules"]], strict=True))
    assert len(pairs) == alert_count() > 0
    for a, b in pairs:
        assert "for" not in b
        a = {k: v for k, v in a.items() if k != "for"}
        if a["alert"] == "HamiUsageAgentSilent":
            a["expr"] = a["expr"].replace("< 120)", "< 10)")
        assert a == b


@dataclass
class Cluster:
    """The simulated monitors, the collector scraping them, and a push client of it."""

    farm: MonitorFarm
    nodes: list[SimulatedNode]
    url: str
    http: aiohttp.ClientSession
    sequence: int = 0

    async def push(self, node: str, agent: str, cards: list[Card], token: str = TOKEN) -> int:
        """Push one snapshot of ``cards`` as ``agent`` for ``node``; the HTTP status."""
        self.sequence += 1
        payload = Payload(
            node=node, agent=agent, sequence=self.sequence, time=time.time(), nvml=True, cards=cards
        )
        headers = {
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "Content-Encoding": "gzip",
        }
        body = gzip.compress(payload.model_dump_json().encode())
        async with self.http.post(f"{self.url}/api/v1/push", data=body, headers=headers) as resp:
            return resp.status


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    """Four monitors, one of each flavour, frozen in time so a test can set their readings."""
    now = time.time()
    nodes = build_cluster(4, seed=41, flavours=("hami", "hami-legacy", "volcano", "kai"))
    for node in nodes:
        node.step(now)
    (tmp_path / "token").write_text(TOKEN)
    async with (
        MonitorFarm(nodes, clock=lambda: now) as farm,
        scraping_collector(
            farm,
            tmp_path,
            interval=0.5,
            timeout=0.4,
            stale_after=2.0,
            push_auth="token",
            push_token_file=tmp_path / "token",
        ) as (url, _),
        aiohttp.ClientSession() as http,
    ):
        yield Cluster(farm, nodes, url, http)


@pytest.fixture
async def notifier() -> AsyncIterator[str]:
    """An Alertmanager stand-in that takes vmalert's notifications (vmalert needs one)."""

    async def accept(_: web.Request) -> web.Response:
        return web.Response()

    app = web.Application()
    app.router.add_post("/api/v2/alerts", accept)
    async with serving(app) as url:
        yield url


async def alerts(http: aiohttp.ClientSession, vmalert: str) -> set[Alert]:
    """Every alert vmalert holds, as (name, the expression's labels); all must be firing."""
    async with http.get(f"{vmalert}/api/v1/alerts") as resp:
        answer = await resp.json()
    held = answer["data"]["alerts"] or []
    # With no `for:` an alert is firing from its first evaluation on: pending is a bug.
    assert {a["state"] for a in held} <= {"firing"}, held
    return {
        (a["name"], frozenset((k, v) for k, v in a["labels"].items() if k not in RULE_LABELS))
        for a in held
    }


async def evaluations(http: aiohttp.ClientSession, vmalert: str) -> dict[str, dict[str, Any]]:
    """Every rule vmalert evaluates, by id: its last evaluation and last error."""
    async with http.get(f"{vmalert}/api/v1/rules") as resp:
        answer = await resp.json()
    rules = {r["id"]: r for g in answer["data"]["groups"] for r in g["rules"]}
    assert len(rules) == alert_count()
    return rules


async def until_exactly(
    http: aiohttp.ClientSession,
    vmalert: str,
    expected: set[Alert],
    between: Callable[[], Awaitable[None]],
    timeout: float = 60.0,
) -> None:
    """Wait until vmalert's alerts are ``expected``, no more, no fewer; then check they stay so.

    ``between`` runs before each poll (pushes that must keep coming). Once the
    alerts match, every rule must be evaluated once more, without error, and the
    alerts must still be exactly ``expected``: a rule not yet evaluated when the
    set first matched cannot hide an alert that should not fire.
    """
    seen: set[Alert] = set()

    async def exact() -> bool:
        nonlocal seen
        await between()
        try:
            seen = await alerts(http, vmalert)
        except aiohttp.ClientError:
            return False
        return seen == expected

    try:
        await eventually(exact, timeout, "vmalert's alerts")
    except AssertionError:
        assert seen == expected  # shows the difference
        raise
    before = {
        key: rule["lastEvaluation"] for key, rule in (await evaluations(http, vmalert)).items()
    }

    async def another_round() -> bool:
        await between()
        now = await evaluations(http, vmalert)
        return all(rule["lastEvaluation"] != before[key] for key, rule in now.items())

    await eventually(another_round, timeout, "every rule evaluated again")
    errors = {r["name"]: r["lastError"] for r in (await evaluations(http, vmalert)).values()}
    assert {name: error for name, error in errors.items() if error} == {}
    await between()
    assert await alerts(http, vmalert) == expected


def near_limit(nodes: list[SimulatedNode], now: float) -> set[Alert]:
    """HamiVGPUMemoryNearLimit's alerts from the oracle: used / limit > 0.95, no allocation."""
    found = set()
    for node in nodes:
        series = expected_canonical(node, now)
        used = {
            labels - {("zone", "vGPU")}: v
            for (name, labels), v in series.items()
            if name == "hami_vgpu_memory_used_bytes"
        }
        limits = {
            labels - {("zone", "vGPU")}: v
            for (name, labels), v in series.items()
            if name == "hami_vgpu_memory_limit_bytes"
        }
        found |= {
            ("HamiVGPUMemoryNearLimit", labels)
            for labels, v in used.items()
            if labels in limits and v / limits[labels] > 0.95
        }
    return found


async def test_usage_alerts_against_the_collectors_own_api(
    cluster: Cluster, notifier: str, tmp_path: Path
) -> None:
    hami = cluster.nodes[0]
    full = hami.allocations[0]
    full.used = full.limit * 99 // 100
    hami.refresh_cards()  # a new revision: the monitor serves the new reading
    expected = near_limit(cluster.nodes, time.time())
    pushed_labels = {
        ("container", full.container),
        ("namespace", full.namespace),
        ("pod", full.pod),
        ("node", hami.name),
    }
    assert [a for a in expected if pushed_labels <= a[1]], "the full container is expected"
    total = 141 * GIB
    cards = [
        Card(
            index=0,
            uuid="GPU-e2e-0",
            name="NVIDIA H200",
            memory_used=total * 97 // 100,
            memory_total=total,
        ),
        Card(
            index=1,
            uuid="GPU-e2e-1",
            name="NVIDIA H200",
            memory_used=total // 2,
            memory_total=total,
        ),
    ]
    expected.add(
        (
            "HamiGPUMemoryNearExhaustion",
            frozenset(
                {
                    ("node", "gpu-agent-1"),
                    ("device_index", "0"),
                    ("device_uuid", "GPU-e2e-0"),
                    ("device_type", "NVIDIA-NVIDIA H200"),
                    ("zone", "vGPU"),
                }
            ),
        )
    )

    async def push() -> None:
        assert await cluster.push("gpu-agent-1", "a1", cards) == 204

    rules = quick_rules(tmp_path / "quick.rules.yaml")
    with real_vmalert(tmp_path, rules, f"{cluster.url}/prometheus", notifier) as vmalert:
        await until_exactly(cluster.http, vmalert, expected, push)


async def test_collector_health_alerts_through_prometheus(
    cluster: Cluster, notifier: str, tmp_path: Path
) -> None:
    down, broken = cluster.nodes[1], cluster.nodes[2]
    cluster.farm.set_fault(down.name, "500")
    cluster.farm.set_fault(broken.name, "malformed")
    address = {node: addr for node, _, addr in cluster.farm.targets()}
    expected: set[Alert] = {
        (
            "HamiUsageTargetDown",
            frozenset(
                {
                    ("node", n.name),
                    ("source", address[n.name]),
                    ("kind", collector_flavour(n.flavour)),
                }
            ),
        )
        for n in (down, broken)
    }
    expected.add(
        ("HamiUsageScrapeParseErrors", frozenset({("kind", collector_flavour(broken.flavour))}))
    )
    expected.add(("HamiUsagePushRefused", frozenset({("reason", "unauthorized")})))
    expected.add(("HamiUsageAgentSilent", frozenset({("node", "gpu-agent-gone")})))
    expected |= near_limit([cluster.nodes[0], cluster.nodes[3]], time.time())
    card = Card(
        index=0, uuid="GPU-e2e-9", name="NVIDIA H200", memory_used=GIB, memory_total=80 * GIB
    )
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "900ms"},
        "scrape_configs": [
            {
                "job_name": "hami-usage",
                "honor_labels": True,
                "static_configs": [{"targets": [cluster.url.removeprefix("http://")]}],
            }
        ],
    }

    async def traffic() -> None:
        # A live agent (never silent) and one with a wrong token (refused).
        assert await cluster.push("gpu-agent-live", "live", [card]) == 204
        assert await cluster.push("gpu-agent-live", "live", [card], token="wrong") == 401

    rules = quick_rules(tmp_path / "quick.rules.yaml")
    with (
        real_prometheus(tmp_path, config) as prometheus,
        real_vmalert(tmp_path, rules, prometheus, notifier) as vmalert,
    ):
        # An agent that pushed until Prometheus saw it, then stopped: its series vanish.
        async def seen_gone_agent() -> bool:
            assert await cluster.push("gpu-agent-gone", "gone", [card]) == 204
            query = {"query": 'hami_usage_collector_source_up{node="gpu-agent-gone"}'}
            async with cluster.http.get(f"{prometheus}/api/v1/query", params=query) as resp:
                return bool((await resp.json())["data"]["result"])

        await eventually(seen_gone_agent, 30, "Prometheus to scrape the agent's series")
        await until_exactly(cluster.http, vmalert, expected, traffic, timeout=90)
