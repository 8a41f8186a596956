"""The agent's loop: sample regions and cards every interval, hand the snapshot to the pusher.

Sampling runs on its own schedule and never waits for the network; the pusher
owns the backlog. Both loops run under a :class:`~core.tasks.Supervisor`,
which restarts them when they crash and counts each restart. The standard
library's HTTP server answers /healthz (503 naming any dead loop) and the
agent's /metrics from a thread (no async HTTP library: see agent/push.py).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest

from agent import attribution, region_scan
from agent.attribution import EnergyLedger, Source, Utilization
from agent.cgroups import Owner, ProcOwners
from agent.destinations import Fanout, PushOptions
from agent.hamicore import DeviceUsage
from agent.kubelet import PodResourcesReader
from agent.nvml import NvmlSampler, ProcessSample
from agent.push import token_reader
from agent.region_scan import RegionKey
from agent.settings import AgentSettings
from agent.slots import SlotChecker
from agent.xid import XidWatcher
from core.content import TEXT_CONTENT_TYPE
from core.payload import Assignment, ContainerUsage, Device, Payload, Region
from core.registry import WithoutCreated
from core.settings import parse_listen
from core.tasks import Supervisor

log = logging.getLogger(__name__)


Picked = Mapping[tuple[RegionKey, int], tuple[float, Source]]
"""(region key, device index) -> the device's utilisation and its source (:class:`Utilization`)."""


def regions(scan: region_scan.Scan, utilization: Picked | None = None) -> list[Region]:
    """The payload's regions from one scan of the region folders.

    ``utilization`` replaces each device's SM utilisation and names its source;
    without it the region's own is sent and its source left unsaid.
    """
    out = []
    for key, usage in scan.regions.items():
        devices = [
            _device(d, None if utilization is None else utilization.get((key, d.index)))
            for d in usage.devices
        ]
        if key[0] == "pod":
            out.append(
                Region(
                    pod_uid=key[1],
                    container=key[2],
                    devices=devices,
                    last_kernel_time=usage.last_kernel_time,
                )
            )
        else:
            out.append(
                Region(claim_uid=key[1], devices=devices, last_kernel_time=usage.last_kernel_time)
            )
    return out


def _device(d: DeviceUsage, picked: tuple[float, Source] | None) -> Device:
    sm, source = (d.sm_utilization, None) if picked is None else picked
    return Device(
        index=d.index,
        uuid=d.uuid,
        memory_used=d.memory_used,
        memory_limit=d.memory_limit,
        context=d.context,
        module=d.module,
        buffer=d.buffer,
        sm_utilization=sm,
        utilization_source=source,
        stale_memory=d.stale_memory,
    )


def _no_owners(key: RegionKey) -> frozenset[Owner]:
    return frozenset()


KUBELET_REFRESH = 60.0
"""Seconds after which the kubelet's assignments are asked again though no process changed."""


