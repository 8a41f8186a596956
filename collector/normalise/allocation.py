"""What a pod was given: its GPU allocation per container and device, read from its object.

Pure functions of one pod object (and of the ResourceClaims it uses), no I/O.
Four ways a scheduler records what it gave a pod (docs/chargeback.md names the
upstream sources):

- HAMi: ``hami.io/vgpu-devices-allocated`` (``4pd.io/vgpu-ids-new`` before
  v2.4), ``UUID,TYPE,MEM_MIB,CORES_PERCENT`` per device, ``:`` after each
  device, ``;`` after each container; init containers first (v2.9+).
- Volcano vGPU: ``volcano.sh/vgpu-ids-new``, the same tuples, segments only for
  the containers whose limits ask for ``volcano.sh/vgpu-*``, no trailing ``;``.
- KAI: the ``gpu-fraction`` / ``gpu-memory`` annotations; the card comes from
  the reservation pod sharing the pod's ``runai-gpu-group`` label.
- DRA: each allocated device of a ResourceClaim (``consumedCapacity`` memory in
  bytes, cores in percent), for the containers whose resources name it.

A pod without those but with ``nvidia.com/gpu`` limits holds whole cards.
Nothing malformed stops the rest: a bad container segment or annotation is
left out and its reason returned, from the bounded set :data:`REASONS`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from collector.normalise import labelsets

MIB = 1 << 20
HAMI_ALLOCATED = ("hami.io/vgpu-devices-allocated", "4pd.io/vgpu-ids-new")
VOLCANO_ALLOCATED = "volcano.sh/vgpu-ids-new"
VOLCANO_RESOURCES = ("volcano.sh/vgpu-number", "volcano.sh/vgpu-memory")
KAI_FRACTION, KAI_MEMORY = "gpu-fraction", "gpu-memory"
KAI_DEVICES, KAI_CONTAINER = "gpu-fraction-num-devices", "gpu-fraction-container-name"
KAI_GROUP = "runai-gpu-group"
KAI_RESERVED_UUID = "run.ai/reserve_for_gpu_index"
WHOLE_GPU = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
"""NVIDIA's device plugin under the mixed MIG strategy: ``nvidia.com/mig-1g.10gb`` and such."""
SCHEDULED_BY_VGPU = ("hami.io/vgpu-node", "4pd.io/vgpu-node", "volcano.sh/vgpu-node")
"""Annotations of a pod a vGPU scheduler placed: its ``nvidia.com/gpu`` are vGPUs, not cards."""
ENDED = frozenset({"Succeeded", "Failed"})

REASONS = ("fields", "number", "range", "containers", "fraction", "claim")
"""Why an allocation was left out: too few fields in a device, a field that is not a number,
a number out of range, more segments than containers, a bad KAI request, a bad claim result."""

_MIG_SUFFIX = re.compile(r"\[[^\]]*\]$")
_QUANTITY = re.compile(
    r"([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?"
)
_SUFFIX = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


