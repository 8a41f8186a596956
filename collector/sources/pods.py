"""Who a pod UID or a ResourceClaim UID is, and what each pod holds.

The collector watches pods once for the whole cluster; agents send only UIDs,
which this directory attributes. The same watch (with the ResourceClaims and
ResourceSlices) tells what GPUs each bound pod was given
(:mod:`collector.normalise.allocation`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from kubernetes_asyncio import client

from collector.normalise import allocation
from collector.normalise.allocation import DeviceResult, Grant, PodAllocation
from collector.sources.kubernetes import Backoff, Timeouts, Watcher
from collector.sources.targets import DiscoveryState

SliceKey = tuple[str, str, str]
"""A ResourceSlice device: driver, pool, device name."""


@dataclass(frozen=True, slots=True)
class PodRef:
    """The identity of a pod as the outputs label it.

    ``claim_containers`` maps the name of each ResourceClaim the pod uses to the
    ``container`` label its usage gets: the containers that reference it.
    ``allocation`` is what the pod's own object says it holds, ``bound``
    whether it holds it now (on a node, not ended), ``started`` when it
    started (Unix seconds), ``reserves`` a KAI reservation pod's (group, UUID).
    ``containers`` maps each running container's ID (the runtime's, without its
    ``containerd://`` scheme) to its name: NVML's processes name their container
    by the ID in their cgroup.
    """

    uid: str
    namespace: str
    name: str
    node: str
    claim_containers: Mapping[str, str] = field(default_factory=dict)
    allocation: PodAllocation = field(default_factory=PodAllocation)
    bound: bool = False
    started: float | None = None
    reserves: tuple[str, str] | None = None
    containers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Claim:
    """A ResourceClaim: its name, the UIDs of the pods it is reserved for, its devices.

    ``errors`` are the reasons of allocation results that could not be read.
    """

    name: str
    consumers: tuple[str, ...]
    results: tuple[DeviceResult, ...] = ()
    errors: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Holding:
    """What one bound pod holds, every card resolved as far as the cluster tells."""

    pod: PodRef
    grants: tuple[Grant, ...]
    errors: tuple[str, ...]


class PodDirectory(Protocol):
    """Looks pods up by UID, and claims by UID to the pod (and containers) using them."""

    def pod(self, uid: str) -> PodRef | None:
        """The pod with this UID, if it exists now."""

    def claim_owner(self, uid: str) -> tuple[PodRef, str] | None:
        """The first existing pod a ResourceClaim is reserved for, and its container label."""

    def holdings(self) -> list[Holding]:
        """What every bound pod holds now."""


def pod_ref(pod: Mapping[str, Any]) -> PodRef:
    """The :class:`PodRef` of a pod object."""
    meta, spec = pod["metadata"], pod.get("spec") or {}
    return PodRef(
        meta["uid"],
        meta.get("namespace", ""),
        meta["name"],
        spec.get("nodeName") or "",
        _claim_containers(pod),
        allocation.pod_allocation(pod),
        allocation.bound(pod),
        allocation.started(pod),
        allocation.reserved_uuid(pod),
        _container_ids(pod),
    )


_STATUSES = ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses")


def _container_ids(pod: Mapping[str, Any]) -> dict[str, str]:
    """Container ID -> name, from ``status.*ContainerStatuses[].containerID`` (``containerd://<id>``)."""
    status = pod.get("status") or {}
    ids = {}
    for kind in _STATUSES:
        for container in status.get(kind) or []:
            _, _, found = str(container.get("containerID") or "").partition("://")
            if found and container.get("name"):
                ids[found] = container["name"]
    return ids


def _claim_containers(pod: Mapping[str, Any]) -> dict[str, str]:
    """Claim object name -> the containers (comma-joined) whose resources name it."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    actual = {c["name"]: c.get("resourceClaimName") for c in spec.get("resourceClaims") or []}
    for generated in status.get("resourceClaimStatuses") or []:
        actual[generated["name"]] = generated.get("resourceClaimName")
    users: dict[str, list[str]] = {}
    for container in spec.get("containers") or []:
        for ref in (container.get("resources") or {}).get("claims") or []:
            claim = actual.get(ref.get("name"))
            if claim:
                users.setdefault(claim, []).append(container["name"])
    return {claim: ",".join(sorted(names)) for claim, names in users.items()}


def claim_of(claim: Mapping[str, Any]) -> Claim:
    """The :class:`Claim` of a ResourceClaim object: reserved-for pods in the order listed."""
    reserved = (claim.get("status") or {}).get("reservedFor") or []
    consumers = tuple(r["uid"] for r in reserved if r.get("resource") == "pods" and r.get("uid"))
    results, errors = allocation.claim_results(claim)
    return Claim(claim["metadata"]["name"], consumers, results, errors)


def slice_devices(resource_slice: Mapping[str, Any]) -> tuple[tuple[SliceKey, str], ...]:
    """The card UUID of each device of a ResourceSlice that names one (``attributes.uuid``)."""
    spec = resource_slice.get("spec") or {}
    driver, pool = spec.get("driver", ""), (spec.get("pool") or {}).get("name", "")
    out = []
    for device in spec.get("devices") or []:
        uuid = ((device.get("attributes") or {}).get("uuid") or {}).get("string")
        if uuid:
            out.append(((driver, pool, device.get("name", "")), str(uuid)))
    return tuple(out)


def holdings(
    pods: Mapping[str, PodRef],
    claims: Mapping[str, Claim],
    slices: Mapping[SliceKey, str],
) -> list[Holding]:
    """What every bound pod holds: its own allocation, KAI cards resolved, and its claims' devices."""
    groups = {ref.reserves[0]: ref.reserves[1] for ref in pods.values() if ref.reserves}
    claimed: dict[str, list[Claim]] = {}
    for claim in claims.values():
        for uid in claim.consumers[:1]:  # usage goes to the first consumer: so does allocation
            claimed.setdefault(uid, []).append(claim)
    out = []
    for ref in pods.values():
        if not ref.bound:
            continue
        own = allocation.resolve_kai(ref.allocation, groups.get)
        grants, errors = list(own.grants), list(own.errors)
        for claim in claimed.get(ref.uid, ()):
            containers = ref.claim_containers.get(claim.name, "")
            uuid_of = _slice_uuid(slices)
            grants.extend(allocation.claim_grants(containers, claim.results, uuid_of))
            errors.extend(claim.errors)
        if grants or errors:
            out.append(Holding(ref, tuple(grants), tuple(errors)))
    return out


def _slice_uuid(slices: Mapping[SliceKey, str]) -> Callable[[DeviceResult], str]:
    def uuid_of(result: DeviceResult) -> str:
        return slices.get((result.driver, result.pool, result.device), "")

    return uuid_of


def _owner(claim: Claim | None, pods: Mapping[str, PodRef]) -> tuple[PodRef, str] | None:
    if claim is None:
        return None
    for uid in claim.consumers:
        pod = pods.get(uid)
        if pod is not None:
            return pod, pod.claim_containers.get(claim.name, "")
    return None


@dataclass(frozen=True, slots=True)
class StaticDirectory:
    """A fixed directory, for collectors without Kubernetes and for tests."""

    pods: Mapping[str, PodRef]
    claims: Mapping[str, Claim]
    slices: Mapping[SliceKey, str] = field(default_factory=dict)

    def pod(self, uid: str) -> PodRef | None:
        """The pod with this UID."""
        return self.pods.get(uid)

    def claim_owner(self, uid: str) -> tuple[PodRef, str] | None:
        """The first known pod the claim is reserved for, and its container label."""
        return _owner(self.claims.get(uid), self.pods)

    def holdings(self) -> list[Holding]:
        """What every bound pod holds."""
        return holdings(self.pods, self.claims, self.slices)


def _nothing() -> None:
    """Attribution reads the directory on demand: nobody needs telling of a change."""


class KubernetesDirectory:
    """One cluster-wide watch of pods, one of ResourceClaims and one of ResourceSlices.

    Claims attribute HAMi-DRA regions and hold DRA allocations; slices name the
    card (UUID) behind each allocated DRA device.
    """

    def __init__(
        self,
        core: client.CoreV1Api,
        resource: client.ResourceV1Api,
        timeouts: Timeouts,
        backoff: tuple[float, float] = (0.5, 30.0),
    ) -> None:
        self._pods = Watcher(
            "pods",
            core.list_pod_for_all_namespaces,
            core.list_namespaced_pod,
            "",
            "",
            pod_ref,
            _nothing,
            timeouts,
            Backoff(*backoff),
        )
        self._claims = Watcher(
            "resourceclaims",
            resource.list_resource_claim_for_all_namespaces,
            resource.list_namespaced_resource_claim,
            "",
            "",
            claim_of,
            _nothing,
            timeouts,
            Backoff(*backoff),
        )
        self._slices = Watcher(
            "resourceslices",
            resource.list_resource_slice,
            resource.list_resource_slice,
            "",
            "",
            slice_devices,
            _nothing,
            timeouts,
            Backoff(*backoff),
        )

    @property
    def synced(self) -> bool:
        """Whether the pods have been listed once (claims are optional: older clusters lack them)."""
        return self._pods.synced.is_set()

    def pod(self, uid: str) -> PodRef | None:
        """The pod with this UID, if it exists now."""
        return self._pods.objects.get(uid)

    def status(self) -> list[DiscoveryState]:
        """The pod and claim watches' states."""
        return [self._pods.status(), self._claims.status()]

    def claim_owner(self, uid: str) -> tuple[PodRef, str] | None:
        """The first existing pod the claim is reserved for, and its container label."""
        return _owner(self._claims.objects.get(uid), self._pods.objects)

    def holdings(self) -> list[Holding]:
        """What every bound pod holds now."""
        slices = {key: uuid for devices in self._slices.objects.values() for key, uuid in devices}
        return holdings(self._pods.objects, self._claims.objects, slices)

    async def run(self) -> None:
        """Watch pods, claims and slices until cancelled."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self._pods.run(), name="watch all pods")
            group.create_task(self._claims.run(), name="watch resourceclaims")
            group.create_task(self._slices.run(), name="watch resourceslices")