class Sampler:
    """Takes snapshots: one scan of the region folders, one NVML sample, one kubelet read.

    With ``owners``, NVML's processes are attributed to pods' containers through
    their cgroups and the cards' energy is split between them; with ``kubelet``,
    the snapshot says which card each container holds; with ``xid``, cards carry
    the XID events counted since the agent started; with ``slots``, each
    HAMi-core slot's process is checked and a gone one's memory left out
    (without, every slot HAMi's monitor counts is counted, as unchecked). With
    both ``owners`` and ``slots``, a region without utilisation of its own
    takes NVML's for its container's processes (:class:`Utilization`).
    """

    def __init__(
        self,
        node: str,
        roots: Sequence[str],
        grace: float | None,
        nvml: NvmlSampler | None,
        owners: ProcOwners | None = None,
        kubelet: PodResourcesReader | None = None,
        xid: XidWatcher | None = None,
        *,
        slots: SlotChecker | None = None,
    ) -> None:
        self.node = node
        self.instance = uuid.uuid4().hex[:16]
        self.sequence = 0
        self._roots = [Path(r) for r in roots]
        self._grace = grace
        self._nvml = nvml
        self._owners = owners
        self._kubelet = kubelet
        self._xid = xid
        self._slots = slots
        self._ledger = EnergyLedger()
        self._utilization = Utilization()
        self._samples: list[ProcessSample] = []
        self._listed: tuple[frozenset[int], float, list[Assignment] | None] | None = None
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.region_count = Gauge(
            "hami_agent_regions", "Regions read in the latest snapshot.", registry=r
        )
        self.region_errors = Counter(
            "hami_agent_region_errors", "Region files refused, by reason.", ["reason"], registry=r
        )
        self.cards = Gauge(
            "hami_agent_cards", "Cards read through NVML in the latest snapshot.", registry=r
        )
        self.nvml_up = Gauge("hami_agent_nvml_available", "1 if NVML is available.", registry=r)
        self.processes = Gauge(
            "hami_agent_processes", "NVML's processes in the latest snapshot.", registry=r
        )
        self.unreadable = Counter(
            "hami_agent_processes_unreadable",
            "Processes skipped because their cgroup could not be read (another PID namespace, gone).",
            registry=r,
        )
        self.stale_slots = Gauge(
            "hami_agent_stale_region_slots",
            "HAMi-core slots whose process is gone, left out (their memory too), in the latest"
            " snapshot.",
            registry=r,
        )
        self.unchecked_slots = Gauge(
            "hami_agent_unchecked_region_slots",
            "HAMi-core slots counted without a check of their process (no host /proc, or it"
            " could not tell), in the latest snapshot.",
            registry=r,
        )
        self.clamped = Counter(
            "hami_agent_utilization_clamped",
            "Container utilisations above 100 sent as 100.",
            registry=r,
        )
        self.pod_resources_up = Gauge(
            "hami_agent_pod_resources_up",
            "1 if the kubelet's PodResources API answered the latest snapshot's List.",
            registry=r,
        )
        self.duration = Gauge(
            "hami_agent_snapshot_seconds", "How long the latest snapshot took.", registry=r
        )
        taken = Gauge(
            "hami_agent_snapshots", "Snapshots taken since the agent started.", registry=r
        )
        taken.set_function(lambda: self.sequence)

    def snapshot(self) -> Payload:
        """Read everything once; errors are counted, never raised.

        NVML's processes are read before the regions: a slot's host PID that
        NVML lists is not gone, whatever the host's /proc shows.
        """
        started = time.perf_counter()
        nvml = self._nvml
        cards = nvml.sample(self._xid.counts() if self._xid else None) if nvml else []
        clamped = self._utilization.clamped
        processes: list[ContainerUsage] | None = None  # None: no attribution
        self._samples = []
        if self._owners is not None and nvml is not None and nvml.available:
            processes = self._attribute(nvml, self._owners)
        scan, owners = self._scan()
        picked = self._utilization.regions(scan.regions, owners, processes or [])
        if processes is not None:
            cards, processes = self._ledger.split(cards, processes)
        assignments = self._assignments(frozenset(p.pid for p in self._samples))
        payload = Payload(
            node=self.node,
            agent=self.instance,
            sequence=self.sequence,
            time=time.time(),
            nvml=nvml is not None and nvml.available,
            cards=cards,
            regions=regions(scan, picked),
            processes=processes or [],
            assignments=assignments,
        )
        self.sequence += 1
        self.clamped.inc(self._utilization.clamped - clamped)
        self.stale_slots.set(sum(r.stale for r in scan.regions.values()))
        self.unchecked_slots.set(sum(r.unchecked for r in scan.regions.values()))
        self.region_count.set(len(payload.regions))
        self.cards.set(len(cards))
        self.nvml_up.set(1 if payload.nvml else 0)
        self.duration.set(time.perf_counter() - started)
        return payload

    def _assignments(self, pids: frozenset[int]) -> list[Assignment] | None:
        """The kubelet's assignments, asked again only when NVML's processes changed (a pod
        came or went), after a failed answer, or every :data:`KUBELET_REFRESH` seconds (a
        pod holding a card but running nothing on it yet); a List of 64 pods costs ~10 ms."""
        if self._kubelet is None:
            return None
        now = time.monotonic()
        listed = self._listed
        if (
            listed is None
            or listed[0] != pids
            or listed[2] is None
            or now - listed[1] >= KUBELET_REFRESH
        ):
            listed = self._listed = (pids, now, self._kubelet.read())
            self.pod_resources_up.set(1 if listed[2] is not None else 0)
        return listed[2]

    def close(self) -> None:
        """Close the kubelet channel, if one was opened."""
        if self._kubelet is not None:
            self._kubelet.close()

    def _attribute(self, nvml: NvmlSampler, owners: ProcOwners) -> list[ContainerUsage]:
        """Each container's processes on each device, utilisation clamped to 100."""
        samples = self._samples = nvml.processes()
        pids = {sample.pid for sample in samples}
        known = owners.owners(pids)
        self.processes.set(len(pids))
        self.unreadable.inc(len(pids) - len(known))
        return self._utilization.usages(attribution.usage(samples, known))

    def _scan(self) -> tuple[region_scan.Scan, Callable[[RegionKey], frozenset[Owner]]]:
        """One scan of the region folders, each slot judged when ``slots`` was given, and the
        containers each region's live slots belong to."""
        tick = None if self._slots is None else self._slots.tick({s.pid for s in self._samples})
        judges = None if tick is None else tick.judge
        scan = region_scan.scan(self._roots, grace=self._grace, judges=judges)
        for failure in scan.failures:
            self.region_errors.labels(failure.error.reason).inc()
        if tick is None:
            return scan, _no_owners
        tick.finish()
        return scan, tick.owners


