"""``POST /api/v1/push``: agents' raw readings, checked, attributed and turned into canonical series.

The series are exactly those a HAMi v2.10 monitor would export for the same
readings. Order of checks: size, credentials, payload, node binding, shard, sequence;
nothing from a refused payload reaches the store.
"""

from __future__ import annotations

import logging
import time
from array import array
from collections.abc import Mapping
from dataclasses import dataclass
from operator import attrgetter

from aiohttp import web
from pydantic import ValidationError

from collector.auth.headers import bearer
from collector.auth.pushers import Authenticator, AuthError
from collector.normalise import labelsets, schema
from collector.normalise.batch import Batch, Series, Source
from collector.normalise.schema import SourceKind
from collector.selfmetrics import SelfMetrics
from collector.sources import nvmlview
from collector.sources.inflate import WBITS, Inflate, InflateError
from collector.sources.kubelet_devices import Assignments
from collector.sources.pods import PodDirectory, PodRef
from collector.store.latest import Store
from core.payload import Payload, Region
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


def to_batch(
    payload: Payload, pods: PodDirectory, keys: SeriesKeys | None = None
) -> tuple[Batch, int]:
    """Attribute a payload's readings and make their canonical series; return the batch and the unowned regions.

    Cards and vGPUs are labelled as a HAMi v2.10 monitor labels them
    (:mod:`collector.normalise.labelsets`); a region whose pod or claim is unknown, or
    on another node, is dropped; a reading NVML could not read (None) makes
    no series. ``samples`` counts the readings offered, those dropped with
    their region included. ``keys`` are the node's keys of its previous push
    (kept by the caller, one per node).
    """
    cards: list[CardIdent] = []
    vgpus: list[VgpuIdent] = []
    values: list[float | None] = []
    for card in payload.cards:
        cards.append((card.index, card.name, card.uuid))
        values += _card_values(card)
    checked: list[nvmlview.Checked] = []
    unowned = dropped = 0
    node, now = payload.node, int(payload.time)
    for region in payload.regions:
        owner = _owner(region, pods)
        if owner is None or owner[0].node != node:
            unowned += 1
            dropped += len(region.devices) * len(schema.VGPU_FAMILIES)
            dropped += sum(map(nvmlview.checks, region.devices))
            continue
        pod, container = owner
        elapsed = None
        if region.last_kernel_time:
            elapsed = max(now - region.last_kernel_time, 0)
        for device in region.devices:
            vgpu = (pod.namespace, pod.name, container, device.index, device.uuid)
            vgpus.append(vgpu)
            values += _device_values(device)
            values.append(elapsed)
            if nvmlview.checks(device):
                checked.append((vgpu, device))
    keys = keys or SeriesKeys()
    flat, unique = keys.of(tuple(cards), tuple(vgpus))
    offered = len(values) - values.count(None)
    series: Mapping[bytes, float]
    if checked or nvmlview.has_view(payload):
        view_keys, view_values, unknown = nvmlview.series(payload, pods, keys.view, checked)
        flat, unique = keys.joined(flat, unique, view_keys)
        values += view_values
        offered += len(view_values)
        dropped += unknown
    if unique and offered == len(values):
        # the node's keys tuple, shared from push to push: the history sees the same
        # keys by identity, and no dict is built (its hashing was ~10% of a push)
        series = Series(flat, array("d", values))  # type: ignore[arg-type]  # no None
    else:
        series = {k: float(v) for k, v in zip(flat, values, strict=True) if v is not None}
    return (
        Batch(
            series,
            samples=offered + dropped,
            duplicates=offered - len(series),  # each value either adds its key or repeats one
            dropped=dropped,
        ),
        unowned,
    )


CardIdent = tuple[int, str, str]
"""What labels a card: the arguments of :func:`labelsets.card` (index, NVML name, UUID)."""
VgpuIdent = tuple[str, str, str, int, str]
"""What labels a vGPU: the arguments of :func:`labelsets.vgpu` (namespace, pod, container,
index, UUID). Plain tuples, not records: a push makes dozens and compares them all
(a NamedTuple costs 6x a tuple to make, ~5% of a push)."""


