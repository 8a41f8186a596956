"""The sources made from a watch's state: one batch per node, remade every interval.

The allocation series (from the pod watch) and the capacity series (from the
node watch) are not pulled or pushed: each interval they are made again from
what the watch holds, node by node, letting the event loop serve others
between chunks of nodes. :class:`Refreshed` runs that; its subclasses make the
batches.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Iterator


class Refreshed(ABC):
    """A source whose batches are remade every :attr:`interval` seconds by :meth:`refreshing`."""

    @property
    @abstractmethod
    def interval(self) -> float:
        """Seconds between two refreshes."""

    @abstractmethod
    def refreshing(self, chunk: int = 100) -> Iterator[None]:
        """Put every node's batch, yielding after each ``chunk`` nodes (a big cluster's takes
        a while); remove the nodes that have none now."""

    async def run(self) -> None:
        """Remake the batches every interval until cancelled, letting others run between nodes."""
        while True:
            for _ in self.refreshing():
                await asyncio.sleep(0)
            await asyncio.sleep(self.interval)

    def refresh(self) -> None:
        """Put every node's batch now, at once."""
        for _ in self.refreshing():
            pass
