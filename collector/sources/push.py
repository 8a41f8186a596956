"""``POST /api/v1/push``: agents' raw readings, checked, attributed and turned into canonical series.

The series are exactly those a HAMi v2.10 monitor would export for the same
readings. Order of checks: size, credentials, payload, node binding, shard, sequence;
nothing from a refused payload reaches the store.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from operator import attrgetter

from aiohttp import web
from pydantic import ValidationError

from collector import schema
from collector.batch import Batch, Source
from collector.normalise import Group, Normaliser, Readings
from collector.schema import SourceKind
from collector.selfmetrics import SelfMetrics
from collector.sources.auth import Authenticator, AuthError
from collector.sources.inflate import WBITS, Inflate, InflateError
from collector.sources.pods import PodDirectory, PodRef
from collector.store import Store
from core.payload import Card, Device, Payload, Region
from core.shards import WHOLE, Shard, shard_of

log = logging.getLogger(__name__)

_REASONS = {401: "unauthorized", 403: "forbidden"}


@dataclass(frozen=True, slots=True)
class PushConfig:
    """Limits of the push API."""

    body_limit: int
    max_inflight: int
    priority: int
    shard: Shard = WHOLE


def decode(payload: Payload, pods: PodDirectory) -> tuple[Readings, int]:
    """Attribute a payload's readings; return them and how many regions had no live owner.

    Cards and vGPUs are labelled as a HAMi v2.10 monitor labels them
    (``device_type`` = "NVIDIA-" + NVML name, the first 40 characters of a UUID);
    a region whose pod or claim is unknown, or on another node, is dropped.
    """
    groups = [_card(card) for card in payload.cards]
    unowned = dropped = 0
    for region in payload.regions:
        owner = _owner(region, pods)
        if owner is None or owner[0].node != payload.node:
            unowned += 1
            dropped += len(region.devices) * len(schema.VGPU_FAMILIES)
            continue
        elapsed = None
        if region.last_kernel_time:
            elapsed = float(max(int(payload.time) - region.last_kernel_time, 0))
        groups.extend(_vgpu(device, *owner, elapsed) for device in region.devices)
    return Readings(tuple(groups), dropped), unowned


def to_batch(
    payload: Payload, pods: PodDirectory, normaliser: Normaliser | None = None
) -> tuple[Batch, int]:
    """Decode a payload and normalise its readings; return the batch and the unowned regions."""
    readings, unowned = decode(payload, pods)
    return (normaliser or Normaliser(payload.node)).readings(readings), unowned


def _owner(region: Region, pods: PodDirectory) -> tuple[PodRef, str] | None:
    if region.claim_uid is not None:
        return pods.claim_owner(region.claim_uid)
    pod = pods.pod(region.pod_uid or "")
    return None if pod is None else (pod, region.container or "")


def _card(card: Card) -> Group:
    labels = (
        ("device_index", str(card.index)),
        ("device_type", f"NVIDIA-{card.name}"),
        ("device_uuid", card.uuid[:40]),
    )
    return Group(schema.CARD_FAMILIES, labels, _card_values(card))


def _vgpu(device: Device, pod: PodRef, container: str, elapsed: float | None) -> Group:
    labels = (
        ("container", container),
        ("device_uuid", device.uuid[:40]),
        ("namespace", pod.namespace),
        ("pod", pod.name),
        ("vdevice_index", str(device.index)),
    )
    values = _device_values(device)
    return Group(schema.VGPU_FAMILIES, labels, (*values[:_ELAPSED], elapsed, *values[_ELAPSED:]))


# Which payload field holds each reading of the schema's tables; attrgetter reads them
# all in one C call, a push's hottest step (a payload holds hundreds of vGPUs).
_CARD_FIELDS = {
    "memory_used": "memory_used",
    "memory_total": "memory_total",
    "utilization": "utilization",
    "memory_controller_utilization": "memory_utilization",
    "temperature": "temperature",
    "power": "power",
}
_DEVICE_FIELDS = {
    "memory_used": "memory_used",
    "device_memory": "memory_used",
    "memory_limit": "memory_limit",
    "sm_utilization": "sm_utilization",
    "memory_context": "context",
    "memory_module": "module",
    "memory_buffer": "buffer",
}
_ELAPSED = [reading for reading, _ in schema.VGPU_READINGS].index("last_kernel_seconds")
"""The one vGPU reading that is not a field of the payload: the collector computes it."""
_card_values = attrgetter(*(_CARD_FIELDS[reading] for reading, _ in schema.CARD_READINGS))
_device_values = attrgetter(
    *(_DEVICE_FIELDS[reading] for reading, _ in schema.VGPU_READINGS if reading in _DEVICE_FIELDS)
)


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
        self._normalisers: dict[str, Normaliser] = {}

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
        self._check_shard(payload.node)
        seen = self._seen.get(payload.node)
        if seen is not None and seen[0] == payload.agent and payload.sequence <= seen[1]:
            return web.Response(status=204)
        normaliser = self._normalisers.get(payload.node)
        if normaliser is None:
            normaliser = self._normalisers[payload.node] = Normaliser(payload.node)
        batch, unowned = to_batch(payload, self._pods, normaliser)
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

    def _check_shard(self, node: str) -> None:
        """Refuse (421) a node of another shard, naming that shard: the agent was misdirected."""
        shard = self._config.shard
        if shard.holds(node):
            return
        right = shard_of(node, shard.count)
        raise _Refused(
            421,
            "misdirected",
            f"node {node!r} belongs to shard {right} of {shard.count}; this is shard {shard.index}",
            {"shard": right, "shard_count": shard.count, "this_shard": shard.index},
        )

    def forget(self, node: str) -> None:
        """Drop what is remembered of a node whose agent went stale."""
        self._seen.pop(node, None)
        self._normalisers.pop(node, None)

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
    """Read the body and undo its gzip or deflate encoding, at most ``limit`` bytes decoded.

    A bomb stops at ``limit + 1`` bytes whatever its compressed size, and a
    broken stream is a 400 naming the push, not a framing error of the server.
    """
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in WBITS and encoding not in ("identity", ""):
        raise _Refused(415, "unsupported_encoding", f"content encoding {encoding!r}: use gzip")
    inflate = Inflate(encoding, limit) if encoding in WBITS else None
    body = bytearray()
    try:
        async for chunk in request.content.iter_chunked(1 << 16):
            body += chunk if inflate is None else inflate.feed(chunk)
            if len(body) > limit:
                raise _Refused(
                    413, "too_large", f"body larger than {limit} bytes once decompressed"
                )
        if inflate is not None:
            inflate.finish()
    except web.RequestPayloadError as exc:
        raise _Refused(400, "invalid", f"unreadable body: {exc}") from None
    except InflateError as exc:
        raise _Refused(400, "invalid", f"body is not valid {encoding}: {exc}") from None
    return bytes(body)
