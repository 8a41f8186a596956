"""The series of NVML's wider view of a node, from an agent's push.

Beside the card readings and HAMi-core's regions (:mod:`collector.sources.push`),
an agent sends what NVML tells of each card's health and energy, its MIG
instances, and the processes on each device, already grouped by the pod UID and
container ID in their cgroups. Here they become canonical series: a container's
usage gets the very labels its allocation has (:func:`collector.labelsets.vgpu`),
so ``used / allocated`` joins whatever put the pod on the card.

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
from functools import partial

from collector import labelsets, schema
from collector.exposition.parse import Labels
from collector.sources.assignments import by_container
from collector.sources.pods import PodDirectory
from core import clockevents
from core.payload import Card, Payload

_ECC = (("corrected", "ecc_corrected"), ("uncorrected", "ecc_uncorrected"))


class KeyMemo:
    """A node's series keys of these families, kept while the push after uses them too.

    The same cards, reasons and containers come back push after push; making a
    key sorts and escapes its labels (~1.5 µs), about a third of this part of a
    push when remade each time.
    """

    __slots__ = ("_kept", "_used")

    def __init__(self) -> None:
        self._kept: dict[tuple[object, ...], bytes] = {}
        self._used: dict[tuple[object, ...], bytes] = {}

    def key(self, family: str, ident: tuple[object, ...], labels: Callable[[], Labels]) -> bytes:
        """The key of ``family`` for ``ident``; ``labels`` makes its labels the first time."""
        memo = (family, *ident)
        found = self._used.get(memo) or self._kept.get(memo)
        if found is None:
            found = labelsets.key(family, labels())
        self._used[memo] = found
        return found

    def sweep(self) -> None:
        """Forget the keys this push did not use."""
        self._kept, self._used = self._used, {}


def series(payload: Payload, pods: PodDirectory, memo: KeyMemo) -> tuple[dict[bytes, float], int]:
    """The series of the payload's health, energy, MIG and process readings; and how many
    process readings were dropped (a container the pod watch does not know by that ID)."""
    out: dict[bytes, float] = {}
    for card in payload.cards:
        _card(card, memo, out)
    dropped = _processes(payload, pods, memo, out) if payload.processes else 0
    memo.sweep()
    return out, dropped


def _card(card: Card, memo: KeyMemo, out: dict[bytes, float]) -> None:
    ident = (card.index, card.name, card.uuid)

    def labels() -> Labels:
        return labelsets.card(*ident)

    def put(family: str, value: float | None, *more: tuple[str, str]) -> None:
        if value is not None:
            key = memo.key(family, (*ident, *more), lambda: (*labels(), *more))
            out[key] = float(value)

    put(schema.ENERGY, card.energy)
    put(schema.IDLE_ENERGY, card.idle_energy)
    for kind, field in _ECC:
        put(schema.ECC_ERRORS, getattr(card, field), ("type", kind))
    for xid, count in card.xid_errors.items():
        put(schema.XID_ERRORS, count, ("xid", str(xid)))
    if card.clock_events is not None:
        for reason, active in clockevents.active(card.clock_events):
            put(schema.CLOCK_EVENT, active, ("reason", reason))
    for mig in card.mig:
        mig_ident = (card.uuid, mig.uuid, mig.gpu_instance_id, mig.compute_instance_id, mig.profile)
        for family, value in (
            (schema.MIG_MEMORY_USED, mig.memory_used),
            (schema.MIG_MEMORY_TOTAL, mig.memory_total),
        ):
            if value is not None:
                key = memo.key(family, mig_ident, partial(labelsets.mig, *mig_ident))
                out[key] = float(value)


_CONTAINER_READINGS = (
    (schema.CONTAINER_MEMORY, "memory_used"),
    (schema.VGPU_UTILIZATION, "utilization"),
    (schema.CONTAINER_ENERGY, "energy"),
)


def _processes(payload: Payload, pods: PodDirectory, memo: KeyMemo, out: dict[bytes, float]) -> int:
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
        if own is not None and uuid in own:
            readings: Iterable[tuple[str, str]] = _CONTAINER_READINGS[2:]  # HAMi-core's win
            index = own[uuid]
        else:
            readings = _CONTAINER_READINGS
            index = _index(
                uuid,
                assigned.get((pod.namespace, pod.name, container)),
                fallback,
                (pod.uid, container),
            )
        ident = (pod.namespace, pod.name, container, index, uuid)
        for family, field in readings:
            value = getattr(usage, field)
            if value is not None:
                key = memo.key(family, ident, partial(labelsets.vgpu, *ident))
                out[key] = out.get(key, 0.0) + float(value)
    for device, memory in unattributed.items():
        key = memo.key(schema.UNATTRIBUTED_MEMORY, (device,), partial(labelsets.device, device))
        out[key] = memory
    return dropped


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
        or card.clock_events is not None
        or card.ecc_corrected is not None
        or card.ecc_uncorrected is not None
        or card.xid_errors
        or card.mig
        for card in payload.cards
    )
