"""The allocation series: what the pod watch says each container holds, one batch per node.

Every ``interval`` the directory's holdings (:meth:`PodDirectory.holdings`)
become, per node, one :class:`~collector.batch.Batch` of
:data:`~collector.schema.ALLOCATION_FAMILIES` from a source of kind
``allocation``, which ranks below every monitor and agent. Each vGPU's series
carry exactly the labels of its usage series (``namespace, pod, container,
vdevice_index, device_uuid, zone`` and the store's ``node``), so ``used /
allocated`` joins one to one.

This source reads the store as well as the directory, which no other source
does: a vGPU that no monitor or agent reports yet gets a stand-in usage of 0,
and ``hami_container_idle_seconds`` is the usage's seconds since the last
kernel, or the time since the pod started where no kernel ever ran. Both need
to know what the real sources say; only the other sources' batches are read,
never this source's own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from collector import schema
from collector.allocation import Grant
from collector.batch import Batch, Source
from collector.exposition.render import series_key
from collector.schema import SourceKind
from collector.sources.pods import Holding, PodDirectory
from collector.store import NodeView, Store

_STAND_INS = (schema.VGPU_MEMORY_USED, schema.VGPU_UTILIZATION)


@dataclass(frozen=True, slots=True)
class AllocationConfig:
    """How often the batches are remade, and the rank they get (below every real source)."""

    interval: float
    priority: int


class AllocationSource:
    """Puts each node's allocation batch into the store every interval, removes gone nodes'."""

    def __init__(
        self,
        directory: PodDirectory,
        store: Store,
        config: AllocationConfig,
        malformed: Callable[[str], None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._directory = directory
        self._store = store
        self._config = config
        self._malformed = malformed
        self._clock = clock
        self._sources: dict[str, Source] = {}
        self._reported: set[str] = set()

    async def run(self) -> None:
        """Remake the batches every interval until cancelled."""
        while True:
            self.refresh()
            await asyncio.sleep(self._config.interval)

    def refresh(self) -> None:
        """Put one batch per node that holds allocations; remove the nodes that hold none now."""
        now, received = self._clock(), time.monotonic()
        by_node: dict[str, list[Holding]] = {}
        for holding in self._directory.holdings():
            by_node.setdefault(holding.pod.node, []).append(holding)
        self._count_errors(by_node.values())
        for node in self._sources.keys() - by_node.keys():
            self._store.remove(self._sources.pop(node).id)
        for node, held in by_node.items():
            source = self._source(node)
            real = _real_series(self._store.view(node), source.id)
            self._store.put(source, node_batch(held, real, now), received, now)

    def _source(self, node: str) -> Source:
        source = self._sources.get(node)
        if source is None:
            source = Source(
                f"allocation/{node}",
                "pod watch",
                node,
                SourceKind.ALLOCATION,
                self._config.priority,
            )
            self._sources[node] = source
        return source

    def _count_errors(self, nodes: Iterable[list[Holding]]) -> None:
        """Count each pod's unreadable parts once while it lives (the watch re-reads it often)."""
        current = set()
        for held in nodes:
            for holding in held:
                if not holding.errors:
                    continue
                current.add(holding.pod.uid)
                if holding.pod.uid not in self._reported:
                    for reason in holding.errors:
                        self._malformed(reason)
        self._reported = current


def _real_series(view: NodeView | None, own: str) -> Mapping[bytes, float]:
    """The node's series from every source but ``own``: what monitors and agents report."""
    if view is None:
        return {}
    others = [held for held in view.sources if held.source.id != own]
    if len(others) == 1:
        return others[0].batch.series
    merged: dict[bytes, float] = {}
    for held in reversed(others):
        merged.update(held.batch.series)
    return merged


def node_batch(held: Iterable[Holding], real: Mapping[bytes, float], now: float) -> Batch:
    """The allocation series of one node's pods, given the node's real series."""
    series: dict[bytes, float] = {}
    for holding in held:
        pod = holding.pod
        for kind, container in sorted({(g.kind, g.container) for g in holding.grants}):
            info = (
                ("container", container),
                ("namespace", pod.namespace),
                ("pod", pod.name),
                ("resource_kind", kind),
            )
            series[series_key(schema.GPU_INFO, info)] = 1.0
        for grant in holding.grants:
            _grant_series(series, grant, pod.namespace, pod.name, pod.started, real, now)
    return Batch(series, samples=len(series), families=schema.ALLOCATION_FAMILIES)


def _grant_series(
    series: dict[bytes, float],
    grant: Grant,
    namespace: str,
    pod: str,
    started: float | None,
    real: Mapping[bytes, float],
    now: float,
) -> None:
    labels = (
        ("container", grant.container),
        ("device_uuid", grant.device_uuid),
        ("namespace", namespace),
        ("pod", pod),
        ("vdevice_index", str(grant.vdevice_index)),
        schema.ZONE,
    )
    if grant.memory is not None:
        series[series_key(schema.MEMORY_ALLOCATED, labels)] = grant.memory
    if grant.cores is not None:
        series[series_key(schema.CORE_ALLOCATED, labels)] = grant.cores
    if grant.kind == "whole":  # no HAMi-core region: neither usage to stand in for nor kernels
        return
    for name in _STAND_INS:
        key = series_key(name, labels)
        if key not in real:
            series[key] = 0.0
    elapsed = real.get(series_key(schema.LAST_KERNEL, labels))
    if elapsed is None and started is not None:  # the series exists once a kernel ran
        elapsed = max(0.0, now - started)
    if elapsed is not None:
        series[series_key(schema.IDLE, labels)] = elapsed
