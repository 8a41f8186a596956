"""Which card each container holds, as each node's kubelet tells its agent.

A pod object names the cards of a vGPU share (HAMi's and Volcano's annotations)
but not those of a whole card or a MIG instance: the device plugin picks them
at admission and only the kubelet knows. Agents read the kubelet's PodResources
API and push what it says; the allocation source fills in ``device_uuid`` of the
grants the pod object left empty from here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from operator import attrgetter

from collector.normalise import labelsets
from collector.normalise.allocation import Grant
from core.payload import Assignment

ContainerKey = tuple[str, str, str]
"""namespace, pod, container."""

FILLED_KINDS = frozenset({"whole", "mig"})
"""The grants whose cards only the kubelet knows."""


def by_container(assignments: Iterable[Assignment]) -> dict[ContainerKey, tuple[str, ...]]:
    """Each container's devices (``device_uuid`` values): by resource name, then in the
    kubelet's order (the kubelet lists resources in no fixed order; the allocation numbers
    a container's whole cards, ``nvidia.com/gpu``, before its ``nvidia.com/mig-*``)."""
    held: dict[ContainerKey, list[str]] = {}
    for a in sorted(assignments, key=attrgetter("resource")):
        held.setdefault((a.namespace, a.pod, a.container), []).extend(
            labelsets.device_uuid(d) for d in a.devices
        )
    return {key: tuple(devices) for key, devices in held.items()}


class Assignments:
    """The latest PodResources answer of every node that pushed one."""

    def __init__(self) -> None:
        self._nodes: dict[str, dict[ContainerKey, tuple[str, ...]]] = {}
        self._all: dict[ContainerKey, tuple[str, ...]] = {}

    def put(self, node: str, assignments: Iterable[Assignment]) -> None:
        """Replace what ``node``'s kubelet said with its latest answer."""
        frozen = by_container(assignments)
        if self._nodes.get(node) != frozen:
            self.forget(node)
            self._nodes[node] = frozen
            self._all.update(frozen)

    def forget(self, node: str) -> None:
        """Drop a node whose agent went stale."""
        for key in self._nodes.pop(node, {}):
            self._all.pop(key, None)

    def devices(self, namespace: str, pod: str, container: str) -> tuple[str, ...]:
        """The container's device UUIDs in the kubelet's order; empty when no kubelet said."""
        return self._all.get((namespace, pod, container), ())

    def fill(self, namespace: str, pod: str, grants: tuple[Grant, ...]) -> tuple[Grant, ...]:
        """``grants`` with the card of each whole-card or MIG grant the kubelet names.

        The *i*-th such grant of a container is the container's *i*-th device;
        the same tuple comes back when nothing changes, so cached keys still match.
        """
        if not self._all or not any(g.kind in FILLED_KINDS and not g.device_uuid for g in grants):
            return grants
        filled = []
        for grant in grants:
            devices = self.devices(namespace, pod, grant.container)
            if (
                grant.kind in FILLED_KINDS
                and not grant.device_uuid
                and grant.vdevice_index < len(devices)
            ):
                grant = replace(grant, device_uuid=devices[grant.vdevice_index])
            filled.append(grant)
        return tuple(filled)
