"""The soak's simulated cluster: a fake API server, one monitor per node, churn and faults.

Every monitor node has its own :class:`SoakFarm` (one loopback address, one
shared port), so a node can be removed (its server stopped), added, or
started on the address a removed node had (pod IP reuse). Its monitor pod
lives in the fake API server (``testing/fakekube.py``), labelled as each
flavour's chart labels it, so the collector discovers it as it would in a
cluster. Agent nodes have no monitor: their pods are in the API server so
the collector can attribute pushed regions; their workload does not churn
(the agents run in another process that rebuilds the same nodes from the
seed). Every change stamps :attr:`Member.changed`, which the oracle uses to
know since when a node's state has been settled.
"""

from __future__ import annotations

import itertools
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from collector.normalise.schema import Flavour
from core.content import TEXT_CONTENT_TYPE
from simulator.cluster import build_cluster
from simulator.families import MONITORS
from simulator.monitors import MonitorFarm
from simulator.node import SimulatedNode
from simulator.run import collector_flavour
from testing.fakekube import FakeKube, make_pod

MONITOR_NAMESPACE = "gpu-monitoring"
SELECTOR_LABELS = {
    Flavour.HAMI: {"app.kubernetes.io/component": "hami-device-plugin"},
    Flavour.VOLCANO: {"name": "volcano-device-plugin"},
    Flavour.KAI: {"app.kubernetes.io/component": "kai-vgpu-monitor"},
}
"""Labels matching the collector's default selector of each flavour."""

TRUNCATED_GZIP = "truncated_gzip"
FAILING_FAULTS = ("timeout", "drip", "500", "html", TRUNCATED_GZIP, "oversized")
"""Faults that make every scrape fail: the node's data must go after ``stale_after``."""


