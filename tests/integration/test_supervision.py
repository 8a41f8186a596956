"""Every long-lived task is supervised: a fault is logged, counted and outlived; a dead task fails /healthz.

Faults are injected into the real loops of both programs (a scrape's store
update, Kubernetes discovery, store expiry, the agent's sampling and push
drain); the supervisor itself is checked on its own with a quick policy.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from helpers import eventually, holds, reserved_port, running_collector
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.exposition import generate_latest

import agent.app
from agent.app import Sampler, serve
from agent.push import Pusher
from agent.settings import AgentSettings
from collector.app import SCRAPER, STORE, TASKS, build_app
from collector.exposition.parse import parse
from collector.normalise.batch import Batch, Source
from collector.normalise.labelsets import series_key
from collector.normalise.schema import SourceKind
from collector.settings import CollectorSettings
from collector.sources.files import FileDiscovery
from collector.sources.kubernetes import KubernetesDiscovery
from collector.store.latest import Store
from core.payload import Payload
from core.tasks import RestartPolicy, Supervisor, owned
from simulator.cluster import build_cluster
from simulator.monitors import MonitorFarm
from simulator.run import write_targets
from testing.fakekube import FakeKube, make_pod

QUICK = RestartPolicy(first=0.001, cap=0.01, limit=3)


class Injected(RuntimeError):
    """The fault a test injects; nothing else raises it."""


def broken_once(original: Callable[..., Any]) -> Callable[..., Any]:
    """``original``, except that its first call raises :class:`Injected`."""
    calls = 0

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise Injected(f"fault injected into {original.__qualname__}")
        return original(*args, **kwargs)

    return wrapper


def crashes(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    """The records that logged ``name`` crashing with an injected fault, traceback attached."""
    return [
        r
        for r in caplog.records
        if r.name == "core.tasks"
        and r.getMessage().startswith(f"task {name!r} crashed; restarting in")
        and r.exc_info is not None
        and _injected(r.exc_info[1])
    ]


def _injected(error: BaseException | None) -> bool:
    """Whether ``error`` is the injected fault, or a task group's failure holding it."""
    if isinstance(error, BaseExceptionGroup):
        return error.subgroup(Injected) is not None
    return isinstance(error, Injected)


