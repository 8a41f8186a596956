"""The series of NVML's wider view of a node, and of the agent's checks, from an agent's push.

Beside the card readings and HAMi-core's regions (:mod:`collector.sources.push`),
an agent sends what NVML tells of each card's health and energy, its MIG
instances, and the processes on each device, already grouped by the pod UID and
container ID in their cgroups. Here they become canonical series: a container's
usage gets the very labels its allocation has (:func:`collector.normalise.labelsets.vgpu`),
so ``used / allocated`` joins whatever put the pod on the card.

What the agent checked of HAMi-core's regions becomes series of its own
(:data:`collector.normalise.schema.AGENT_CHECKS`): the memory of slots whose
process is gone, and which reading gave each container's utilisation. The
source is an info series beside the utilisation, not a label of it: a
container whose region starts reporting would otherwise begin a new
utilisation series (DESIGN's series identity).

Which source wins for a container: HAMi-core's region, where the container has
one. HAMi-core counts the memory its library hands out, as the container's
limit sees it, and its utilisation is the SM share it enforces; NVML's per
process view of the same container would be a second, slightly different
number for the same series. The process view fills in every container without
a region (whole cards, MIG, DRA, KAI fractions without the isolator) and gives
every container its energy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from operator import attrgetter
from typing import Generic, TypeVar, TypeVarTuple, Unpack

from collector.normalise import labelsets, schema
from collector.sources.kubelet_devices import by_container
from collector.sources.pods import PodDirectory
from core import clockevents
from core.payload import Card, Device, Payload

T = TypeVar("T")
Args = TypeVarTuple("Args")

_FIXED = (
    (schema.ENERGY, ()),
    (schema.IDLE_ENERGY, ()),
    (schema.UNATTRIBUTED_ENERGY, ()),
    (schema.ECC_ERRORS, (("type", "corrected"),)),
    (schema.ECC_ERRORS, (("type", "uncorrected"),)),
)
"""The card's readings that are one series each, in the order :data:`_fixed` reads them."""
_fixed = attrgetter(
    "energy", "idle_energy", "unattributed_energy", "ecc_corrected", "ecc_uncorrected"
)
_REASONS = tuple(reason for _, reason in clockevents.CLOCK_EVENT_REASONS)
_Shape = tuple[
    int,
    str,
    str,
    tuple[bool, ...],
    tuple[int, ...],
    bool,
    tuple[tuple[str, int, int, str, bool, bool], ...],
]


class Memo(Generic[T]):
    """What a node's push made of an identity, kept while the push after needs it too.

    The same cards, reasons and containers come back push after push; making
    their keys sorts and escapes their labels, which was three quarters of this
    part of a push when remade each time (8 cards, 32 containers: 170 µs of 220).
    """

    __slots__ = ("_kept", "_used")

    def __init__(self) -> None:
        self._kept: dict[tuple[object, ...], T] = {}
        self._used: dict[tuple[object, ...], T] = {}

    def get(self, ident: tuple[*Args], make: Callable[[Unpack[Args]], T]) -> T:
        """``make(*ident)``, made the first time only."""
        found = self._used.get(ident)
        if found is None:
            found = self._kept.get(ident)
            if found is None:
                found = make(*ident)
            self._used[ident] = found
        return found

    def sweep(self) -> None:
        """Forget what this push did not use."""
        self._kept, self._used = self._used, {}


class KeyMemo:
    """A node's keys of these families: per card (its shape) and per label set (its text)."""

    __slots__ = ("cards", "texts")

    def __init__(self) -> None:
        self.cards: Memo[tuple[bytes, ...]] = Memo()
        self.texts: Memo[bytes] = Memo()

    def sweep(self) -> None:
        """Forget what this push did not use."""
        self.cards.sweep()
        self.texts.sweep()


Checked = tuple[tuple[str, str, str, int, str], Device]
"""A region's vGPU as the push labels it (namespace, pod, container, index, UUID), and its reading."""


