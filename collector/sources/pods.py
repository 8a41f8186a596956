"""Who a pod UID or a ResourceClaim UID is: the attribution of pushed regions.

The collector watches pods once for the whole cluster; agents send only UIDs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kubernetes_asyncio import client

from collector.sources.kubernetes import Backoff, Timeouts, Watcher


@dataclass(frozen=True, slots=True)
class PodRef:
    """The identity of a pod as the outputs label it."""

    uid: str
    namespace: str
    name: str
    node: str


class PodDirectory(Protocol):
    """Looks pods up by UID, and claims by UID to the pod they are reserved for."""

    def pod(self, uid: str) -> PodRef | None:
        """The pod with this UID, if it exists now."""

    def claim_pod(self, uid: str) -> PodRef | None:
        """The first pod a ResourceClaim is reserved for, if claim and pod exist now."""


def pod_ref(pod: Mapping[str, Any]) -> PodRef:
    """The :class:`PodRef` of a pod object."""
    meta = pod["metadata"]
    return PodRef(
        meta["uid"],
        meta.get("namespace", ""),
        meta["name"],
        pod.get("spec", {}).get("nodeName") or "",
    )


def claim_consumers(claim: Mapping[str, Any]) -> tuple[str, ...]:
    """The UIDs of the pods a ResourceClaim is reserved for, in the order listed."""
    reserved = (claim.get("status") or {}).get("reservedFor") or []
    return tuple(r["uid"] for r in reserved if r.get("resource") == "pods" and r.get("uid"))


@dataclass(frozen=True, slots=True)
class StaticDirectory:
    """A fixed directory, for the demo and for collectors without Kubernetes."""

    pods: Mapping[str, PodRef]
    claims: Mapping[str, tuple[str, ...]]

    def pod(self, uid: str) -> PodRef | None:
        """The pod with this UID."""
        return self.pods.get(uid)

    def claim_pod(self, uid: str) -> PodRef | None:
        """The first known pod the claim is reserved for."""
        return next((p for u in self.claims.get(uid, ()) if (p := self.pods.get(u))), None)


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
            claim_consumers,
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

    def claim_pod(self, uid: str) -> PodRef | None:
        """The first existing pod the claim is reserved for."""
        consumers = self._claims.objects.get(uid, ())
        return next((p for u in consumers if (p := self._pods.objects.get(u))), None)

    async def run(self) -> None:
        """Watch pods and claims until cancelled."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self._pods.run(), name="watch all pods")
            group.create_task(self._claims.run(), name="watch resourceclaims")