def start_nvml(enabled: bool, module: object = None) -> NvmlSampler | None:
    """Start NVML if asked; without a driver the agent still pushes region data."""
    if not enabled:
        return None
    sampler = NvmlSampler(module)
    if not sampler.start():
        log.warning("NVML unavailable (%s): pushing region data only", sampler.reason)
    return sampler


def supervisor(registry: CollectorRegistry) -> Supervisor:
    """A supervisor whose restarts ``registry`` counts in ``hami_agent_task_restarts_total{task}``.

    The label names the kind of loop (``push``, one per destination; ``resolve``;
    ``sample``): the agent has no others.
    """
    restarts = Counter(
        "hami_agent_task_restarts",
        "Restarts of the agent's crashed loops, by loop.",
        ["task"],
        registry=registry,
    )
    return Supervisor(lambda task: restarts.labels(task).inc())


def serve_health(
    host: str, port: int, registry: CollectorRegistry, dead: Callable[[], list[str]]
) -> ThreadingHTTPServer:
    """Serve ``/healthz`` and the agent's ``/metrics`` from a thread of their own.

    ``/healthz`` answers 503 naming the loops ``dead()`` gives, if any.
    """

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status = 200
            if self.path == "/healthz":
                names = dead()
                text = "ok\n"
                if names:
                    status, text = 503, f"dead: {', '.join(names)}\n"
                body, kind = text.encode(), "text/plain"
            elif self.path == "/metrics":
                body, kind = generate_latest(WithoutCreated(registry)), TEXT_CONTENT_TYPE
            else:
                self.send_error(404)
                return
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """No access log: probes come every few seconds."""

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="health", daemon=True).start()
    return server


