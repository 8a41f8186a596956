"""The alert rules of ``rules/`` evaluated by a real vmalert 1.79 on the simulated cluster.

vmalert's datasource is the collector's own ``/prometheus`` API, the one
operators point vmalert or Grafana at: it holds the cluster's series, the
allocation series of the pod watch and the collector's own series (source up,
errors, pushes), so every rule of the file is evaluated against it. Each test
states every alert that must fire; any other alert, a pending one, or a rule
that fails to evaluate fails it.

The alerting rules run as written except for the substitutions of
:data:`QUICK` (:func:`quick_rules`, checked by :func:`test_copy_of_rules`):
every ``for:`` is removed, so an alert fires at its first evaluation instead of
minutes later, and three windows shrink from hours or minutes to seconds: the
agent-silence window, the idle threshold of ``HamiGPUAllocationIdle`` (the
chart rewrites it the same way from ``rules.idleFor``) and the age after which a
target is stale. The expressions are otherwise the file's own.

- Usage and allocation (:func:`test_usage_and_allocation_alerts`): a container
  driven to 99 % of an allocation smaller than its monitor's limit (only the
  ``used / allocated`` join can see it), a pushed card near full, each node's
  fresh pod that never ran a kernel, a container whose last kernel is old, and
  a node whose monitor fails past staleness while its pods keep their
  allocations.
- The collector's health (:func:`test_collector_health_alerts`): a monitor that
  answered and then fails (down, then stale), one that only ever sends a broken
  line (down, parse errors, never stale), pushes with a wrong token (refused),
  an agent that stops pushing (silent), a remote-write destination that refuses
  every request (dropping, labelled with its URL less the credentials in it)
  next to one that accepts everything (not dropping).

Pushes run through the collector's push API as an agent's would; Prometheus'
own semantics of every rule are proven by the promtool unit tests
(tests/integration/test_rules.py).
"""

from __future__ import annotations

import gzip
import math
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web
from helpers import eventually, real_vmalert, scraping_collector, serving
from receivers import Recorder

from collector.sources.pods import PodDirectory
from core.payload import Card, Payload
from simulator.agents import SimulatedDirectory, directory_of
from simulator.cluster import build_cluster
from simulator.devices import Allocation
from simulator.monitors import MonitorFarm
from simulator.node import SimulatedNode
from simulator.pods import FRESH_CONTAINER, FRESH_NAMESPACE, Objects
from simulator.run import collector_flavour
from simulator.workload import MIB
from testing.oracle import expected_canonical

RULES = Path(__file__).resolve().parents[2] / "rules" / "hami-usage.rules.yaml"
TOKEN = "e2e-shared-token"
GIB = 1 << 30
# Labels vmalert adds to every alert and the rule's own: not the ones the expressions compute.
RULE_LABELS = {"alertname", "alertgroup", "severity"}
IDLE_AFTER = 3
"""Seconds: the quick copy's idle threshold (7200 in the file)."""
STALE_AFTER = 5
"""Seconds: the quick copy's age of a stale target (900 in the file)."""
QUICK = (
    ("HamiUsageAgentSilent", "< 120)", "< 10)"),
    (
        "HamiGPUAllocationIdle",
        "container) (hami_container_idle_seconds) > 7200",
        f"container) (hami_container_idle_seconds) > {IDLE_AFTER}",
    ),
    ("HamiUsageTargetStale", "> 900", f"> {STALE_AFTER}"),
)
"""(alert, text in its expression, what the quick copy has instead)."""

Alert = tuple[str, frozenset[tuple[str, str]]]


def quick_rules(path: Path) -> Path:
    """The file's alerting rules with no ``for:`` and the :data:`QUICK` windows, to ``path``.

    Recording rules are left out: vmalert refuses to start with them unless it
    has a remote-write destination to store their results in.
    """
    text = RULES.read_text()
    for _, old, new in QUICK:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    document = yaml.safe_load(text)
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
    changed = {alert: (old, new) for alert, old, new in QUICK}
    for a, b in pairs:
        assert "for" not in b
        a = {k: v for k, v in a.items() if k != "for"}
        if a["alert"] in changed:
            old, new = changed.pop(a["alert"])
            a["expr"] = a["expr"].replace(old, new)
        assert a == b
    assert changed == {}


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

    async def up(self, node: str) -> bool:
        """Whether the collector's history holds a good scrape or push of ``node`` now."""
        url = f"{self.url}/prometheus/api/v1/query"
        query = {"query": f'hami_usage_collector_source_up{{node="{node}"}} == 1'}
        async with self.http.get(url, params=query) as resp:
            return bool((await resp.json())["data"]["result"])

    def target(self, node: SimulatedNode) -> frozenset[tuple[str, str]]:
        """The labels of the node's monitor as a source: node, source address, kind."""
        address = {name: addr for name, _, addr in self.farm.targets()}
        return frozenset(
            {
                ("node", node.name),
                ("source", address[node.name]),
                ("kind", collector_flavour(node.flavour)),
            }
        )


