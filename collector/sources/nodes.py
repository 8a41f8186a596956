"""What every GPU node registers of its cards: one cluster-wide watch of Nodes.

Full Node objects, status included: the allocatable count of the device
plugin's resource is half of a card's health (:mod:`collector.normalise.registration`).
Each object is read into its :class:`~collector.normalise.registration.Capacity`
as it arrives, and only that is kept; a node without any GPU record is not
kept at all. The watch is the pod watch's :class:`~collector.sources.kubernetes.Watcher`:
list, watch from the list's version, relist on 410, back off while the API is away.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kubernetes_asyncio import client

from collector.normalise.registration import Capacity, capacity
from collector.sources.kubernetes import Backoff, Timeouts, Watcher
from collector.sources.targets import DiscoveryState


class NodeDirectory(Protocol):
    """The nodes that register GPUs, as their Node objects say now."""

    def capacities(self) -> Collection[Capacity]:
        """What each node with a GPU record registers."""


@dataclass(frozen=True, slots=True)
class StaticNodes:
    """A fixed set of nodes, for collectors without Kubernetes (the demo) and for tests."""

    nodes: tuple[Capacity, ...]

    @classmethod
    def of(cls, objects: Iterable[Mapping[str, Any]]) -> StaticNodes:
        """The nodes of Node objects as the API serves them, read as the watch reads them."""
        return cls(tuple(found for found in map(capacity, objects) if found is not None))

    def capacities(self) -> Collection[Capacity]:
        """What each node registers."""
        return self.nodes


def _nothing() -> None:
    """The capacity source reads the directory every interval: nobody needs telling."""


class KubernetesNodes:
    """One cluster-wide list and watch of Nodes."""

    def __init__(
        self,
        core: client.CoreV1Api,
        timeouts: Timeouts,
        backoff: tuple[float, float] = (0.5, 30.0),
    ) -> None:
        self._nodes: Watcher[Capacity] = Watcher(
            "nodes",
            core.list_node,
            core.list_node,
            "",
            "",
            capacity,
            _nothing,
            timeouts,
            Backoff(*backoff),
        )

    @property
    def synced(self) -> bool:
        """Whether the nodes have been listed once."""
        return self._nodes.synced.is_set()

    def status(self) -> DiscoveryState:
        """The watch's state, for the status page."""
        return self._nodes.status()

    def capacities(self) -> Collection[Capacity]:
        """What each node with a GPU record registers now."""
        return self._nodes.objects.values()

    async def run(self) -> None:
        """Watch the nodes until cancelled."""
        await self._nodes.run()