class SeriesKeys:
    """One node's series keys, kept from one push to the next.

    A node's cards and vGPUs keep their labels from one snapshot to the next,
    so the keys are made once: a push whose cards and vGPUs are those of the
    previous one takes the previous keys whole (two tuple comparisons); a
    changed one makes keys only for its new cards and vGPUs.
    """

    __slots__ = ("_cards", "_flat", "_groups", "_joined", "_unique", "_vgpus", "view")

    def __init__(self) -> None:
        self.view = nvmlview.KeyMemo()
        self._cards: tuple[CardIdent, ...] = ()
        self._vgpus: tuple[VgpuIdent, ...] = ()
        self._flat: tuple[bytes, ...] = ()
        self._unique = True
        self._groups: dict[CardIdent | VgpuIdent, tuple[bytes, ...]] = {}
        self._joined: tuple[tuple[bytes, ...], tuple[bytes, ...], tuple[bytes, ...], bool] = (
            (),
            (),
            (),
            True,
        )

    def joined(
        self, flat: tuple[bytes, ...], unique: bool, view: tuple[bytes, ...]
    ) -> tuple[tuple[bytes, ...], bool]:
        """``flat`` and then ``view``, the same tuple as the previous push's when both are the
        same (the history sees the keys by identity), and whether no key repeats."""
        was_flat, was_view, joined, joined_unique = self._joined
        if flat is not was_flat or view != was_view:
            joined = flat + view
            joined_unique = unique and len(set(joined)) == len(joined)
            self._joined = (flat, view, joined, joined_unique)
        return joined, joined_unique

    def of(
        self, cards: tuple[CardIdent, ...], vgpus: tuple[VgpuIdent, ...]
    ) -> tuple[tuple[bytes, ...], bool]:
        """The keys of every reading of these cards, then these vGPUs, in the order
        ``to_batch`` lists values, and whether no key repeats (two regions may name one vGPU)."""
        if cards != self._cards or vgpus != self._vgpus:
            old = self._groups
            groups: dict[CardIdent | VgpuIdent, tuple[bytes, ...]] = {}
            for ident in cards:
                groups[ident] = old.get(ident) or labelsets.keys(
                    _CARD_ORDER, labelsets.card(*ident)
                )
            for vgpu in vgpus:
                groups[vgpu] = old.get(vgpu) or labelsets.keys(_VGPU_ORDER, labelsets.vgpu(*vgpu))
            self._cards, self._vgpus, self._groups = cards, vgpus, groups
            idents: tuple[CardIdent | VgpuIdent, ...] = (
                *cards,
                *vgpus,
            )  # repeats kept: one per value
            self._flat = tuple(key for ident in idents for key in groups[ident])
            self._unique = len(set(self._flat)) == len(self._flat)
        return self._flat, self._unique


def _owner(region: Region, pods: PodDirectory) -> tuple[PodRef, str] | None:
    if region.claim_uid is not None:
        return pods.claim_owner(region.claim_uid)
    pod = pods.pod(region.pod_uid or "")
    return None if pod is None else (pod, region.container or "")


# Which payload field holds each reading of the schema's tables; attrgetter reads them
# all in one C call. A vGPU's elapsed seconds since its last kernel is not a payload
# field (the collector computes it): its value, and so its key, comes last.
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
_CARD_ORDER = tuple(family for reading, family in schema.CARD_READINGS)
_VGPU_ORDER = (
    *(family for reading, family in schema.VGPU_READINGS if reading in _DEVICE_FIELDS),
    *(family for reading, family in schema.VGPU_READINGS if reading not in _DEVICE_FIELDS),
)
_card_values = attrgetter(*(_CARD_FIELDS[reading] for reading, _ in schema.CARD_READINGS))
_device_values = attrgetter(
    *(_DEVICE_FIELDS[reading] for reading, _ in schema.VGPU_READINGS if reading in _DEVICE_FIELDS)
)
assert len(_VGPU_ORDER) == len(_DEVICE_FIELDS) + 1, "one vGPU reading computed, not read"


class PushReceiver:
    """The push endpoint: one latest snapshot per node, from whichever agent instance sent it."""

    def __init__(
        self,
        store: Store,
        metrics: SelfMetrics,
        auth: Authenticator,
        pods: PodDirectory,
        config: PushConfig,
        assignments: Assignments | None = None,
    ) -> None:
        self._store = store
        self.assignments = assignments or Assignments()
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
        try:
            caller = await self._auth.authenticate(bearer(request))
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
        keys = self._keys.get(payload.node)
        if keys is None:
            keys = self._keys[payload.node] = SeriesKeys()
        batch, unowned = to_batch(payload, self._pods, keys)
        self._seen[payload.node] = (payload.agent, payload.sequence)
        if payload.assignments is not None:
            self.assignments.put(payload.node, payload.assignments)
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
        self._keys.pop(node, None)
        self.assignments.forget(node)

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