def simulated_cluster(now: float) -> list[SimulatedNode]:
    """Four nodes, one per monitor flavour, stepped to ``now``."""
    nodes = build_cluster(4, seed=41, flavours=("hami", "hami-legacy", "volcano", "kai"))
    for node in nodes:
        node.step(now)
    return nodes


@asynccontextmanager
async def running(
    tmp_path: Path,
    nodes: list[SimulatedNode],
    now: float,
    faults: Mapping[str, str] | None = None,
    pods: PodDirectory | None = None,
    remote_write: list[str] | None = None,
) -> AsyncIterator[Cluster]:
    """The monitors frozen at ``now`` (``faults`` from their first answer), the collector on them.

    ``remote_write``: the collector's remote-write destinations, if any.
    """
    extra: dict[str, object] = {"remote_write_url": remote_write} if remote_write else {}
    (tmp_path / "token").write_text(TOKEN)
    async with MonitorFarm(nodes, clock=lambda: now) as farm:
        for node, fault in (faults or {}).items():
            farm.set_fault(node, fault)
        async with (
            scraping_collector(
                farm,
                tmp_path,
                interval=0.5,
                timeout=0.4,
                stale_after=2.0,
                push_auth="token",
                push_token_file=tmp_path / "token",
                pods=pods,
                **extra,
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


@asynccontextmanager
async def receiving(recorder: Recorder) -> AsyncIterator[str]:
    """A remote-write receiver on loopback answering as ``recorder`` does; its write URL."""
    app = web.Application()
    app.router.add_post("/api/v1/write", recorder.handle)
    async with serving(app) as url:
        yield f"{url}/api/v1/write"


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


def vgpu_series(
    node: SimulatedNode, now: float, name: str
) -> dict[frozenset[tuple[str, str]], float]:
    """The oracle's series ``name`` of the node's vGPUs, by labels."""
    return {
        labels: v for (family, labels), v in expected_canonical(node, now).items() if family == name
    }


def near_limit(nodes: list[SimulatedNode], now: float) -> set[Alert]:
    """HamiVGPUMemoryNearLimit's alerts from the oracle, where allocated = limit: used / limit > 0.95."""
    found = set()
    for node in nodes:
        used = vgpu_series(node, now, "hami_vgpu_memory_used_bytes")
        limits = vgpu_series(node, now, "hami_vgpu_memory_limit_bytes")
        found |= {
            ("HamiVGPUMemoryNearLimit", labels)
            for labels, v in used.items()
            if labels in limits and v / limits[labels] > 0.95
        }
    return found


def vgpu_labels(node: SimulatedNode, a: Allocation, now: float) -> frozenset[tuple[str, str]]:
    """The labels of one vGPU's usage series (the oracle's)."""
    mine = {
        ("namespace", a.namespace),
        ("pod", a.pod),
        ("container", a.container),
        ("vdevice_index", str(a.vdevice_index)),
    }
    [labels] = [
        labels for labels in vgpu_series(node, now, "hami_vgpu_memory_used_bytes") if mine <= labels
    ]
    return labels


def idle(node: SimulatedNode, namespace: str, pod: str, container: str) -> Alert:
    """HamiGPUAllocationIdle's alert for one container."""
    labels = {("node", node.name), ("namespace", namespace), ("pod", pod), ("container", container)}
    return ("HamiGPUAllocationIdle", frozenset(labels))


def shrink_allocation(objects: Objects, node: SimulatedNode, a: Allocation) -> int:
    """Halve the memory HAMi's annotation allocates to vGPU ``a``; the bytes it now says.

    The monitor still reports the old limit, so only ``used / allocated`` sees
    this vGPU near its allocation.
    """
    [pod] = [p for p in objects.pods if p["metadata"]["uid"] == a.pod_uid]
    notes = pod["metadata"]["annotations"]
    key = "hami.io/vgpu-devices-allocated"
    old = f"{node.cards[a.card].uuid},NVIDIA,{a.limit // MIB},"
    assert notes[key].count(old) == 1, "choose a vGPU its pod's annotation names once"
    notes[key] = notes[key].replace(old, f"{node.cards[a.card].uuid},NVIDIA,{a.limit // MIB // 2},")
    return a.limit // MIB // 2 * MIB


def pushed_cards() -> list[Card]:
    """Two cards of an agent's node: one 97 % full, one half full."""
    total = 141 * GIB
    return [
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


EXHAUSTED: Alert = (
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


async def test_usage_and_allocation_alerts(notifier: str, tmp_path: Path) -> None:
    now = time.time()
    nodes = simulated_cluster(now)
    hami, down, volcano = nodes[0], nodes[1], nodes[2]
    # Every container ran a kernel just now, but one on the Volcano node 10 minutes ago.
    for node in nodes:
        for a in node.allocations:
            a.last_kernel_time = math.floor(now)
    sleepy = volcano.allocations[0]
    for a in volcano.allocations:
        if (a.pod_uid, a.container) == (sleepy.pod_uid, sleepy.container):
            a.last_kernel_time = math.floor(now) - 600
    objects = SimulatedDirectory(nodes).objects()
    twins = Counter((a.pod_uid, a.card, a.limit) for a in hami.allocations)
    full = next(a for a in hami.allocations if twins[a.pod_uid, a.card, a.limit] == 1)
    allocated = shrink_allocation(objects, hami, full)
    full.used = allocated * 99 // 100
    for node in nodes:
        node.refresh_cards()  # a new revision: the monitors serve the new readings

    full_labels = vgpu_labels(hami, full, now)
    by_limit = near_limit([hami, volcano, nodes[3]], now)
    assert ("HamiVGPUMemoryNearLimit", full_labels) not in by_limit, "the limit path sees it"
    expected = by_limit | {("HamiVGPUMemoryNearLimit", full_labels), EXHAUSTED}
    expected |= {idle(n, FRESH_NAMESPACE, f"fresh-{n.name}", FRESH_CONTAINER) for n in nodes}
    expected.add(idle(volcano, sleepy.namespace, sleepy.pod, sleepy.container))
    # The failing node's usage is gone: each of its containers is idle since its pod started.
    expected |= {idle(down, a.namespace, a.pod, a.container) for a in down.allocations}
    expected.add(("HamiNodeWithoutUsageSource", frozenset({("node", down.name)})))

    async def push() -> None:
        assert await cluster.push("gpu-agent-1", "a1", pushed_cards()) == 204

    async with running(tmp_path, nodes, now, pods=directory_of(objects)) as cluster:
        expected.add(("HamiUsageTargetDown", cluster.target(down)))
        expected.add(("HamiUsageTargetStale", cluster.target(down)))

        await eventually(
            lambda: cluster.up(down.name), 30, "a good scrape of the node that then fails"
        )
        cluster.farm.set_fault(down.name, "500")
        rules = quick_rules(tmp_path / "quick.rules.yaml")
        with real_vmalert(tmp_path, rules, f"{cluster.url}/prometheus", notifier) as vmalert:
            await until_exactly(cluster.http, vmalert, expected, push)


async def test_collector_health_alerts(notifier: str, tmp_path: Path) -> None:
    now = time.time()
    nodes = simulated_cluster(now)
    down, broken = nodes[1], nodes[2]
    card = Card(
        index=0, uuid="GPU-e2e-9", name="NVIDIA H200", memory_used=GIB, memory_total=80 * GIB
    )
    expected = near_limit([nodes[0], nodes[3]], now)
    expected.add(
        ("HamiUsageScrapeParseErrors", frozenset({("kind", collector_flavour(broken.flavour))}))
    )
    expected.add(("HamiUsagePushRefused", frozenset({("reason", "unauthorized")})))
    expected.add(("HamiUsageAgentSilent", frozenset({("node", "gpu-agent-gone")})))
    refusing, accepting = Recorder(then=400), Recorder()

    async def traffic() -> None:
        # A live agent (never silent) and one with a wrong token (refused).
        assert await cluster.push("gpu-agent-live", "live", [card]) == 204
        assert await cluster.push("gpu-agent-live", "live", [card], token="wrong") == 401

    async with (
        receiving(refusing) as refused,
        receiving(accepting) as accepted,
        running(
            tmp_path,
            nodes,
            now,
            faults={broken.name: "malformed"},
            remote_write=[refused.replace("http://", "http://writer:secret@"), accepted],
        ) as cluster,
    ):
        # The collector labels a destination with its URL less the credentials.
        expected.add(("HamiUsageRemoteWriteDropping", frozenset({("url", refused)})))
        # The broken monitor never answered well: down, but not stale. The other
        # answered, then fails: down, and stale once its last success is old.
        expected.add(("HamiUsageTargetDown", cluster.target(broken)))
        expected.add(("HamiUsageTargetDown", cluster.target(down)))
        expected.add(("HamiUsageTargetStale", cluster.target(down)))

        # An agent that pushed until the collector's history held it, then stopped.
        async def seen() -> bool:
            assert await cluster.push("gpu-agent-gone", "gone", [card]) == 204
            return await cluster.up("gpu-agent-gone") and await cluster.up(down.name)

        await eventually(seen, 30, "the agent's series and a good scrape in the history")
        cluster.farm.set_fault(down.name, "500")
        rules = quick_rules(tmp_path / "quick.rules.yaml")
        with real_vmalert(tmp_path, rules, f"{cluster.url}/prometheus", notifier) as vmalert:
            await until_exactly(cluster.http, vmalert, expected, traffic, timeout=90)
        # Both destinations were sent to: one refused everything, the other took it all.
        assert set(refusing.answered) == {400}
        assert accepting.bodies
        assert set(accepting.answered) == {204}