async def text(http: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    async with http.get(url) as resp:
        return resp.status, await resp.text()


async def restarts(http: aiohttp.ClientSession, url: str, family: str) -> dict[str, float]:
    """Restarts by kind of task, read from the ``/metrics`` page at ``url``."""
    _, page = await text(http, url)
    return {
        dict(s.labels)["task"]: s.value
        for s in parse(page.encode()).samples
        if s.name == family + "_total"
    }


COLLECTOR_RESTARTS = "hami_usage_collector_task_restarts"
AGENT_RESTARTS = "hami_agent_task_restarts"


# The supervisor on its own.


async def test_a_crashed_task_is_restarted_counted_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    counted: list[str] = []
    runs = 0
    forever = asyncio.Event()

    async def flaky() -> None:
        nonlocal runs
        runs += 1
        if runs <= 2:
            raise Injected("boom")
        await forever.wait()

    async with Supervisor(counted.append, QUICK) as tasks:
        task = tasks.start("flaky loop", flaky, name="flaky loop #1")
        await eventually(lambda: holds(runs == 3), 5, "the third run")
        assert (task.restarts, counted, tasks.dead()) == (2, ["flaky loop", "flaky loop"], [])
        assert len(crashes(caplog, "flaky loop #1")) == 2


async def test_a_stopped_task_and_what_it_ran_are_freed_without_a_cycle_collection() -> None:
    # collector.memory.heap keeps full collections rare: a stopped task must not wait for one
    started = asyncio.Event()

    class Loop:
        async def run(self) -> None:
            started.set()
            await asyncio.Event().wait()

    loop = Loop()
    watched = weakref.ref(loop)
    tasks = Supervisor()
    task = tasks.start("loop", loop.run)
    del loop
    await eventually(lambda: holds(started.is_set()), 5, "the task started")
    collecting = gc.isenabled()
    gc.disable()
    try:
        await tasks.stop([task])
        del task  # the caller's handle was the last reference outside the cycle
        assert watched() is None
    finally:
        if collecting:
            gc.enable()


async def test_a_task_that_keeps_crashing_is_dead_past_the_limit(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def hopeless() -> None:
        raise Injected("always")

    async with Supervisor(policy=QUICK) as tasks:
        task = tasks.start("hopeless", hopeless)
        await eventually(lambda: holds(task.dead), 5, "given up")
        assert tasks.dead() == ["hopeless"]
        assert task.restarts == QUICK.limit
        assert any("crashed; giving up" in r.getMessage() for r in caplog.records)


async def test_a_healthy_run_starts_the_count_again() -> None:
    runs = 0
    forever = asyncio.Event()

    async def crashes_after_a_healthy_run() -> None:
        nonlocal runs
        runs += 1
        if runs <= 5:
            raise Injected("after running long enough")
        await forever.wait()

    every_run_healthy = RestartPolicy(first=0.001, cap=0.01, healthy=0.0, limit=1)
    async with Supervisor(policy=every_run_healthy) as tasks:
        task = tasks.start("steady", crashes_after_a_healthy_run)
        await eventually(lambda: holds(runs == 6), 5, "the sixth run")
        assert (task.restarts, task.dead) == (5, False), "five crashes, never two in a row"


async def test_a_task_that_must_not_end_and_ends_is_dead_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def quits() -> None:
        return

    async with Supervisor(policy=QUICK) as tasks:
        task = tasks.start("quitter", quits)
        await eventually(lambda: holds(task.dead), 5, "reported dead")
        assert task.restarts == 0
        assert any("should run until shutdown" in r.getMessage() for r in caplog.records)


async def test_a_task_started_once_ends_when_done_and_comes_back_only_after_a_crash(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runs = 0
    done = asyncio.Event()

    async def job() -> None:
        nonlocal runs
        runs += 1
        if runs == 1:
            raise Injected("boom")
        done.set()

    async with Supervisor(policy=QUICK) as tasks:
        task = tasks.start("warm-up", job, once=True)
        await eventually(lambda: holds(done.is_set()), 5, "the job done")
        await task.wait()
        assert (runs, task.restarts, task.dead, tasks.dead()) == (2, 1, False, [])
        assert not any("should run until shutdown" in r.getMessage() for r in caplog.records)


def test_the_backoff_doubles_with_jitter_up_to_its_cap() -> None:
    policy = RestartPolicy()
    for crashes_in_a_row in range(1, 16):
        ceiling = min(30.0, 0.1 * 2 ** (crashes_in_a_row - 1))
        delays = {policy.delay(crashes_in_a_row) for _ in range(20)}
        assert all(ceiling / 2 <= d <= ceiling for d in delays), crashes_in_a_row
        assert len(delays) > 1, "jittered"


async def test_the_owner_cancels_and_awaits_in_reverse_order() -> None:
    stopped: list[str] = []
    started = 0

    def loop(name: str) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            nonlocal started
            started += 1
            try:
                await asyncio.Event().wait()
            finally:
                stopped.append(name)

        return run

    tasks = Supervisor()
    first, second, third = (tasks.start(name, loop(name)) for name in ("first", "second", "third"))
    await eventually(lambda: holds(started == 3), 5, "all started")
    await tasks.stop([second])
    assert stopped == ["second"], "stopping one leaves the others running"
    await tasks.close()
    assert stopped == ["second", "third", "first"]
    assert (first.dead, third.dead, tasks.dead()) == (False, False, [])


async def test_owned_logs_a_crash_at_once_and_does_not_restart(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def crash() -> None:
        raise Injected("once")

    async with owned(crash(), "one-off") as task:
        await eventually(lambda: holds(task.dead), 5, "reported dead")
    (record,) = [r for r in caplog.records if "'one-off' crashed; giving up" in r.getMessage()]
    assert record.exc_info is not None


# The collector's loops.


@asynccontextmanager
async def scraped_cluster(
    tmp_path: Path, **settings: object
) -> AsyncIterator[tuple[str, str, web.Application, aiohttp.ClientSession]]:
    """One simulated monitor in a targets file; yields its node, the collector's URL and app."""
    (node,) = build_cluster(1, seed=3, flavours=("hami",))
    targets = tmp_path / "targets.json"
    async with MonitorFarm([node]) as farm:
        write_targets(targets, farm)
        async with (
            running_collector(kubernetes=False, targets_file=targets, **settings) as (base, app),
            aiohttp.ClientSession() as http,
        ):
            yield node.name, base, app, http


async def test_a_store_put_that_raises_once_does_not_end_the_scrape_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(Store, "put", broken_once(Store.put))
    async with scraped_cluster(tmp_path, interval=0.2, timeout=0.15) as (node, base, app, http):

        async def counted() -> bool:
            return (await restarts(http, f"{base}/metrics", COLLECTOR_RESTARTS)) == {"scrape": 1}

        await eventually(counted, 10, "the scrape loop's restart on /metrics")
        await eventually(lambda: holds(app[STORE].view(node) is not None), 10, "the next scrape")
        (target,) = app[SCRAPER].targets
        assert len(crashes(caplog, f"scrape {target.name}")) == 1
        assert await text(http, f"{base}/healthz") == (200, "ok\n")


async def test_store_expiry_goes_on_after_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(Store, "expire", broken_once(Store.expire))
    async with (
        running_collector(kubernetes=False, stale_after=0.4) as (base, app),
        aiohttp.ClientSession() as http,
    ):

        async def counted() -> bool:
            found = await restarts(http, f"{base}/metrics", COLLECTOR_RESTARTS)
            return found == {"store expiry": 1}

        await eventually(counted, 10, "the expiry loop's restart on /metrics")
        assert len(crashes(caplog, "store expiry")) == 1
        source = Source("gone", "gone:9394", "node-x", SourceKind.HAMI, 0)
        batch = Batch({series_key("hami_vgpu_count", [("device_uuid", "GPU-x")]): 1.0}, samples=1)
        app[STORE].put(source, batch, time.monotonic() - 60)
        await eventually(
            lambda: holds(app[STORE].view("node-x") is None), 10, "the stale source gone"
        )


async def test_kubernetes_discovery_comes_back_after_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr(KubernetesDiscovery, "targets", broken_once(KubernetesDiscovery.targets))
    async with FakeKube() as fake:
        fake.write_kubeconfig(tmp_path / "kubeconfig")
        labels = {"app.kubernetes.io/component": "hami-device-plugin"}
        # the monitor's port only has to exist: discovery, not scraping, is under test
        fake.add_pod(
            make_pod("monitor-0", node="worker-0", ip="127.0.0.1", labels=labels,
                     container_ports={"metrics": 9})
        )  # fmt: skip
        settings = {
            "kubeconfig": tmp_path / "kubeconfig",
            "flavours": "hami",
            "interval": 0.5,
            "timeout": 0.4,
        }
        async with (
            running_collector(kubernetes=True, **settings) as (base, app),
            aiohttp.ClientSession() as http,
        ):

            async def counted() -> bool:
                found = await restarts(http, f"{base}/metrics", COLLECTOR_RESTARTS)
                return found.get("kubernetes discovery") == 1

            await eventually(counted, 10, "discovery's restart on /metrics")
            await eventually(lambda: holds(len(app[SCRAPER].targets) == 1), 10, "the pod's target")
            assert len(crashes(caplog, "kubernetes discovery")) == 1
            assert (await text(http, f"{base}/healthz"))[0] == 200


async def test_a_task_that_cannot_come_back_fails_healthz_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def ends_at_once(self: FileDiscovery) -> None:
        return

    monkeypatch.setattr(FileDiscovery, "run", ends_at_once)
    targets = tmp_path / "targets.json"
    targets.write_text("[]")
    async with (
        running_collector(kubernetes=False, targets_file=targets) as (base, app),
        aiohttp.ClientSession() as http,
    ):

        async def dead() -> bool:
            return (await text(http, f"{base}/healthz"))[0] == 503

        await eventually(dead, 10, "/healthz 503")
        assert await text(http, f"{base}/healthz") == (503, "dead: targets file\n")
        assert await text(http, f"{base}/readyz") == (503, "not ready: dead: targets file\n")
        assert app[TASKS].dead() == ["targets file"]


# The agent's loops.


class Receiver:
    """A push endpoint that accepts everything and records the sequences."""

    def __init__(self) -> None:
        self.received: list[int] = []

    async def handle(self, request: web.Request) -> web.Response:
        self.received.append(Payload.model_validate_json(await request.read()).sequence)
        return web.Response(status=204)


@asynccontextmanager
async def running_agent(tmp_path: Path) -> AsyncIterator[tuple[str, Receiver]]:
    """The agent (``serve``) pushing to a :class:`Receiver`; yields the agent's URL and the receiver."""
    receiver = Receiver()
    collector = web.Application()
    collector.router.add_post("/api/v1/push", receiver.handle)
    stop = asyncio.Event()
    with reserved_port() as port:
        async with TestServer(collector, host="127.0.0.1") as server:
            settings = AgentSettings(
                collector=f"http://127.0.0.1:{server.port}",
                node="node-a",
                roots=[str(tmp_path)],
                nvml=False,
                interval=0.05,
                listen=f"127.0.0.1:{port}",
                push_timeout=2.0,
            )
            running = asyncio.create_task(serve(settings, stop))
            base = f"http://127.0.0.1:{port}"

            async def answering() -> bool:
                try:
                    await text(http, f"{base}/healthz")
                except aiohttp.ClientConnectionError:
                    return running.done()
                return True

            try:
                async with aiohttp.ClientSession() as http:
                    await eventually(answering, 10, "the agent's health server")
                yield base, receiver
            finally:
                stop.set()
                await running


async def test_the_agent_sampling_loop_comes_back_after_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(Sampler, "snapshot", broken_once(Sampler.snapshot))
    async with running_agent(tmp_path) as (base, receiver), aiohttp.ClientSession() as http:

        async def counted() -> bool:
            return (await restarts(http, f"{base}/metrics", AGENT_RESTARTS)) == {"sample": 1}

        await eventually(counted, 10, "the sampling loop's restart on the agent's /metrics")
        await eventually(
            lambda: holds(len(receiver.received) >= 3), 10, "snapshots pushed after it"
        )
        assert len(crashes(caplog, "sample")) == 1
        assert await text(http, f"{base}/healthz") == (200, "ok\n")


async def test_the_agent_push_drain_comes_back_after_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(Pusher, "_post", broken_once(Pusher._post))
    async with running_agent(tmp_path) as (base, receiver), aiohttp.ClientSession() as http:

        async def counted() -> bool:
            return (await restarts(http, f"{base}/metrics", AGENT_RESTARTS)) == {"push": 1}

        await eventually(counted, 10, "the push drain's restart on the agent's /metrics")
        await eventually(lambda: holds(len(receiver.received) >= 3), 10, "pushes after it")
        assert receiver.received[0] == 0, "the snapshot in flight at the crash is sent again"
        assert receiver.received == sorted(receiver.received)
        # One task per destination, named for it: the receiver's one address.
        names = {str(r.args[0]) for r in caplog.records if isinstance(r.args, tuple) and r.args}
        (name,) = {n for n in names if n.startswith("push http")}
        assert name.endswith("(127.0.0.1)")
        assert len(crashes(caplog, name)) == 1


async def test_the_agent_healthz_names_a_dead_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def ends_at_once(*args: object) -> None:
        return

    monkeypatch.setattr(agent.app, "sample", ends_at_once)
    async with running_agent(tmp_path) as (base, _), aiohttp.ClientSession() as http:

        async def dead() -> bool:
            return (await text(http, f"{base}/healthz"))[0] == 503

        await eventually(dead, 10, "the agent's /healthz 503")
        assert await text(http, f"{base}/healthz") == (503, "dead: sample\n")


# No process-wide state.


async def test_two_collector_apps_in_one_process_share_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    one, other = (
        build_app(CollectorSettings(kubernetes=False, listen="127.0.0.1:0", stale_after=0.4))
        for _ in range(2)
    )
    monkeypatch.setattr(one[STORE], "expire", broken_once(one[STORE].expire))
    async with (
        TestServer(one, host="127.0.0.1") as first,
        TestServer(other, host="127.0.0.1") as second,
        aiohttp.ClientSession() as http,
    ):
        assert first.port != second.port
        one_url, other_url = str(first.make_url("/metrics")), str(second.make_url("/metrics"))

        async def one_restarted() -> bool:
            return (await restarts(http, one_url, COLLECTOR_RESTARTS)) == {"store expiry": 1}

        await eventually(one_restarted, 10, "the first app's expiry restart")
        assert await restarts(http, other_url, COLLECTOR_RESTARTS) == {}, "not on the other's"
        source = Source("a", "a:9394", "node-a", SourceKind.HAMI, 0)
        batch = Batch({series_key("hami_vgpu_count", [("device_uuid", "GPU-a")]): 2.0}, samples=1)
        one[STORE].put(source, batch, time.monotonic())
        one_page, other_page = (await text(http, one_url))[1], (await text(http, other_url))[1]
        assert 'hami_vgpu_count{device_uuid="GPU-a",node="node-a"} 2.0\n' in one_page
        assert "node-a" not in other_page
        assert (list(one[STORE].nodes()), list(other[STORE].nodes())) == (["node-a"], [])
        assert "_created" not in one_page + other_page
        assert one[TASKS] is not other[TASKS]

    elsewhere = CollectorRegistry()
    Counter("another_library_events", "Another library's counter.", registry=elsewhere).inc()
    assert b"another_library_events_created" in generate_latest(elsewhere), (
        "our apps leave other registries' _created series alone"
    )