def series(
    payload: Payload, pods: PodDirectory, memo: KeyMemo, checked: Iterable[Checked] = ()
) -> tuple[tuple[bytes, ...], list[float], int]:
    """The keys and values of the payload's health, energy, MIG and process readings and of
    the agent's checks of the ``checked`` vGPUs (those of owned regions), and how many process
    readings were dropped (a container the pod watch does not know by that ID).

    No key repeats: the card's series are one per reading, the containers' summed by key.
    """
    keys: list[bytes] = []
    values: list[float] = []
    for card in payload.cards:
        keys += memo.cards.get(_shape(card), _card_keys)
        values += _card_values(card)
    dropped = 0
    by_key: dict[bytes, float] = {}
    if payload.processes:
        dropped = _processes(payload, pods, memo.texts, by_key)
    _checks(checked, memo.texts, by_key)
    keys += by_key
    values += by_key.values()
    memo.sweep()
    return tuple(keys), values, dropped


def checks(device: Device) -> int:
    """How many series the agent's checks of a region's device make."""
    return (device.stale_memory is not None) + (device.utilization_source is not None)


def _checks(checked: Iterable[Checked], texts: Memo[bytes], out: dict[bytes, float]) -> None:
    """Each checked vGPU's memory held by gone processes, and its utilisation's source."""
    for ident, device in checked:
        if device.stale_memory is not None:
            out[_STALE + texts.get(ident, _vgpu_text)] = float(device.stale_memory)
        if device.utilization_source is not None:
            source = (*ident, device.utilization_source)
            out[_SOURCE + texts.get(source, _source_text)] = 1.0


def _shape(card: Card) -> _Shape:
    """What the card's keys depend on: its labels and which readings it has."""
    return (
        card.index,
        card.name,
        card.uuid,
        tuple(v is None for v in _fixed(card)),
        tuple(card.xid_errors),
        card.clock_events is None,
        tuple(
            (
                m.uuid,
                m.gpu_instance_id,
                m.compute_instance_id,
                m.profile,
                m.memory_used is None,
                m.memory_total is None,
            )
            for m in card.mig
        ),
    )


def _card_keys(
    index: int,
    name: str,
    uuid: str,
    missing: tuple[bool, ...],
    xids: tuple[int, ...],
    no_clock: bool,
    migs: tuple[tuple[str, int, int, str, bool, bool], ...],
) -> tuple[bytes, ...]:
    """The keys of a card of this :func:`_shape`, in the order :func:`_card_values` gives values."""
    labels = labelsets.card(index, name, uuid)
    keys = [
        labelsets.key(family, (*labels, *more))
        for (family, more), absent in zip(_FIXED, missing, strict=True)
        if not absent
    ]
    keys += (labelsets.key(schema.XID_ERRORS, (*labels, ("xid", str(x)))) for x in xids)
    if not no_clock:
        keys += (labelsets.key(schema.CLOCK_EVENT, (*labels, ("reason", r))) for r in _REASONS)
    for mig_uuid, gpu_instance, compute_instance, profile, no_used, no_total in migs:
        mig = labelsets.mig(uuid, mig_uuid, gpu_instance, compute_instance, profile)
        if not no_used:
            keys.append(labelsets.key(schema.MIG_MEMORY_USED, mig))
        if not no_total:
            keys.append(labelsets.key(schema.MIG_MEMORY_TOTAL, mig))
    return tuple(keys)


def _card_values(card: Card) -> list[float]:
    values = [float(v) for v in _fixed(card) if v is not None]
    values += map(float, card.xid_errors.values())
    if card.clock_events is not None:
        values += (float(active) for _, active in clockevents.active(card.clock_events))
    for m in card.mig:
        values += (float(v) for v in (m.memory_used, m.memory_total) if v is not None)
    return values


_CONTAINER_READINGS = (
    (schema.CONTAINER_MEMORY.encode(), "memory_used"),
    (schema.VGPU_UTILIZATION.encode(), "utilization"),
    (schema.CONTAINER_ENERGY.encode(), "energy"),
)
_UNATTRIBUTED = schema.UNATTRIBUTED_MEMORY.encode()
_STALE = schema.STALE_MEMORY.encode()
_SOURCE = schema.UTILIZATION_SOURCE.encode()


