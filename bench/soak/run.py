"""``make soak`` (``python -m bench.soak.run``): the collector for an hour of churn and faults.

The real collector (``hami-collector serve`` in a child process) discovers
the simulated monitors (:mod:`bench.soak.world`) through a fake Kubernetes
API server via a kubeconfig, scrapes them on their own loopback addresses,
and takes pushes from real agents in another child process
(:mod:`bench.soak.agents`) with a shared token. Meanwhile, on a schedule:
workload pods come and go every few seconds, monitor pods are replaced
(DaemonSet rollouts, same IP), nodes leave and join (half the time on the
leaver's pod IP), a monitor at a time hangs, drips, answers 500, HTML, a
truncated gzip or an oversized body; the API server cuts its watch streams,
answers 410 Gone, and is down for a minute (``SOAK_MINUTES`` seconds at
least 10: scaled with the run); the agents are killed and restarted; the
collector is killed under pushes and restarted; pushes that must be refused
are sent throughout.

Every few seconds ``/metrics`` is read and judged by :mod:`bench.soak.checks`
against the simulator's oracle; the collector's RSS, file descriptors and
asyncio tasks are sampled. After the collector's restart the agents' backlog
replay is checked through ``/prometheus``: no pushed interval lost. The
report goes to ``bench/results/soak.md`` (:mod:`bench.soak.report`); the
exit status is 1 if any check failed. Every loop is bounded by the run's
deadline; every process started is stopped on every way out.
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

from bench.kit.processes import loopback_socket
from bench.soak.checks import OWN, NodeState, judge, largest_gap, parse_page
from bench.soak.plan import Plan, Sample
from bench.soak.probes import history_stamps, refused_pushes
from bench.soak.procs import Child, wait_ready
from bench.soak.report import write_report
from bench.soak.world import FAILING_FAULTS, Member, World, soak_nodes
from testing.oracle import expected_canonical


class Soak:
    """One run: the world, the children, the schedule, and what the checks found."""

    def __init__(self, plan: Plan, tmp: Path) -> None:
        self.plan = plan
        self.tmp = tmp
        start = math.floor(time.time())
        nodes = soak_nodes(
            plan.monitors + plan.spares, plan.agents, plan.seed, start, plan.cards, plan.allocations
        )
        probe = loopback_socket()
        self.port = probe.getsockname()[1]
        probe.close()
        monitor_probe = loopback_socket()
        monitor_port = monitor_probe.getsockname()[1]
        monitor_probe.close()
        self.world = World(nodes, plan.agents, plan.monitors, monitor_port, plan.seed)
        self.base = f"http://127.0.0.1:{self.port}"
        self.token = os.urandom(16).hex()
        (tmp / "token").write_text(self.token)
        self.collector = Child(self._collector_args(monitor_port), tmp / "collector.log")
        self.agents = Child(
            [
                "bench.soak.agents",
                self.base,
                str(tmp / "token"),
                str(tmp / "agents"),
                str(plan.monitors + plan.spares),
                str(plan.agents),
                str(plan.seed),
                str(start),
                str(plan.cards),
                str(plan.allocations),
                str(plan.agent_interval),
            ],
            tmp / "agents.log",
        )
        self.rng = random.Random(plan.seed)
        self.t0 = time.monotonic()
        self.quiet_until = 0.0
        self.node_changes = True
        self.problems: list[tuple[float, str]] = []
        self.reads = 0
        self.samples: list[Sample] = []
        self.mismatched: set[str] = set()
        self.judged: Counter[str] = Counter()
        self.errors: dict[str, float] = {}
        self.refused: Counter[tuple[str, int]] = Counter()
        self.replays: list[dict[str, Any]] = []
        self.pending: list[tuple[float, str, Callable[[], Awaitable[None]]]] = []
        self.kill_wall = 0.0
        self.agents_ready = False
        self.ready_at = 0.0
        self.agent_kills: list[float] = []
        self.session: aiohttp.ClientSession | None = None

    def _collector_args(self, monitor_port: int) -> list[str]:
        p = self.plan
        kubeconfig = self.tmp / "kubeconfig"
        return [
            "collector",
            "serve",
            *("--listen", f"127.0.0.1:{self.port}", "--kubeconfig", str(kubeconfig)),
            *("--interval", str(p.interval), "--timeout", str(p.timeout)),
            *("--push-auth", "token", "--push-token-file", str(self.tmp / "token")),
            *("--body-limit", str(4 << 20), "--kube-watch-timeout", "30"),
            *("--history-retention", str(p.history_retention)),
            *("--hami-port", str(monitor_port), "--volcano-port", str(monitor_port)),
            *("--kai-port", str(monitor_port)),
        ]

    def now(self) -> float:
        return time.monotonic() - self.t0

    def problem(self, text: str) -> None:
        """Record a problem, with the last changes of the nodes it names."""
        now = time.monotonic()
        for node in sorted(set(re.findall(r"gpu-node-\d+", text))):
            changes = self.world.history(node, now)
            text += f" [{node}: " + "; ".join(f"{t - self.t0:.0f} s {w}" for t, w in changes) + "]"
        self.problems.append((self.now(), text))

    def later(self, delay: float, what: str, action: Callable[[], Awaitable[None]]) -> None:
        self.pending.append((time.monotonic() + delay, what, action))

    # -- the run -------------------------------------------------------------------------

    async def run(self) -> dict[str, Any]:
        """Start everything, run the schedule to the deadline, stop everything; the results."""
        async with aiohttp.ClientSession() as session:
            self.session = session
            await self.world.start()
            try:
                self.world.kube.write_kubeconfig(self.tmp / "kubeconfig")
                self.collector.start()
                await wait_ready(session, self.base, self.collector, 60)
                self.agents.start()
                self.t0 = time.monotonic()
                self.quiet_until = time.monotonic() + self.plan.grace
                await self._schedule()
                for _, what, action in self.pending:
                    if what == "replay check":  # due after the end of a short run: still checked
                        await action()
            finally:
                self.agents.stop()
                self.collector.stop()
                await self.world.stop()
        return self._results()

    async def _schedule(self) -> None:
        p = self.plan
        end = self.t0 + p.seconds
        next_at = {k: self.t0 + v for k, v in p.every.items()}
        once = sorted(p.once())
        while time.monotonic() < end:
            now = time.monotonic()
            for item in [x for x in self.pending if x[0] <= now]:
                self.pending.remove(item)
                await item[2]()
            while once and self.t0 + once[0][0] <= now:
                await self._one_off(once.pop(0)[1])
            for kind, at in next_at.items():
                if at <= now:
                    next_at[kind] = now + p.every[kind]
                    await self._periodic(kind)
            await asyncio.sleep(0.25)

    async def _periodic(self, kind: str) -> None:
        w = self.world
        if kind == "check":
            await self.check()
        elif kind == "refused":
            await self.send_refused()
        elif kind == "workload":
            w.churn_workload()
        elif not self.node_changes:
            return
        elif kind == "rollout":
            live = [m for m in w.monitors if m.farm is not None and m.fault is None]
            if live:
                w.rollout(self.rng.choice(live))
        elif kind == "replace":
            await w.replace_node()
        elif kind == "fault":
            self._fault()

    def _fault(self) -> None:
        healthy = [m for m in self.world.monitors if m.farm is not None and m.fault is None]
        if not healthy:
            return
        member, fault = self.rng.choice(healthy), self.rng.choice(FAILING_FAULTS)
        self.world.set_fault(member, fault)
        farm = member.farm

        async def heal() -> None:
            if member.farm is farm and member.fault == fault:
                self.world.set_fault(member, None)

        self.later(20.0, "heal", heal)

    async def _one_off(self, what: str) -> None:
        kube = self.world.kube
        self.world.events[what] = self.world.events.get(what, 0) + 1
        if what == "cut watches":
            kube.set_down(True)
            kube.set_down(False)
        elif what == "410 gone":
            kube.compact()
            kube.expire_watches()
        elif what == "kill agents":
            self.agent_kills.append(time.time())
            self.agents.kill()
            self.agents_ready = False
            self._agents_changed("agents killed")

            async def restart_agents() -> None:
                self.agents.start()
                self._agents_changed("agents restarted")

            self.later(8.0, "restart agents", restart_agents)
        elif what == "api down":
            await self._api_down()
        elif what == "kill collector":
            self.kill_wall = time.time()
            self.collector.kill()
            self.quiet_until = math.inf
            self.later(5.0, "restart collector", self._restart_collector)
        self.quiet_until = max(self.quiet_until, time.monotonic() + self.plan.grace)

    def _agents_changed(self, what: str, at: float | None = None) -> None:
        for member in self.world.agents:
            self.world.note(member, what, at)

    def _agents_starting(self) -> None:
        """Note when restarted agents are up: from then on their nodes must show."""
        starting = self.agents.running and not self.agents_ready
        if starting and self.agents.said("agents running") >= self.agents.starts:
            self.agents_ready = True
            self._agents_changed("agents pushing")

    async def _api_down(self) -> None:
        kube = self.world.kube
        watches = kube.open_watches
        kube.set_down(True)
        self.node_changes = False

        async def up() -> None:
            kube.set_down(False)
            try:
                await kube.wait_for_watches(watches, timeout=120.0)
            except TimeoutError:
                self.problem(
                    f"watches not back 120 s after the API server came back "
                    f"({kube.open_watches} of {watches})"
                )
            self.node_changes = True
            self.quiet_until = max(self.quiet_until, time.monotonic() + self.plan.grace)

        self.later(self.plan.outage, "api up", up)

    async def _restart_collector(self) -> None:
        assert self.session is not None
        self.collector.start()
        await wait_ready(self.session, self.base, self.collector, 60)
        self.ready_at = time.monotonic()
        self.quiet_until = self.ready_at + self.plan.grace
        # the agents retry with a backoff of up to agent_backoff s: judged once it has passed
        self._agents_changed(
            "collector back; agents backing off", self.ready_at + self.plan.agent_backoff
        )
        self.later(max(20.0, 8 * self.plan.agent_interval), "replay check", self.check_replay)

    # -- checks --------------------------------------------------------------------------

    def _state(self, member: Member) -> NodeState:
        if member.agent:
            pods = frozenset(a.pod for a in member.node.allocations)
            live = self.agents.running and self.agents_ready
            return NodeState(member.name, live, member.changed, pods=pods)
        expected = None
        if member.live:
            wall = time.time()
            member.node.step(wall)
            expected = frozenset(expected_canonical(member.node, wall))
        return NodeState(member.name, member.live, member.changed, expected)

    async def check(self) -> None:
        """Read ``/metrics``, judge it, and sample the collector's resources."""
        if not self.collector.running or self.session is None:
            return
        try:
            timeout = aiohttp.ClientTimeout(total=15)
            async with self.session.get(self.base + "/metrics", timeout=timeout) as r:
                text = await r.text()
        except (aiohttp.ClientError, TimeoutError) as exc:
            if time.monotonic() > self.quiet_until:
                self.problem(f"/metrics read failed: {exc!r}")
            return
        page = parse_page(text)
        self._agents_starting()
        states = [self._state(m) for m in self.world.members]
        p = self.plan
        verdict = judge(
            page,
            states,
            time.monotonic(),
            self.quiet_until,
            p.grace,
            p.stale_after,
            self.mismatched,
        )
        self.mismatched = verdict.mismatched
        self.judged.update(verdict.passed)
        errors = {
            f"{labels.get('reason')}": value
            for labels, value in page.own.get(OWN + "scrape_errors_total", [])
        }
        new = {k: v - self.errors.get(k, 0) for k, v in errors.items() if v > self.errors.get(k, 0)}
        self.errors = errors
        for text_ in verdict.problems:
            self.problem(text_ + (f" (scrape errors since the last read: {new})" if new else ""))
        self.reads += 1
        rss, fds = self.collector.resources()
        tasks = page.value(OWN + "asyncio_tasks", math.nan)
        targets = page.value(OWN + "targets")
        self.samples.append(Sample(self.now(), self.collector.pid, rss, fds, tasks, targets))
        self.last_page = page

    async def send_refused(self) -> None:
        """Pushes that must be refused: wrong token, invalid payload, broken gzip, too large."""
        assert self.session is not None
        if not self.collector.running:
            return
        big = self.refused.total() % 24 == 0
        for kind, status in await refused_pushes(self.session, self.base, self.token, big):
            self.refused[(kind, status)] += 1
            if 200 <= status < 300:
                self.problem(f"refused push ({kind}) answered {status}")

    async def check_replay(self) -> None:
        """Every agent node's history has no gap across the collector's restart."""
        assert self.session is not None
        allowed = 2 * self.plan.agent_interval + 1.0
        for member in self.world.agents:
            gap, stamps = math.inf, 0
            for _ in range(20):  # bounded: the agents replay with backoff
                gap, stamps = await self._gap(member.name)
                if gap <= allowed:
                    break
                await asyncio.sleep(2.0)
            closed = time.monotonic() - self.ready_at
            self.replays.append(
                {"node": member.name, "gap_s": gap, "points": stamps}
                | {"allowed_s": allowed, "closed_after_s": closed}
            )
            if gap > allowed:
                self.problem(
                    f"backlog replay: {member.name} history has a {gap:.1f} s gap "
                    "across the collector restart"
                )

    async def _gap(self, node: str) -> tuple[float, int]:
        """The longest stretch without a point from the kill to now (or the agents' next kill)."""
        assert self.session is not None
        end = time.time()
        stamps = await history_stamps(self.session, self.base, node, end - self.kill_wall + 30, end)
        start = self.kill_wall + self.plan.agent_interval
        later_kills = [t for t in self.agent_kills if t > self.kill_wall]
        stop = min([end, *later_kills]) - 3 * self.plan.agent_interval
        return largest_gap(stamps, start, stop), len(stamps)

    def _results(self) -> dict[str, Any]:
        log = self.collector.log.read_text(errors="replace") if self.collector.log.exists() else ""
        return {
            "plan": self.plan,
            "reads": self.reads,
            "judged": dict(self.judged),
            "problems": self.problems,
            "samples": self.samples,
            "refused": self.refused,
            "replays": self.replays,
            "events": dict(self.world.events),
            "collector_starts": self.collector.starts,
            "agent_starts": self.agents.starts,
            "tracebacks": log.count("Traceback (most recent call last)"),
            "error_lines": sum(" ERROR " in line for line in log.splitlines()),
            "last_page": getattr(self, "last_page", None),
        }


def main(minutes: float) -> None:
    """Run the soak for ``minutes``, write the report, and exit 1 when a check failed."""
    plan = Plan(minutes)
    with tempfile.TemporaryDirectory(prefix="hami-soak-") as tmp:
        results = asyncio.run(Soak(plan, Path(tmp)).run())
    passed = write_report(results)
    sys.exit(0 if passed else 1)