class Malformed(ValueError):
    """One part of an allocation cannot be read; ``reason`` is one of :data:`REASONS`."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Grant:
    """One device given to one container.

    ``memory`` is bytes and ``cores`` the share of the card's SMs (0-1); None
    where the scheduler records none (a whole card's memory, a KAI fraction's, a
    MIG instance's: the allocation source takes a MIG instance's from its node
    agent's NVML reading, :mod:`collector.sources.allocation_series`).
    ``device_uuid`` is empty where the object does not name the card.
    """

    container: str
    vdevice_index: int
    device_uuid: str
    memory: float | None
    cores: float | None
    kind: str


@dataclass(frozen=True, slots=True)
class DeviceResult:
    """One device a ResourceClaim was allocated: the slice device, and what it consumes."""

    driver: str
    pool: str
    device: str
    memory: float | None
    cores: float | None


@dataclass(frozen=True, slots=True)
class PodAllocation:
    """Everything a pod holds, plus the reasons of what could not be read.

    ``kai_groups`` name the reservation groups whose card UUIDs the KAI grants
    await, one per device in order (resolved by :func:`resolve_kai`).
    """

    grants: tuple[Grant, ...] = ()
    errors: tuple[str, ...] = ()
    kai_groups: tuple[str, ...] = ()


def bound(pod: Mapping[str, Any]) -> bool:
    """Whether the pod is on a node and not ended: the time it holds its allocation."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    return bool(spec.get("nodeName")) and status.get("phase") not in ENDED


def started(pod: Mapping[str, Any]) -> float | None:
    """When the pod started (``status.startTime``, else its creation), Unix seconds."""
    text = (pod.get("status") or {}).get("startTime") or pod["metadata"].get("creationTimestamp")
    if not text:
        return None
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def reserved_uuid(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """A KAI reservation pod's (group, card UUID), or None for any other pod."""
    meta = pod["metadata"]
    uuid = (meta.get("annotations") or {}).get(KAI_RESERVED_UUID)
    group = (meta.get("labels") or {}).get(KAI_GROUP)
    return (group, uuid) if uuid and group else None


def pod_allocation(pod: Mapping[str, Any]) -> PodAllocation:
    """What a bound pod holds per container and device (nothing once it ended or unbound)."""
    if not bound(pod):
        return PodAllocation()
    meta, spec = pod["metadata"], pod.get("spec") or {}
    notes: Mapping[str, str] = meta.get("annotations") or {}
    containers = [c.get("name", "") for c in spec.get("containers") or []]
    inits = [c.get("name", "") for c in spec.get("initContainers") or []]
    for key in HAMI_ALLOCATED:
        if notes.get(key):
            return _tuples(notes[key], _hami_names(notes[key], inits, containers), "vgpu")
    if notes.get(VOLCANO_ALLOCATED):
        return _tuples(notes[VOLCANO_ALLOCATED], _volcano_names(spec), "vgpu")
    if KAI_FRACTION in notes or KAI_MEMORY in notes:
        return _kai(notes, meta.get("labels") or {}, containers)
    if any(notes.get(key) for key in SCHEDULED_BY_VGPU):
        return PodAllocation()  # a vGPU scheduler's pod whose allocation is not written (yet)
    return _whole(spec)


def _segments(text: str) -> list[str]:
    parts = text.split(";")
    return parts[:-1] if parts and parts[-1] == "" else parts


def _hami_names(text: str, inits: list[str], containers: list[str]) -> list[str]:
    """Container of each segment: init containers first (v2.9+), else the containers alone."""
    count = len(_segments(text))
    return inits + containers if inits and count == len(inits) + len(containers) else containers


def _volcano_names(spec: Mapping[str, Any]) -> list[str]:
    return [
        c.get("name", "")
        for c in spec.get("containers") or []
        if any(r in ((c.get("resources") or {}).get("limits") or {}) for r in VOLCANO_RESOURCES)
    ]


def _tuples(text: str, names: Sequence[str], kind: str) -> PodAllocation:
    """Grants from the ``UUID,TYPE,MEM,CORES:`` per container format; bad segments left out."""
    grants: list[Grant] = []
    errors: list[str] = []
    segments = _segments(text)
    if len(segments) > len(names):
        errors.append("containers")
    for name, segment in zip(names, segments, strict=False):
        try:
            grants.extend(_segment(name, segment, kind))
        except Malformed as exc:
            errors.append(exc.reason)
    return PodAllocation(tuple(grants), tuple(errors))


def _segment(container: str, segment: str, kind: str) -> list[Grant]:
    out = []
    for index, device in enumerate(d for d in segment.split(":") if d):
        fields = device.split(",")
        if len(fields) < 4:
            raise Malformed("fields", f"device {device!r} has {len(fields)} fields, not 4")
        try:
            mib, cores = int(fields[2]), int(fields[3])
        except ValueError:
            raise Malformed("number", f"device {device!r}: memory or cores not a number") from None
        if mib < 0 or not 0 <= cores <= 100:
            raise Malformed("range", f"device {device!r}: memory or cores out of range")
        uuid = labelsets.device_uuid(_MIG_SUFFIX.sub("", fields[0]))
        out.append(Grant(container, index, uuid, float(mib * MIB), cores / 100, kind))
    return out


def _kai(
    notes: Mapping[str, str], labels: Mapping[str, str], containers: list[str]
) -> PodAllocation:
    """KAI shares: each device gets the fraction (or the MiB); the cards come from the groups."""
    try:
        devices = int(notes.get(KAI_DEVICES, "1"))
        fraction = float(notes[KAI_FRACTION]) if KAI_FRACTION in notes else None
        memory = float(notes[KAI_MEMORY]) * MIB if KAI_MEMORY in notes else None
    except ValueError:
        return PodAllocation(errors=("fraction",))
    if devices < 1 or (fraction is not None and not 0 < fraction <= 1) or (memory or 0) < 0:
        return PodAllocation(errors=("fraction",))
    container = notes.get(KAI_CONTAINER) or (containers[0] if containers else "")
    grants = tuple(Grant(container, i, "", memory, fraction, "fraction") for i in range(devices))
    return PodAllocation(grants, (), _kai_groups(labels))


def _kai_groups(labels: Mapping[str, str]) -> tuple[str, ...]:
    if KAI_GROUP in labels:
        return (labels[KAI_GROUP],)
    prefix = KAI_GROUP + "/"
    return tuple(sorted(v for k, v in labels.items() if k.startswith(prefix)))


def resolve_kai(allocation: PodAllocation, uuid_of: Callable[[str], str | None]) -> PodAllocation:
    """KAI grants with the card UUID of their reservation group (empty while unknown).

    Device *i* is in the *i*-th group, groups sorted by name (the pod's labels
    have no order).
    """
    groups = allocation.kai_groups
    if not groups:
        return allocation
    grants = tuple(
        replace(g, device_uuid=labelsets.device_uuid(uuid_of(groups[g.vdevice_index]) or ""))
        if g.vdevice_index < len(groups)
        else g
        for g in allocation.grants
    )
    return PodAllocation(grants, allocation.errors, groups)


def _whole(spec: Mapping[str, Any]) -> PodAllocation:
    """Whole cards (``nvidia.com/gpu``) and MIG instances (``nvidia.com/mig-*``) asked for in
    limits; their UUIDs are not in the object (the kubelet's PodResources API has them).

    A container's devices are numbered whole cards first, then MIG instances by
    resource name, as the kubelet lists them.
    """
    grants: list[Grant] = []
    errors: list[str] = []
    for c in spec.get("containers") or []:
        limits = (c.get("resources") or {}).get("limits") or {}
        asked: list[tuple[str, str, float | None]] = (
            [(WHOLE_GPU, "whole", 1.0)] if WHOLE_GPU in limits else []
        )
        asked += [(name, "mig", None) for name in sorted(limits) if name.startswith(MIG_PREFIX)]
        index = 0
        for resource, kind, cores in asked:
            try:
                count = int(str(limits[resource]))
            except ValueError:
                errors.append("number")
                continue
            grants.extend(
                Grant(c.get("name", ""), index + i, "", None, cores, kind) for i in range(count)
            )
            index += max(count, 0)
    return PodAllocation(tuple(grants), tuple(errors))


def parse_quantity(text: object) -> float:
    """A Kubernetes resource quantity (``1Gi``, ``500m``, ``2e3``) as a number.

    Written here because kubernetes_asyncio, unlike the synchronous client,
    ships no quantity parser, and a second Kubernetes client for one regex is
    not worth its weight.
    """
    match = _QUANTITY.fullmatch(str(text).strip())
    if match is None:
        raise ValueError(f"not a quantity: {text!r}")
    number, suffix = match.groups()
    try:
        value = Decimal(number)
    except InvalidOperation:
        raise ValueError(f"not a quantity: {text!r}") from None
    if suffix and suffix.endswith("i"):
        value *= 1024 ** ("KMGTPE".index(suffix[0]) + 1)
    elif suffix:
        value *= Decimal(10) ** _SUFFIX[suffix]
    return float(value)


def claim_results(claim: Mapping[str, Any]) -> tuple[tuple[DeviceResult, ...], tuple[str, ...]]:
    """The devices a ResourceClaim was allocated, and the reasons of results left out."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results: list[DeviceResult] = []
    errors: list[str] = []
    for result in (allocation.get("devices") or {}).get("results") or []:
        capacity = result.get("consumedCapacity") or {}
        try:
            memory = float(parse_quantity(capacity["memory"])) if "memory" in capacity else None
            cores = float(parse_quantity(capacity["cores"])) / 100 if "cores" in capacity else None
        except (ValueError, TypeError, ArithmeticError):
            errors.append("claim")
            continue
        if (memory is not None and memory < 0) or (cores is not None and not 0 <= cores <= 1):
            errors.append("claim")
            continue
        results.append(
            DeviceResult(
                str(result.get("driver", "")),
                str(result.get("pool", "")),
                str(result.get("device", "")),
                memory,
                cores,
            )
        )
    return tuple(results), tuple(errors)


def claim_grants(
    containers: str, results: Sequence[DeviceResult], uuid_of: Callable[[DeviceResult], str]
) -> list[Grant]:
    """Grants of one claim's devices, labelled as its usage is: the containers naming it, joined."""
    return [
        Grant(
            containers,
            index,
            labelsets.device_uuid(uuid_of(result)),
            result.memory,
            result.cores,
            "dra",
        )
        for index, result in enumerate(results)
    ]