class SoakFarm(MonitorFarm):
    """A monitor farm with one more fault: a gzip body cut in half (a proxy that hung up)."""

    truncated = False

    async def _serve(
        self, request: web.Request, node: SimulatedNode, count: int
    ) -> web.StreamResponse:
        if not self.truncated:
            return await super()._serve(request, node, count)
        body = self._render(node).gzipped()
        headers = {"Content-Type": TEXT_CONTENT_TYPE, "Content-Encoding": "gzip"}
        return web.Response(body=body[: len(body) // 2], headers=headers)


@dataclass
class Member:
    """One node of the soak cluster and what the oracle needs to know of it."""

    node: SimulatedNode
    agent: bool
    host: str = ""
    farm: SoakFarm | None = None
    pod: dict[str, Any] | None = None
    fault: str | None = None
    changed: float = field(default_factory=time.monotonic)
    """Monotonic time of the last change of how the node is served (added, faulted, ...)."""

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def live(self) -> bool:
        """Whether a correct collector serves this node once settled."""
        return self.farm is not None and self.fault not in FAILING_FAULTS


def soak_nodes(
    monitors: int, agents: int, seed: int, start_time: float, cards: int, allocations: int
) -> list[SimulatedNode]:
    """The soak's nodes, monitors first, the last ``agents`` for the agents (no pod churn).

    The agents' process calls this with the same arguments and gets the same
    pods (UIDs included), which the API server here holds.
    """
    nodes = build_cluster(
        monitors + agents, seed, cards, allocations, MONITORS, start_time=start_time
    )
    for node in nodes[monitors:]:
        node.CHURN_PROBABILITY = 0.0  # the agents' pods stay put
    return nodes


class World:
    """The fake API server and the monitors of the live nodes; every change goes through here."""

    def __init__(
        self, nodes: list[SimulatedNode], agents: int, live: int, port: int, seed: int
    ) -> None:
        split = len(nodes) - agents
        self.members = [Member(n, agent=i >= split) for i, n in enumerate(nodes)]
        self.kube = FakeKube()
        self.port = port
        self._initial = live
        self._rng = random.Random(f"soak|{seed}")
        self._names = itertools.count(1)
        self._hosts = (f"127.77.{i // 250}.{i % 250 + 1}" for i in itertools.count())
        self._free_hosts: list[str] = []
        self._workload: list[tuple[str, str]] = []
        self.events: dict[str, int] = {}
        self.timeline: list[tuple[float, str, str]] = []

    def note(self, member: Member, what: str, at: float | None = None) -> None:
        """Record a change of ``member`` (now, or at monotonic ``at``): the oracle judges from it."""
        member.changed = time.monotonic() if at is None else at
        self.timeline.append((member.changed, member.name, what))

    def history(self, node: str, before: float, count: int = 3) -> list[tuple[float, str]]:
        """The last ``count`` changes of ``node`` before monotonic ``before``."""
        return [(t, what) for t, n, what in self.timeline if n == node and t <= before][-count:]

    def _count(self, event: str) -> None:
        self.events[event] = self.events.get(event, 0) + 1

    @property
    def monitors(self) -> list[Member]:
        return [m for m in self.members if not m.agent]

    @property
    def agents(self) -> list[Member]:
        return [m for m in self.members if m.agent]

    async def start(self) -> None:
        """Start the API server, the first ``live`` monitors and the agent nodes' pods."""
        await self.kube.start()
        for member in self.monitors[: self._initial]:
            await self.add(member)
        for member in self.agents:
            pods = {a.pod_uid: a for a in member.node.allocations}
            for a in pods.values():
                self.kube.add_pod(make_pod(a.pod, a.namespace, member.name, ip=None, uid=a.pod_uid))

    async def stop(self) -> None:
        """Stop every monitor and the API server."""
        for member in self.monitors:
            if member.farm is not None:
                await member.farm.stop()
                member.farm = None
        await self.kube.stop()

    # -- nodes -----------------------------------------------------------------------

    async def add(self, member: Member, host: str | None = None) -> None:
        """Start ``member``'s monitor (on ``host``, e.g. a removed node's) and create its pod."""
        member.host = host or (self._free_hosts.pop() if self._free_hosts else next(self._hosts))
        member.fault = None
        farm = SoakFarm(
            [member.node],
            port=self.port,
            hosts=[member.host],
            stall_s=30.0,
            drip_interval_s=0.5,
            oversized_bytes=8 << 20,
        )
        await farm.start()
        member.farm = farm
        member.pod = self.kube.add_pod(self._monitor_pod(member))
        self.note(member, f"monitor added on {member.host}")

    async def remove(self, member: Member) -> str:
        """Delete ``member``'s pod and stop its monitor; return the address it had."""
        assert member.farm is not None
        assert member.pod is not None
        meta = member.pod["metadata"]
        self.kube.delete_pod(meta["namespace"], meta["name"])
        await member.farm.stop()
        member.farm = member.pod = None
        member.fault = None
        self.note(member, "monitor removed")
        return member.host

    def _monitor_pod(self, member: Member) -> dict[str, Any]:
        flavour = collector_flavour(member.node.flavour)
        ports = None if flavour is Flavour.VOLCANO else {"metrics": self.port}
        return make_pod(
            f"{flavour}-monitor-{next(self._names):05d}",
            MONITOR_NAMESPACE,
            member.name,
            ip=member.host,
            labels=SELECTOR_LABELS[flavour],
            container_ports=ports,
        )

    def rollout(self, member: Member) -> None:
        """A DaemonSet rollout on one node: the pod is replaced, same node, same IP."""
        assert member.pod is not None
        meta = member.pod["metadata"]
        self.kube.delete_pod(meta["namespace"], meta["name"])
        member.pod = self.kube.add_pod(self._monitor_pod(member))
        self.note(member, "monitor pod replaced (rollout)")
        self._count("daemonset rollouts (pod replaced, same IP)")

    async def replace_node(self) -> None:
        """A node leaves and another joins; half the time on the leaver's IP (reuse)."""
        live = [m for m in self.monitors if m.farm is not None and m.fault is None]
        spare = [m for m in self.monitors if m.farm is None]
        if not live or not spare:
            return
        leaving, joining = self._rng.choice(live), self._rng.choice(spare)
        host = await self.remove(leaving)
        if self._rng.random() < 0.5:
            await self.add(joining, host)
            self._count("nodes replaced, new node on the old pod IP")
        else:
            self._free_hosts.append(host)
            await self.add(joining)
            self._count("nodes replaced, new IP")

    def set_fault(self, member: Member, fault: str | None) -> None:
        """Make ``member``'s monitor misbehave (None heals it)."""
        assert member.farm is not None
        member.farm.truncated = fault == TRUNCATED_GZIP
        member.farm.set_fault(member.name, None if fault == TRUNCATED_GZIP else fault)
        member.fault = fault
        self.note(member, f"fault {fault}" if fault else "healed")
        if fault is not None:
            self._count(f"monitor fault: {fault}")

    def churn_workload(self) -> None:
        """A workload pod comes or goes (the pod watch's everyday traffic)."""
        if self._workload and (len(self._workload) > 40 or self._rng.random() < 0.5):
            namespace, name = self._workload.pop(self._rng.randrange(len(self._workload)))
            self.kube.delete_pod(namespace, name)
        else:
            name = f"job-{uuid.uuid4().hex[:10]}"
            namespace = self._rng.choice(("team-a", "team-b", "research"))
            node = self._rng.choice(self.members).name
            self.kube.add_pod(make_pod(name, namespace, node, ip=None))
            self._workload.append((namespace, name))
        self._count("workload pods added or deleted")
