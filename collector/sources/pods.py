"""Who a pod UID or a ResourceClaim UID is: the attribution of pushed regions.

The collector watches pods once for the whole cluster; agents send only UIDs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from kubernetes_asyncio import client

from collector.sources.kubernetes import Backoff, Timeouts, Watcher
from collector.sources.targets import DiscoveryState


@dataclass(frozen=True, slots=True)
class PodRef:
    """The identity of a pod as the outputs label it.

    ``claim_containers`` maps the name of each ResourceClaim the pod uses to the
    ``container`` label its usage gets: the containers that reference it.
    """

    uid: str
    namespace: str
    name: str
    node: str
    claim_containers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Claim:
    """A ResourceClaim: its name and the UIDs of the pods it is reserved for."""

    name: str
    consumers: tuple[str, ...]


class PodDirectory(Protocol):
    """Looks pods up by UID, and claims by UID to the pod (and containers) using them."""

    def pod(self, uid: str) -> PodRef | None:
        """The pod with this UID, if it exists now."""

    def claim_owner(self, uid: str) -> tuple[PodRef, str] | None:
        """The first existing pod a ResourceClaim is reserved for, and its container label."""


def pod_ref(pod: Mapping[str, Any]) -> PodRef:
    """The :class:`PodRef` of a pod object."""
    meta, spec = pod["metadata"], pod.get("spec") or {}
    return PodRef(
        meta["uid"],
        meta.get("namespace", ""),
        meta["name"],
        spec.get("nodeName") or "",
        _claim_containers(pod),
    )


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
    return Claim(claim["metadata"]["name"], consumers)


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

    def pod(self, uid: str) -> PodRef | None:
        """The pod with this UID."""
        return self.pods.get(uid)

    def claim_owner(self, uid: str) -> tuple[PodRef, str] | None:
        """The first known pod the claim is reserved for, and its container label."""
        return _owner(self.claims.get(uid), self.pods)


def _nothing() -> None:
    """Attribution reads the directory on demand: nobody needs telling of a change."""


class KubernetesDirectory:
    """One cluster-wide watch of pods, and one of ResourceClaims (for HAMi-DRA regions)."""

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

    async def run(self) -> None:
        """Watch pods and claims until cancelled."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self._pods.run(), name="watch all pods")
            group.create_task(self._claims.run(), name="watch resourceclaims")
