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
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest

from agent import region_scan
from agent.destinations import Fanout, PushOptions
from agent.nvml import NvmlSampler
from agent.push import token_reader
from agent.settings import AgentSettings
from core.content import TEXT_CONTENT_TYPE
from core.payload import Device, Payload, Region
from core.registry import WithoutCreated
from core.settings import parse_listen
from core.tasks import Supervisor

log = logging.getLogger(__name__)


def regions(scan: region_scan.Scan) -> list[Region]:
    """The payload's regions from one scan of the region folders."""
    out = []
    for key, usage in scan.regions.items():
        devices = [
            Device(
                index=d.index,
                uuid=d.uuid,
                memory_used=d.memory_used,
                memory_limit=d.memory_limit,
                context=d.context,
                module=d.module,
                buffer=d.buffer,
                sm_utilization=d.sm_utilization,
            )
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


class Sampler:
    """Takes snapshots: one scan of the region folders and one NVML sample each."""

    def __init__(
        self, node: str, roots: Sequence[str], grace: float | None, nvml: NvmlSampler | None
    ) -> None:
        self.node = node
        self.instance = uuid.uuid4().hex[:16]
        self.sequence = 0
        self._roots = [Path(r) for r in roots]
        self._grace = grace
        self._nvml = nvml
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
        self.duration = Gauge(
            "hami_agent_snapshot_seconds", "How long the latest snapshot took.", registry=r
        )
        taken = Gauge(
            "hami_agent_snapshots", "Snapshots taken since the agent started.", registry=r
        )
        taken.set_function(lambda: self.sequence)

    def snapshot(self) -> Payload:
        """Read everything once; errors are counted, never raised."""
        started = time.perf_counter()
        scan = region_scan.scan(self._roots, grace=self._grace)
        for failure in scan.failures:
            self.region_errors.labels(failure.error.reason).inc()
        cards = self._nvml.sample() if self._nvml is not None else []
        payload = Payload(
            node=self.node,
            agent=self.instance,
            sequence=self.sequence,
            time=time.time(),
            nvml=self._nvml is not None and self._nvml.available,
            cards=cards,
            regions=regions(scan),
        )
        self.sequence += 1
        self.region_count.set(len(payload.regions))
        self.cards.set(len(cards))
        self.nvml_up.set(1 if payload.nvml else 0)
        self.duration.set(time.perf_counter() - started)
        return payload


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
    sampler = Sampler(settings.node, settings.roots, settings.grace, nvml)
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
            await stop.wait()
    finally:
        server.shutdown()
        server.server_close()
        if nvml is not None:
            nvml.close()


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