def _processes(
    payload: Payload, pods: PodDirectory, texts: Memo[bytes], out: dict[bytes, float]
) -> int:
    """Per-container series of the process view, and each device's memory that no pod owns."""
    regions = _region_devices(payload)
    assigned = by_container(payload.assignments or ())
    fallback: dict[tuple[str, str], list[str]] = {}
    unattributed: dict[str, float] = {}
    dropped = 0
    for usage in payload.processes:
        unattributed.setdefault(usage.device, 0.0)
        pod = pods.pod(usage.pod_uid) if usage.pod_uid is not None else None
        if pod is None or pod.node != payload.node:
            unattributed[usage.device] += usage.memory_used
            continue
        container = pod.containers.get(usage.container_id or "")
        if container is None:
            dropped += 1
            continue
        uuid = labelsets.device_uuid(usage.device)
        own = regions.get((pod.uid, container))
        index = None if own is None else own.get(uuid)
        regioned = index is not None
        if index is not None:
            readings: Iterable[tuple[bytes, str]] = _CONTAINER_READINGS[2:]  # HAMi-core's win
        else:
            readings = _CONTAINER_READINGS
            index = _index(
                uuid,
                assigned.get((pod.namespace, pod.name, container)),
                fallback,
                (pod.uid, container),
            )
        ident = (pod.namespace, pod.name, container, index, uuid)
        text = texts.get(ident, _vgpu_text)
        for family, field in readings:
            value = getattr(usage, field)
            if value is not None:
                key = family + text
                out[key] = out.get(key, 0.0) + float(value)
        if not regioned and usage.utilization is not None:
            out[_SOURCE + texts.get((*ident, "nvml"), _source_text)] = 1.0
    for device, memory in unattributed.items():
        text = texts.get((device,), _device_text)
        out[_UNATTRIBUTED + text] = memory
    return dropped


def _vgpu_text(namespace: str, pod: str, container: str, index: int, uuid: str) -> bytes:
    return labelsets.text(labelsets.vgpu(namespace, pod, container, index, uuid))


def _source_text(
    namespace: str, pod: str, container: str, index: int, uuid: str, source: str
) -> bytes:
    vgpu = labelsets.vgpu(namespace, pod, container, index, uuid)
    return labelsets.text((*vgpu, ("source", source)))


def _device_text(uuid: str) -> bytes:
    return labelsets.text(labelsets.device(uuid))


def _index(
    uuid: str,
    assigned: tuple[str, ...] | None,
    fallback: dict[tuple[str, str], list[str]],
    container: tuple[str, str],
) -> int:
    """The container's vdevice index of a device: its place among the devices the kubelet
    gave the container (as the allocation numbers them), else among the devices its
    processes use, in the order the agent lists them (cards in NVML order)."""
    if assigned is not None and uuid in assigned:
        return assigned.index(uuid)
    seen = fallback.setdefault(container, [])
    if uuid not in seen:
        seen.append(uuid)
    return seen.index(uuid)


def _region_devices(payload: Payload) -> Mapping[tuple[str, str], Mapping[str, int]]:
    """(pod UID, container) -> the vdevice index of each device of its HAMi-core region."""
    out: dict[tuple[str, str], dict[str, int]] = {}
    for region in payload.regions:
        if region.pod_uid is not None and region.container is not None:
            devices = out.setdefault((region.pod_uid, region.container), {})
            for device in region.devices:
                devices[labelsets.device_uuid(device.uuid)] = device.index
    return out


def has_view(payload: Payload) -> bool:
    """Whether the payload carries anything of NVML's wider view (most pushes of old agents
    and of the benches do not, and keep the push's fast path)."""
    return bool(payload.processes) or any(
        card.energy is not None
        or card.idle_energy is not None
        or card.unattributed_energy is not None
        or card.clock_events is not None
        or card.ecc_corrected is not None
        or card.ecc_uncorrected is not None
        or card.xid_errors
        or card.mig
        for card in payload.cards
    )
