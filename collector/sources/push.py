"""``POST /api/v1/push``: agents' raw readings, checked, attributed and turned into canonical series.

The series are exactly those a HAMi v2.10 monitor would export for the same
readings. Order of checks: size, credentials, payload, node binding, sequence;
nothing from a refused payload reaches the store.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from aiohttp import web
from pydantic import ValidationError

from collector import schema
from collector.batch import Batch, Source
from collector.exposition.render import series_key
from collector.schema import SourceKind
from collector.selfmetrics import SelfMetrics
from collector.sources.auth import Authenticator, AuthError
from collector.sources.pods import PodDirectory
from collector.store import Store
from core.payload import Payload

log = logging.getLogger(__name__)

ZONE = ("zone", "vGPU")
_REASONS = {401: "unauthorized", 403: "forbidden"}


@dataclass(frozen=True, slots=True)
class PushConfig:
    """Limits of the push API."""

    body_limit: int
    max_inflight: int
    priority: int


HOST_FAMILIES = (
    "hami_host_gpu_memory_used_bytes",
    "hami_host_gpu_memory_total_bytes",
    "hami_host_gpu_utilization_ratio",
    "hami_host_gpu_memory_controller_utilization_ratio",
    "hami_host_gpu_temperature_celsius",
    "hami_host_gpu_power_usage_watts",
)
CONTAINER_FAMILIES = (
    schema.VGPU_MEMORY_USED,
    schema.CONTAINER_MEMORY,
    "hami_vgpu_memory_limit_bytes",
    "hami_container_device_utilization_ratio",
    "hami_vgpu_memory_context_bytes",
    "hami_vgpu_memory_module_bytes",
    "hami_vgpu_memory_buffer_bytes",
    "hami_container_last_kernel_elapsed_seconds",
)

Labels = tuple[tuple[str, str], ...]


class SeriesKeys:
    """The series keys of one node's pushes, kept from one push to the next.

    Building a key is most of a push's cost, and a node's label sets rarely
    change between two snapshots; keys not used by the latest push are dropped.
    """

    def __init__(self) -> None:
        self._previous: dict[Labels, tuple[bytes, ...]] = {}
        self._current: dict[Labels, tuple[bytes, ...]] = {}

    def of(self, families: tuple[str, ...], labels: Labels) -> tuple[bytes, ...]:
        """The keys of ``families`` with ``labels``, in the order of ``families``."""
        keys = self._current.get(labels) or self._previous.get(labels)
        if keys is None:
            keys = tuple(series_key(name, labels) for name in families)
        self._current[labels] = keys
        return keys

    def done(self) -> None:
        """End a push: what it did not use is forgotten after the next."""
        self._previous, self._current = self._current, {}


def _put(
    series: dict[bytes, float], keys: tuple[bytes, ...], values: tuple[float | None, ...]
) -> None:
    for key, value in zip(keys, values, strict=True):
        if value is not None:
            series[key] = float(value)


def to_batch(
    payload: Payload, pods: PodDirectory, keys: SeriesKeys | None = None
) -> tuple[Batch, int]:
    """Turn a payload into canonical series; return them and how many regions had no live owner.

    The series are those a HAMi v2.10 monitor exports for the same readings,
    labelled as it labels them (``device_type`` = "NVIDIA-" + NVML name, the
    first 40 characters of a UUID), plus temperature and power.
    """
    keys = keys or SeriesKeys()
    series: dict[bytes, float] = {}
    for card in payload.cards:
        labels: Labels = (
            ("device_index", str(card.index)),
            ("device_type", f"NVIDIA-{card.name}"),
            ("device_uuid", card.uuid[:40]),
            ZONE,
        )
        host_values: tuple[float | None, ...] = (
            card.memory_used,
            card.memory_total,
            card.utilization,
            card.memory_utilization,
            card.temperature,
            card.power,
        )
        _put(series, keys.of(HOST_FAMILIES, labels), host_values)
    unowned = 0
    for region in payload.regions:
        if region.claim_uid is not None:
            owner = pods.claim_owner(region.claim_uid)
        else:
            pod = pods.pod(region.pod_uid or "")
            owner = None if pod is None else (pod, region.container or "")
        if owner is None or owner[0].node != payload.node:
            unowned += 1
            continue
        pod, container = owner
        elapsed = None
        if region.last_kernel_time:
            elapsed = float(max(int(payload.time) - region.last_kernel_time, 0))
        for device in region.devices:
            labels = (
                ("container", container),
                ("device_uuid", device.uuid[:40]),
                ("namespace", pod.namespace),
                ("pod", pod.name),
                ("vdevice_index", str(device.index)),
                ZONE,
            )
            device_values: tuple[float | None, ...] = (  # in CONTAINER_FAMILIES' order
                device.memory_used,
                device.memory_used,
                device.memory_limit,
                device.sm_utilization,
                device.context,
                device.module,
                device.buffer,
                elapsed,
            )
            _put(series, keys.of(CONTAINER_FAMILIES, labels), device_values)
    keys.done()
    return Batch(series, samples=len(series), dropped=unowned), unowned


class PushReceiver:
    """The push endpoint: one latest snapshot per node, from whichever agent instance sent it."""

    def __init__(
        self,
        store: Store,
        metrics: SelfMetrics,
        auth: Authenticator,
        pods: PodDirectory,
        config: PushConfig,
    ) -> None:
        self._store = store
        self._metrics = metrics
        self._auth = auth
        self._pods = pods
        self._config = config
        self._inflight = 0
        self._seen: dict[str, tuple[str, int]] = {}
        self._keys: dict[str, SeriesKeys] = {}

    async def handle(self, request: web.Request) -> web.Response:
        """Accept (204) or refuse one payload with a JSON error naming the reason."""
        if self._inflight >= self._config.max_inflight:
            return self._refuse(
                429, "overloaded", "too many pushes in flight", {"Retry-After": "1"}
            )
        self._inflight += 1
        try:
            return await self._handle(request)
        except _Refused as refused:
            return self._refuse(
                refused.status, refused.reason, refused.message, {}, refused.details
            )
        finally:
            self._inflight -= 1

    async def _handle(self, request: web.Request) -> web.Response:
        limit = self._config.body_limit
        if request.content_length is not None and request.content_length > limit:
            raise _Refused(413, "too_large", f"body of {request.content_length} bytes > {limit}")
        header = request.headers.get("Authorization", "")
        token = header[7:].strip() if header[:7].lower() == "bearer " else None
        try:
            caller = await self._auth.authenticate(token)
        except AuthError as exc:
            raise _Refused(exc.status, _REASONS.get(exc.status, "unavailable"), str(exc)) from None
        body = await _read(request, limit)
        try:
            payload = Payload.model_validate_json(body)
        except ValidationError as exc:
            details = [
                {"field": ".".join(str(p) for p in e["loc"]), "error": e["msg"]}
                for e in exc.errors(include_url=False)
            ]
            raise _Refused(
                400, "invalid", f"invalid payload: {exc.error_count()} error(s)", details
            ) from None
        if caller.node is not None and caller.node != payload.node:
            raise _Refused(
                403, "wrong_node", f"{caller.name} runs on {caller.node}, not {payload.node}"
            )
        seen = self._seen.get(payload.node)
        if seen is not None and seen[0] == payload.agent and payload.sequence <= seen[1]:
            return web.Response(status=204)
        keys = self._keys.get(payload.node)
        if keys is None:
            keys = self._keys[payload.node] = SeriesKeys()
        batch, unowned = to_batch(payload, self._pods, keys)
        self._seen[payload.node] = (payload.agent, payload.sequence)
        source = Source(
            f"agent/{payload.node}",
            f"agent {payload.agent}",
            payload.node,
            SourceKind.AGENT,
            self._config.priority,
        )
        self._store.put(source, batch, time.monotonic(), sampled=payload.time)
        self._metrics.pushed(source, batch, unowned, payload.time)
        return web.Response(status=204)

    def forget(self, node: str) -> None:
        """Drop what is remembered of a node whose agent went stale."""
        self._seen.pop(node, None)
        self._keys.pop(node, None)

    def _refuse(
        self,
        status: int,
        reason: str,
        message: str,
        headers: dict[str, str],
        details: object = None,
    ) -> web.Response:
        self._metrics.push_refused(reason)
        body: dict[str, object] = {"status": "error", "error": reason, "message": message}
        if details is not None:
            body["details"] = details
        return web.json_response(body, status=status, headers=headers)


class _Refused(Exception):
    def __init__(self, status: int, reason: str, message: str, details: object = None) -> None:
        super().__init__(message)
        self.status, self.reason, self.message, self.details = status, reason, message, details


async def _read(request: web.Request, limit: int) -> bytes:
    """Read the body, at most ``limit`` bytes: aiohttp has already undone a gzip encoding."""
    body = bytearray()
    try:
        async for chunk in request.content.iter_chunked(1 << 16):
            body += chunk
            if len(body) > limit:
                raise _Refused(
                    413, "too_large", f"body larger than {limit} bytes once decompressed"
                )
    except web.RequestPayloadError as exc:
        raise _Refused(400, "invalid", f"unreadable body: {exc}") from None
    return bytes(body)