async def run(settings: AgentSettings, nvml_module: object = None) -> None:
    """Sample and push until SIGTERM or SIGINT; ``nvml_module`` replaces pynvml (demo, tests)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signal_number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signal_number, stop.set)
    await serve(settings, stop, nvml_module)


class StartupError(Exception):
    """The agent cannot start as configured; the message names the setting."""


async def serve(settings: AgentSettings, stop: asyncio.Event, nvml_module: object = None) -> None:
    """Sample and push until ``stop`` is set."""
    nvml = start_nvml(settings.nvml, nvml_module)
    xid = XidWatcher(nvml.module) if nvml is not None and nvml.available else None
    sampler = sampler_of(settings, nvml, xid)
    token = token_reader(str(settings.token_file) if settings.token_file else None)
    options = PushOptions(
        token, settings.backlog_seconds, settings.backlog_bytes, settings.push_timeout
    )
    tasks = supervisor(sampler.registry)
    fanout = Fanout(settings.collector_urls(), options, tasks)
    sampler.registry.register(PushMetrics(fanout))
    try:
        server = serve_health(*parse_listen(settings.listen), sampler.registry, tasks.dead)
    except OSError as exc:
        raise StartupError(
            f"cannot listen on {settings.listen} (--listen / HAMI_AGENT_LISTEN): "
            f"{exc.strerror or exc}"
        ) from None
    log.info("listening on http://%s:%d", *server.server_address[:2])
    try:
        async with tasks:
            await fanout.update()  # the first snapshot finds its destinations
            tasks.start("resolve", fanout.run)
            tasks.start("sample", functools.partial(sample, sampler, fanout, settings.interval))
            if xid is not None:
                tasks.start("xid events", functools.partial(watch_xid, xid))
            await stop.wait()
    finally:
        server.shutdown()
        server.server_close()
        sampler.close()
        if nvml is not None:
            nvml.close()


def sampler_of(
    settings: AgentSettings, nvml: NvmlSampler | None, xid: XidWatcher | None = None
) -> Sampler:
    """The sampler the settings ask for: attribution and the kubelet read where NVML runs, the
    HAMi-core slots checked in the host's /proc wherever attribution is asked for."""
    owners = kubelet = None
    if nvml is not None and nvml.available:
        if settings.processes:
            owners = ProcOwners(settings.host_proc)
        kubelet = PodResourcesReader(str(settings.pod_resources_socket), nvml.device_uuid)
    slots = SlotChecker(settings.host_proc) if settings.processes else None
    return Sampler(
        settings.node, settings.roots, settings.grace, nvml, owners, kubelet, xid, slots=slots
    )


async def watch_xid(watcher: XidWatcher) -> None:
    """Wait on NVML's XID events in a thread until cancelled.

    The thread's waits are bounded (one second each), so a cancel stops it
    within a second; NVML has no way to wake a waiting thread early.
    """
    stop = threading.Event()
    try:
        await asyncio.shield(asyncio.to_thread(watcher.run, stop))
    finally:
        stop.set()
    if watcher.reason is not None:  # a driver without events: nothing to watch, nothing wrong
        await asyncio.Event().wait()


async def sample(sampler: Sampler, fanout: Fanout, interval: float) -> None:
    """Take a snapshot every ``interval`` seconds and queue it; never waits on the network."""
    next_at = time.monotonic()
    while True:
        payload = await asyncio.to_thread(sampler.snapshot)
        fanout.submit(payload)
        next_at += interval
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))


_PUSH_FAMILIES = (
    ("hami_agent_backlog_snapshots", "Snapshots waiting to be accepted.", lambda p: len(p.backlog)),
    ("hami_agent_backlog_bytes", "Bytes of gzipped snapshots waiting.", lambda p: p.backlog.bytes),
    ("hami_agent_pushes_accepted", "Snapshots the collector accepted.", lambda p: p.stats.accepted),
    (
        "hami_agent_pushes_refused",
        "Snapshots the collector refused for good (400, 413).",
        lambda p: p.stats.refused,
    ),
    (
        "hami_agent_push_failures",
        "Push attempts that failed and will be retried.",
        lambda p: p.stats.failed,
    ),
    (
        "hami_agent_backlog_dropped",
        "Snapshots dropped from a full backlog.",
        lambda p: p.backlog.dropped,
    ),
)


class PushMetrics:
    """The push families, one series per destination (``collector`` URL, ``address``)."""

    def __init__(self, fanout: Fanout) -> None:
        self._fanout = fanout

    def collect(self) -> Iterator[Metric]:
        """Read every destination's backlog and counters at scrape time."""
        pushers = list(self._fanout.pushers.items())  # the health thread reads; copy at once
        for name, help_text, read in _PUSH_FAMILIES:
            family = GaugeMetricFamily(name, help_text, labels=["collector", "address"])
            for endpoint, pusher in pushers:
                family.add_metric([endpoint.url, endpoint.address or ""], read(pusher))
            yield family
