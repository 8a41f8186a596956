"""Kubernetes discovery, through kubernetes_asyncio and a real HTTP fake apiserver.

Three levels: the pod -> target rules (:func:`pod_target`); :class:`KubernetesDiscovery`
on its own with a recording sink, driven through list/watch, 410s, bookmarks, outages and
stalls; and the whole collector app, whose pods point at simulated monitors on loopback.
Every wait is bounded, every server is stopped, and nothing leaves loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from helpers import eventually, holds, running_collector, serving
from kubernetes_asyncio.client import ApiClient, Configuration, CoreV1Api

from collector.app import SCRAPER, STORE
from collector.exposition.parse import parse
from collector.normalise.schema import Flavour
from collector.sources.kubernetes import Backoff, KubernetesDiscovery, Timeouts, pod_target
from collector.sources.targets import Target
from simulator.cluster import build_cluster
from simulator.monitors import MonitorFarm
from testing.fakekube import JSON, FakeKube, make_pod
from testing.oracle import expected_canonical

SEL = "app.kubernetes.io/component=hami-device-plugin"  # the collector's default
HAMI = {"app.kubernetes.io/component": "hami-device-plugin"}
KAI_SEL = "app.kubernetes.io/component=kai-vgpu-monitor"
KAI = {"app.kubernetes.io/component": "kai-vgpu-monitor"}
BACKOFF = (0.05, 0.2)
SeriesId = tuple[str, frozenset[tuple[str, str]]]


def hami_pod(name: str, node: str, ip: str | None, **kw: Any) -> JSON:
    return make_pod(name, node=node, ip=ip, labels=HAMI, **kw)


def key(pod: JSON) -> str:
    return f"pod/{pod['metadata']['uid']}"


def same(pod: JSON, **changes: Any) -> JSON:
    """The pod rebuilt with ``changes`` but the same name, namespace, node, IP, labels and UID."""
    meta, spec, status = pod["metadata"], pod["spec"], pod["status"]
    args: dict[str, Any] = {
        "namespace": meta["namespace"],
        "node": spec["nodeName"],
        "ip": status.get("podIP"),
        "labels": meta["labels"],
        "uid": meta["uid"],
        "containers": spec["containers"],
    }
    return make_pod(meta["name"], **(args | changes))


def is_watch(query: Mapping[str, str]) -> bool:
    return query.get("watch", "").lower() == "true"


async def fresh_watch(fake: FakeKube, watchers: int = 1) -> None:
    """Wait for the next watch to begin, so it has its whole timeoutSeconds still to run."""
    started = fake.watches_started
    await fake.wait_for_watches(started + 1, total=True)
    await fake.wait_for_watches(watchers)


def backoff_ceilings(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """From now on, the ceiling of every backoff wait, in order (they are random below it)."""
    ceilings: list[float] = []
    wait = Backoff.wait

    async def noted(self: Backoff) -> None:
        ceilings.append(min(self.cap, self.base * 2**self.attempt))
        await wait(self)

    monkeypatch.setattr(Backoff, "wait", noted)
    return ceilings


def lists(fake: FakeKube) -> list[tuple[str, dict[str, str]]]:
    return [(path, q) for path, q in fake.requests if not is_watch(q)]


def watches(fake: FakeKube) -> list[tuple[str, dict[str, str]]]:
    return [(path, q) for path, q in fake.requests if is_watch(q)]


# -- level 1: which pods are targets -----------------------------------------------------


def test_a_running_ready_pod_is_a_target() -> None:
    pod = hami_pod("hami-x", "node-a", "10.1.2.3")
    assert pod["status"]["conditions"][1] == {"type": "Ready", "status": "True"}  # Go string
    assert pod_target(pod, Flavour.HAMI, 9394) == Target(
        key(pod), "http://10.1.2.3:9394/metrics", "node-a", Flavour.HAMI, "kube-system/hami-x"
    )


@pytest.mark.parametrize(
    ("ports", "containers", "expected"),
    [
        ({}, None, 9394),
        ({"http": 8080}, None, 9394),
        ({"http": 8080, "metrics": 9400}, None, 9400),
        (
            None,
            [{"name": "a", "ports": None}, {"name": "b", "ports": [{"containerPort": 1}]}],
            9394,
        ),
        (
            None,
            [
                {"name": "plugin", "ports": [{"name": "grpc", "containerPort": 9000}]},
                {"name": "monitor", "ports": [{"name": "metrics", "containerPort": 9395}]},
            ],
            9395,
        ),
    ],
    ids=["no-ports", "unnamed-metrics", "named-metrics", "null-ports", "sidecar"],
)
def test_a_port_named_metrics_wins_over_the_default(
    ports: dict[str, int] | None, containers: list[JSON] | None, expected: int
) -> None:
    pod = hami_pod("p", "n", "10.0.0.1", container_ports=ports, containers=containers)
    target = pod_target(pod, Flavour.HAMI, 9394)
    assert target is not None
    assert target.url == f"http://10.0.0.1:{expected}/metrics"


def test_an_ipv6_pod_ip_is_bracketed() -> None:
    pod = hami_pod("p", "n", "fd00:10:244::5", container_ports={"metrics": 9394})
    target = pod_target(pod, Flavour.KAI, 1)
    assert target is not None
    assert target.url == "http://[fd00:10:244::5]:9394/metrics"
    assert target.flavour == "kai"


@pytest.mark.parametrize(
    "pod",
    [
        hami_pod("p", "n", "10.0.0.1", ready=False),
        hami_pod("p", "n", "10.0.0.1", phase="Pending"),
        hami_pod("p", "n", "10.0.0.1", phase="Succeeded"),
        hami_pod("p", "n", "10.0.0.1", phase="Failed"),
        hami_pod("p", "n", None),
        hami_pod("p", "", "10.0.0.1"),
        hami_pod("p", "n", None, phase="Pending", ready=False) | {"spec": {}},
    ],
    ids=["not-ready", "pending", "succeeded", "failed", "no-ip", "no-node", "unscheduled"],
)
def test_pods_that_cannot_be_scraped_are_not_targets(pod: JSON) -> None:
    assert pod_target(pod, Flavour.HAMI, 9394) is None


@pytest.mark.parametrize(
    ("status", "ready"),
    [
        ("True", True),
        ("true", True),
        (True, True),
        ("False", False),
        ("Unknown", False),
        (None, False),
    ],
)
def test_ready_condition_as_go_string_or_bool(status: object, ready: bool) -> None:
    pod = hami_pod("p", "n", "10.0.0.1")
    pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]
    pod["status"]["conditions"].append({"type": "Ready", "status": status})
    assert (pod_target(pod, Flavour.HAMI, 9394) is not None) is ready
    pod["status"]["conditions"] = None  # as an older server may send
    assert pod_target(pod, Flavour.HAMI, 9394) is None


# -- level 2: KubernetesDiscovery against FakeKube ------------------------------------------


class Recorder:
    """A sink that keeps every complete target set discovery sends."""

    def __init__(self) -> None:
        self.calls: list[list[Target]] = []

    async def __call__(self, targets: list[Target]) -> None:
        self.calls.append(list(targets))

    def last(self) -> dict[str, Target]:
        return {t.key: t for t in self.calls[-1]} if self.calls else {}

    def nodes(self) -> dict[str, str]:
        return {k: t.node for k, t in self.last().items()}

    def check(self) -> None:
        """No set ever held one key twice."""
        for call in self.calls:
            assert len({t.key for t in call}) == len(call), call

    async def settles(self, want: Mapping[str, str], what: str, timeout: float = 5.0) -> None:
        """Wait until the latest set is exactly ``want`` (key -> node)."""

        async def check() -> bool:
            return bool(self.calls) and self.nodes() == dict(want)

        await eventually(check, timeout, what)
        self.check()


@contextlib.asynccontextmanager
async def discovering(
    v1: Any,
    fake: FakeKube | None,
    sink: Recorder,
    *,
    namespaces: Sequence[str] = (),
    selectors: Mapping[Flavour, tuple[str, int]] | None = None,
    watch_timeout: int = 2,
    stall: float = 15.0,
    backoff: tuple[float, float] = BACKOFF,
) -> AsyncIterator[KubernetesDiscovery]:
    """Run a discovery for the block; afterwards it must have kept running and hung up."""
    disc = KubernetesDiscovery(
        v1,
        selectors or {Flavour.HAMI: (SEL, 9394)},
        list(namespaces),
        sink,
        Timeouts(request=5, watch=watch_timeout, stall=stall),
        backoff=backoff,
    )
    task = asyncio.create_task(disc.run(), name="discovery under test")
    try:
        yield disc
        if task.done():
            raise AssertionError(f"discovery stopped by itself: {task.exception()!r}")
    finally:
        task.cancel()
        await asyncio.wait({task}, timeout=5)
    assert task.cancelled(), "discovery did not stop when cancelled"
    if fake is not None:
        await fake.wait_for_watches(0)  # the client hung up on its watches


async def test_list_then_watch_events_update_the_targets(fake: FakeKube, v1: Any) -> None:
    a = fake.add_pod(hami_pod("hami-a", "node-a", "10.0.0.1"))
    b = fake.add_pod(hami_pod("hami-b", "node-b", "10.0.0.2", namespace="gpu"))
    fake.add_pod(make_pod("other", node="node-a", ip="10.0.0.9", labels={"app": "other"}))
    rec = Recorder()
    async with discovering(v1, fake, rec) as disc:
        await rec.settles({key(a): "node-a", key(b): "node-b"}, "initial list")
        assert disc.synced
        assert rec.last()[key(b)] == Target(
            key(b), "http://10.0.0.2:9394/metrics", "node-b", Flavour.HAMI, "gpu/hami-b"
        )
        await fake.wait_for_watches(1)

        c = fake.add_pod(hami_pod("hami-c", "node-c", "10.0.0.3"))
        await rec.settles({key(a): "node-a", key(b): "node-b", key(c): "node-c"}, "ADDED")
        fake.modify_pod(same(a, ready=False))
        await rec.settles({key(b): "node-b", key(c): "node-c"}, "NotReady leaves")
        fake.modify_pod(same(a))
        await rec.settles({key(a): "node-a", key(b): "node-b", key(c): "node-c"}, "Ready again")
        fake.modify_pod(same(b, phase="Failed", ready=False))
        await rec.settles({key(a): "node-a", key(c): "node-c"}, "Failed leaves")
        fake.delete_pod("gpu", "hami-b")
        fake.modify_pod(same(c, labels={"app": "moved"}))  # out of the selector: DELETED
        await rec.settles({key(a): "node-a"}, "DELETED")
        assert {t.key for t in disc.targets()} == {key(a)}
    assert len(lists(fake)) == 1, "everything after the first list came through the watch"


async def test_a_rollout_keeps_both_pods_of_a_node(fake: FakeKube, v1: Any) -> None:
    old = fake.add_pod(hami_pod("hami-old", "node-a", "10.0.0.1"))
    rec = Recorder()
    async with discovering(v1, fake, rec):
        await rec.settles({key(old): "node-a"}, "initial list")
        new = fake.add_pod(hami_pod("hami-new", "node-a", "10.0.0.7"))
        await rec.settles({key(old): "node-a", key(new): "node-a"}, "two pods, one node")
        urls = {t.url for t in rec.last().values()}
        assert urls == {"http://10.0.0.1:9394/metrics", "http://10.0.0.7:9394/metrics"}
        fake.delete_pod("kube-system", "hami-old")
        await rec.settles({key(new): "node-a"}, "old pod gone")


async def test_a_reused_pod_ip_and_name_is_a_new_target(fake: FakeKube, v1: Any) -> None:
    a = fake.add_pod(hami_pod("hami-x", "node-a", "10.0.0.5"))
    rec = Recorder()
    async with discovering(v1, fake, rec):
        await rec.settles({key(a): "node-a"}, "initial list")
        fake.delete_pod("kube-system", "hami-x")
        b = fake.add_pod(hami_pod("hami-x", "node-b", "10.0.0.5"))  # same name and IP
        assert key(a) != key(b)
        await rec.settles({key(b): "node-b"}, "new pod replaces the old one")
        assert rec.last()[key(b)].url == "http://10.0.0.5:9394/metrics"


@pytest.mark.parametrize("as_http_status", [False, True], ids=["error-event", "http-status"])
async def test_410_relists_without_duplicates_or_lost_deletes(
    fake: FakeKube, v1: Any, as_http_status: bool
) -> None:
    fake.gone_as_http_status = as_http_status
    a = fake.add_pod(hami_pod("hami-a", "node-a", "10.0.0.1"))
    b = fake.add_pod(hami_pod("hami-b", "node-b", "10.0.0.2"))
    rec = Recorder()
    async with discovering(v1, fake, rec):
        await rec.settles({key(a): "node-a", key(b): "node-b"}, "initial list")
        await fake.wait_for_watches(1)
        listed = len(lists(fake))
        fake.set_down(True)  # the watch is cut, and misses what follows
        fake.delete_pod("kube-system", "hami-b")
        c = fake.add_pod(hami_pod("hami-c", "node-c", "10.0.0.3"))
        fake.compact()  # so resuming from the version the watcher holds is 410 Gone
        await fake.wait_for_watches(0)
        fake.set_down(False)
        await rec.settles({key(a): "node-a", key(c): "node-c"}, "relisted")
        assert len(lists(fake)) == listed + 1, "exactly one relist"
        await fake.wait_for_watches(1)  # and watching again from the new list
        d = fake.add_pod(hami_pod("hami-d", "node-d", "10.0.0.4"))
        await rec.settles(
            {key(a): "node-a", key(c): "node-c", key(d): "node-d"}, "watch after relist"
        )
    assert all(rec.calls), "never an empty target set"


async def test_410_mid_stream_relists(fake: FakeKube, v1: Any) -> None:
    a = fake.add_pod(hami_pod("hami-a", "node-a", "10.0.0.1"))
    rec = Recorder()
    async with discovering(v1, fake, rec):
        await rec.settles({key(a): "node-a"}, "initial list")
        await fresh_watch(fake)
        listed, sent = len(lists(fake)), len(rec.calls)
        fake.expire_watches()  # ERROR 410 on the open watch

        async def relisted() -> bool:
            return len(lists(fake)) == listed + 1 and len(rec.calls) > sent

        await eventually(relisted, 5, "relist after ERROR 410")
        assert rec.nodes() == {key(a): "node-a"}
        await fake.wait_for_watches(1)
        b = fake.add_pod(hami_pod("hami-b", "node-b", "10.0.0.2"))
        await rec.settles({key(a): "node-a", key(b): "node-b"}, "watching again")


async def test_bookmarks_advance_the_version_without_changing_targets(
    fake: FakeKube, v1: Any
) -> None:
    a = fake.add_pod(hami_pod("hami-a", "node-a", "10.0.0.1"))
    rec = Recorder()
    async with discovering(v1, fake, rec):
        await rec.settles({key(a): "node-a"}, "initial list")
        await fresh_watch(fake)
        sent, listed, started = len(rec.calls), len(lists(fake)), fake.watches_started
        fake.add_pod(make_pod("unrelated", labels={"app": "x"}))  # moves the version on, unseen
        fake.send_bookmarks()
        bookmark = fake.resource_version
        fake.compact()  # only a watcher that took the bookmark can resume without a 410
        fake.set_down(True)  # cut the watch now (after the bookmark) instead of at its timeout;
        fake.set_down(False)  # no request can arrive in between: nothing awaited
        await fake.wait_for_watches(started + 1, total=True)
        await fake.wait_for_watches(1)
        _, resumed = watches(fake)[-1]
        assert resumed["resourceVersion"] == bookmark
        assert len(lists(fake)) == listed, "resumed from the bookmark, no relist"
        assert len(rec.calls) == sent, "a bookmark changes no target"
    assert {q.get("allowWatchBookmarks") for _, q in watches(fake)} == {"True"}


async def test_api_down_keeps_the_last_targets(
    fake: FakeKube, v1: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = fake.add_pod(hami_pod("hami-a", "node-a", "10.0.0.1"))
    b = fake.add_pod(hami_pod("hami-b", "node-b", "10.0.0.2"))
    ceilings = backoff_ceilings(monkeypatch)
    rec = Recorder()
    async with discovering(v1, fake, rec, backoff=(0.2, 0.4)) as disc:
        await rec.settles({key(a): "node-a", key(b): "node-b"}, "initial list")
        await fake.wait_for_watches(1)
        sent, listed = len(rec.calls), len(lists(fake))
        fake.set_down(True)
        asked = len(fake.requests)

        async def retrying() -> bool:
            return len(fake.requests) >= asked + 3

        await eventually(retrying, 5, "retries while the API is down")
        fake.delete_pod("kube-system", "hami-a")
        fake.modify_pod(same(b, ready=False))
        c = fake.add_pod(hami_pod("hami-c", "node-c", "10.0.0.3"))
        window, waited = len(fake.requests), len(ceilings)

        async def retried_since() -> bool:
            return len(fake.requests) >= window + 3

        await eventually(retried_since, 5, "retries after the changes, the API still down")
        retries, waits = len(fake.requests) - window, ceilings[waited:]
        assert len(waits) >= retries - 1, "retries back off, they do not spin"
        assert min(waits) > 0
        assert waits == sorted(waits), "the waits grow (to their cap), they never shrink"
        assert len(rec.calls) == sent, "nothing sent while the API is away"
        assert {t.key for t in disc.targets()} == {key(a), key(b)}
        fake.set_down(False)
        await rec.settles({key(c): "node-c"}, "changes made while down")
        assert len(lists(fake)) == listed, "resumed the watch from its version, no relist"
    assert all(rec.calls), "never an empty target set"


async def test_a_quiet_watch_that_lives_out_its_timeout_is_renewed_without_backoff(
    fake: FakeKube, v1: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found by the soak: watches without events backed off, more after each one, so a
    # cluster whose monitor pods rarely change was watched less and less (up to 30 s blind).
    a = fake.add_pod(hami_pod("hami-a", "node-a", "10.0.0.1"))
    ceilings = backoff_ceilings(monkeypatch)
    rec = Recorder()
    async with discovering(v1, fake, rec, watch_timeout=1, backoff=(5.0, 30.0)):
        await rec.settles({key(a): "node-a"}, "initial list")
        started = fake.watches_started
        await fake.wait_for_watches(started + 3, timeout=10, total=True)
        assert ceilings == [], "no wait between watches that each ran their whole timeout"
        b = fake.add_pod(hami_pod("hami-b", "node-b", "10.0.0.2"))
        await rec.settles({key(a): "node-a", key(b): "node-b"}, "a change after quiet watches")


async def test_not_synced_and_silent_until_the_first_list(fake: FakeKube, v1: Any) -> None:
    a = fake.add_pod(hami_pod("hami-a", "node-a", "10.0.0.1"))
    fake.set_down(True)
    rec = Recorder()
    async with discovering(v1, fake, rec) as disc:

        async def retried() -> bool:
            return len(fake.requests) >= 3

        await eventually(retried, 5, "list retried")
        assert not disc.synced
        assert rec.calls == []
        fake.set_down(False)
        await rec.settles({key(a): "node-a"}, "first list")
        assert disc.synced


async def test_a_stalled_watch_is_cut_and_resumed(fake: FakeKube, v1: Any) -> None:
    a = fake.add_pod(hami_pod("hami-a", "node-a", "10.0.0.1"))
    rec = Recorder()
    async with discovering(v1, fake, rec, watch_timeout=1, stall=2.0):
        await rec.settles({key(a): "node-a"}, "initial list")
        # Stall a watch that has just begun, so its own timeoutSeconds cannot end it first.
        await fresh_watch(fake)
        started = fake.watches_started
        fake.stall_watches(True)
        _, stalled = watches(fake)[-1]
        listed = len(lists(fake))
        b = fake.add_pod(hami_pod("hami-b", "node-b", "10.0.0.2"))  # held by the stall
        await fake.wait_for_watches(started + 1, timeout=10, total=True)
        assert key(b) not in rec.nodes(), "nothing came through the stalled watch"
        _, resumed = watches(fake)[-1]
        assert resumed["resourceVersion"] == stalled["resourceVersion"], "resumed, not restarted"
        assert len(lists(fake)) == listed
        fake.stall_watches(False)
        await rec.settles({key(a): "node-a", key(b): "node-b"}, "held event after the stall")


async def test_namespaces_selectors_and_flavours(fake: FakeKube, v1: Any) -> None:
    h1 = fake.add_pod(hami_pod("h1", "node-a", "10.0.0.1", namespace="gpu"))
    h2 = fake.add_pod(
        hami_pod("h2", "node-b", "10.0.0.2", namespace="ops", container_ports={"metrics": 9401})
    )
    k1 = fake.add_pod(make_pod("k1", namespace="gpu", node="node-c", ip="10.0.0.3", labels=KAI))
    fake.add_pod(hami_pod("h3", "node-d", "10.0.0.4"))  # kube-system: not watched
    fake.add_pod(make_pod("k2", namespace="misc", node="node-e", ip="10.0.0.5", labels=KAI))
    rec = Recorder()
    selectors = {Flavour.HAMI: (SEL, 9394), Flavour.KAI: (KAI_SEL, 9500)}
    async with discovering(v1, fake, rec, namespaces=["gpu", "ops"], selectors=selectors) as d:
        await rec.settles({key(h1): "node-a", key(h2): "node-b", key(k1): "node-c"}, "listed")
        await eventually(lambda: holds(d.synced), 5, "every watcher listed")
        got = {t.key: (t.flavour, t.url) for t in rec.last().values()}
        assert got == {
            key(h1): ("hami", "http://10.0.0.1:9394/metrics"),
            key(h2): ("hami", "http://10.0.0.2:9401/metrics"),
            key(k1): ("kai", "http://10.0.0.3:9500/metrics"),
        }
        await fake.wait_for_watches(4)
        k3 = fake.add_pod(make_pod("k3", namespace="ops", node="node-f", ip="10.0.0.6", labels=KAI))
        fake.add_pod(make_pod("k4", namespace="misc", node="node-g", ip="10.0.0.7", labels=KAI))
        want = {key(h1): "node-a", key(h2): "node-b", key(k1): "node-c", key(k3): "node-f"}
        await rec.settles(want, "watched per namespace")
    paths = {"/api/v1/namespaces/gpu/pods", "/api/v1/namespaces/ops/pods"}
    assert {path for path, _ in fake.requests} == paths, "never the all-namespaces endpoint"
    listed = sorted((path, q["labelSelector"]) for path, q in lists(fake))
    assert listed == sorted((p, s) for p in paths for s in (SEL, KAI_SEL)), "one list each"
    for _, q in watches(fake):
        assert q["labelSelector"] in (SEL, KAI_SEL)
        assert q["timeoutSeconds"] == "2"
        assert q["resourceVersion"].isdigit()


async def test_all_namespaces_by_default(fake: FakeKube, v1: Any) -> None:
    a = fake.add_pod(hami_pod("a", "node-a", "10.0.0.1", namespace="x"))
    b = fake.add_pod(hami_pod("b", "node-b", "10.0.0.2", namespace="y"))
    rec = Recorder()
    async with discovering(v1, fake, rec):
        await rec.settles({key(a): "node-a", key(b): "node-b"}, "listed")
    assert {path for path, _ in fake.requests} == {"/api/v1/pods"}
    assert {q["labelSelector"] for _, q in fake.requests} == {SEL}


async def test_a_proxy_error_page_on_the_watch_is_retried() -> None:
    """An HTML 502 from a load balancer in front of the apiserver is an outage, not a crash."""
    pod = hami_pod("a", "node-a", "10.0.0.1")
    bad_gateways = 2
    good_watches = 0

    async def pods(request: web.Request) -> web.StreamResponse:
        nonlocal bad_gateways, good_watches
        if not is_watch(request.query):
            return web.json_response({"metadata": {"resourceVersion": "5"}, "items": [pod]})
        if bad_gateways:
            bad_gateways -= 1
            return web.Response(
                status=502, text="<html>502 Bad Gateway</html>\n", content_type="text/html"
            )
        good_watches += 1
        # Held open, then ended empty: the apiserver's timeoutSeconds, played by this fake.
        await asyncio.sleep(0.5)
        return web.Response(text="")

    app = web.Application()
    app.router.add_get("/api/v1/pods", pods)
    async with serving(app) as url, ApiClient(Configuration(host=url)) as api:
        rec = Recorder()
        async with discovering(CoreV1Api(api), None, rec):
            # List, two bad gateways, then good watches: a second one began after the first.
            await eventually(lambda: holds(good_watches >= 2), 10, "watching again after 502s")
        # (leaving the block fails first if the discovery task has died)
        assert bad_gateways == 0, "the watch was retried"
        assert rec.nodes() == {key(pod): "node-a"}


# -- level 3: the collector app end to end ----------------------------------------------------


def by_node(body: bytes) -> dict[str, set[SeriesId]]:
    """The data series of a /metrics page by node label; each series must appear once."""
    samples = [s for s in parse(body).samples if not s.name.startswith("hami_usage_collector_")]
    ids = [(s.name, frozenset(s.labels)) for s in samples]
    assert len(ids) == len(set(ids)), "a series appears twice"
    out: dict[str, set[SeriesId]] = {}
    for s, series in zip(samples, ids, strict=True):
        out.setdefault(dict(s.labels)["node"], set()).add(series)
    return out


def relabelled(series: set[SeriesId], node: str) -> set[SeriesId]:
    return {
        (name, frozenset((k, node if k == "node" else v) for k, v in labels))
        for name, labels in series
    }


async def test_end_to_end_node_labels_come_from_the_pods(fake: FakeKube, kubeconfig: Path) -> None:
    simulated = build_cluster(3, seed=7, cards=2, allocations_per_node=4, flavours=("hami",))
    async with MonitorFarm(simulated, port=0) as farm:
        k8s_node: dict[str, str] = {}  # the farm's node name -> the pod's spec.nodeName
        pods: dict[str, JSON] = {}
        for i, node in enumerate(simulated):
            host, port = farm.address(node.name).rsplit(":", 1)
            k8s_node[node.name] = f"worker-{i}"
            pod = hami_pod(
                f"hami-device-plugin-{i}",
                f"worker-{i}",
                host,
                container_ports={"metrics": int(port)},
            )
            pods[node.name] = fake.add_pod(pod)
        settings: dict[str, object] = {
            "kubernetes": True,
            "kubeconfig": kubeconfig,
            "interval": 0.5,
            "timeout": 0.4,
            "stale_after": 60,  # nothing goes stale here: a node that leaves was deleted
            "flavours": "hami",
        }
        fake.set_down(True)  # not ready until discovery has listed
        async with (
            running_collector(**settings) as (base, app),
            aiohttp.ClientSession() as http,
        ):

            async def ready() -> bool:
                async with http.get(f"{base}/readyz") as resp:
                    return resp.status == 200

            async def page() -> dict[str, set[SeriesId]]:
                async with http.get(f"{base}/metrics") as resp:
                    assert resp.status == 200
                    return by_node(await resp.read())

            async def shows(nodes: Mapping[str, str]) -> bool:
                """/metrics holds exactly these farm nodes' series, under their pods' nodes."""
                now = time.time()
                want = {
                    k8s: relabelled(set(expected_canonical(farm.node(name), now)), k8s)
                    for name, k8s in nodes.items()
                }
                return await page() == want

            async def tried() -> bool:
                return len(fake.requests) > 0

            await eventually(tried, 5, "the app asked the API")
            async with http.get(f"{base}/readyz") as resp:
                assert resp.status == 503
                assert "discovery has not synced" in await resp.text()
            fake.set_down(False)
            await eventually(ready, 10, "/readyz 200 after sync and first scrapes")
            await eventually(lambda: shows(k8s_node), 10, "every node once, labelled by its pod")

            # Rollout: a second Ready pod for worker-0 (the same monitor, as with hostNetwork).
            first = simulated[0].name
            host, port = farm.address(first).rsplit(":", 1)
            fake.add_pod(
                hami_pod(
                    "hami-device-plugin-0b",
                    "worker-0",
                    host,
                    container_ports={"metrics": int(port)},
                )
            )

            async def two_sources() -> bool:
                view = app[STORE].view("worker-0")
                return view is not None and len(view.sources) == 2

            await eventually(two_sources, 5, "both pods of worker-0 scraped")
            assert len(app[SCRAPER].targets) == 4
            await eventually(lambda: shows(k8s_node), 3, "still each series once, same nodes")

            # A deleted pod's node goes at once, though its monitor still answers.
            last = simulated[2].name
            fake.delete_pod("kube-system", pods[last]["metadata"]["name"])
            remaining = {n: k for n, k in k8s_node.items() if n != last}

            async def gone() -> bool:
                return set(await page()) == set(remaining.values())

            # At once, not by going stale: its monitor still answers, and stale_after is 60 s.
            await eventually(gone, 10, "deleted pod's node leaves /metrics")
            await eventually(lambda: shows(remaining), 3, "the other nodes as they were")
            assert await ready()
        await fake.wait_for_watches(0)  # the app hung up when it stopped
        # Discovery's selected watch, the one cluster-wide pod/claim/slice watch (allocations)
        # and the one of Nodes (capacity).
        assert {(path, q["labelSelector"]) for path, q in fake.requests} == {
            ("/api/v1/pods", SEL),
            ("/api/v1/pods", ""),
            ("/api/v1/nodes", ""),
            ("/apis/resource.k8s.io/v1/resourceclaims", ""),
            ("/apis/resource.k8s.io/v1/resourceslices", ""),
        }
