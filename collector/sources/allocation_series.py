"""The allocation series: what the pod watch says each container holds, one batch per node.

Every ``interval`` the directory's holdings (:meth:`PodDirectory.holdings`)
become, per node, one :class:`~collector.normalise.batch.Batch` of
:data:`~collector.normalise.schema.ALLOCATION_FAMILIES` from a source of kind
``allocation``, which ranks below every monitor and agent. Each vGPU's series
carry exactly the labels of its usage series (``namespace, pod, container,
vdevice_index, device_uuid, zone`` and the store's ``node``), so ``used /
allocated`` joins one to one.

This source reads the store as well as the directory, which no other source
does: a vGPU that no monitor or agent reports yet gets a stand-in usage of 0,
``hami_container_idle_seconds`` is the usage's seconds since the last
kernel, or the time since the pod started where no kernel ever ran, and a MIG
instance's allocated memory is the instance's memory as its node agent reads it
(``hami_mig_memory_total_bytes``: the pod object names only the profile). These
need to know what the real sources say; only the other sources' batches are
read, never this source's own.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace

from collector.normalise import labelsets, schema
from collector.normalise.allocation import Grant
from collector.normalise.batch import Batch, Source
from collector.normalise.labelsets import key_labels
from collector.normalise.schema import SourceKind
from collector.sources.kubelet_devices import Assignments
from collector.sources.pods import Holding, PodDirectory, PodRef
from collector.sources.refreshed import Refreshed
from collector.store.latest import NodeView, Store

_STAND_INS = (schema.VGPU_MEMORY_USED, schema.VGPU_UTILIZATION)
_VGPU_FAMILIES = (schema.VGPU_MEMORY_LIMIT, schema.LAST_KERNEL, schema.IDLE, *_STAND_INS)
"""The families of a vGPU the allocation source reads or writes beside the allocated ones."""


@dataclass(frozen=True, slots=True)
class AllocationConfig:
    """How often the batches are remade, and the rank they get (below every real source)."""

    interval: float
    priority: int


class AllocationSource(Refreshed):
    """Puts each node's allocation batch into the store every interval, removes gone nodes'."""

    def __init__(
        self,
        directory: PodDirectory,
        store: Store,
        config: AllocationConfig,
        malformed: Callable[[str], None],
        clock: Callable[[], float] = time.time,
        assignments: Assignments | None = None,
    ) -> None:
        self._directory = directory
        self._assignments = assignments or Assignments()
        self._store = store
        self._config = config
        self._malformed = malformed
        self._clock = clock
        self._sources: dict[str, Source] = {}
        self._reported: set[str] = set()
        self._keys = KeyCache()

    @property
    def interval(self) -> float:
        """Seconds between two refreshes: the collector's interval."""
        return self._config.interval

    def refreshing(self, chunk: int = 100) -> Iterator[None]:
        """:meth:`refresh` in steps of ``chunk`` nodes (a big cluster's takes a while)."""
        now, received = self._clock(), time.monotonic()
        by_node: dict[str, list[Holding]] = {}
        for holding in self._directory.holdings():
            by_node.setdefault(holding.pod.node, []).append(self._filled(holding))
        self._count_errors(by_node.values())
        for node in self._sources.keys() - by_node.keys():
            self._store.remove(self._sources.pop(node).id)
        for done, (node, held) in enumerate(by_node.items(), 1):
            source = self._source(node)
            real = _real_series(self._store.view(node), source.id)
            self._store.put(source, node_batch(held, real, now, self._keys), received, now)
            if done % chunk == 0:
                yield
        self._keys.sweep()

    def _filled(self, holding: Holding) -> Holding:
        """The holding with the cards its kubelet names for whole-card and MIG grants."""
        pod = holding.pod
        grants = self._assignments.fill(pod.namespace, pod.name, holding.grants)
        return holding if grants is holding.grants else replace(holding, grants=grants)

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


@dataclass(frozen=True, slots=True)
class _VgpuKeys:
    """The keys of one allocated vGPU: its stand-ins, its last kernel, its idle time.

    ``limit`` is set for a share whose memory the pod object does not give (a
    KAI fraction): its allocated memory is the limit HAMi-core enforces, once
    a monitor reports it.
    """

    stand_ins: tuple[bytes, ...]
    last_kernel: bytes
    idle: bytes
    limit: tuple[bytes, bytes] | None = None
    """The limit's key and the allocated memory's."""


@dataclass(frozen=True, slots=True)
class _PodKeys:
    """A pod's series keys, made once per pod version: the fixed series, each vGPU's, and
    each MIG instance's allocated memory key with the instance's UUID."""

    fixed: tuple[tuple[bytes, float], ...]
    vgpus: tuple[_VgpuKeys, ...]
    migs: tuple[tuple[bytes, str], ...] = ()


@dataclass(frozen=True, slots=True)
class _Cached:
    """The keys made for a pod, and the pod version and grants they were made from."""

    pod: PodRef
    grants: tuple[Grant, ...]
    keys: _PodKeys


class KeyCache:
    """Series keys per pod, kept while the pod holds the same grants.

    Making the keys was nine tenths of a refresh (500 nodes of 28 vGPUs: 2 s on
    a busy core); a pod's grants rarely change, so each pod pays once. A pod
    whose object did not change holds the very same grants, which compare by
    identity.
    """

    def __init__(self) -> None:
        self._keys: dict[str, _Cached] = {}
        self._used: dict[str, _Cached] = {}

    def keys(self, holding: Holding) -> _PodKeys:
        """The keys of a holding's pod and grants."""
        pod, grants = holding.pod, holding.grants
        cached = self._used.get(pod.uid) or self._keys.get(pod.uid)
        if cached is not None and _same(cached.pod, pod) and cached.grants == grants:
            keys = cached.keys
        else:
            keys = _pod_keys(pod.namespace, pod.name, grants)
        self._used[pod.uid] = _Cached(pod, grants, keys)
        return keys

    def sweep(self) -> None:
        """Forget the keys of pods not asked for since the last sweep."""
        self._keys, self._used = self._used, {}


def _same(a: PodRef, b: PodRef) -> bool:
    return a is b or (a.namespace, a.name) == (b.namespace, b.name)


def node_batch(
    held: Iterable[Holding],
    real: Mapping[bytes, float],
    now: float,
    cache: KeyCache | None = None,
) -> Batch:
    """The allocation series of one node's pods, given the node's real series."""
    cache = cache or KeyCache()
    series: dict[bytes, float] = {}
    instances: Mapping[str, float] | None = None
    for holding in held:
        keys = cache.keys(holding)
        series.update(keys.fixed)
        for allocated, mig_uuid in keys.migs:
            if instances is None:
                instances = mig_memory(real)
            memory = instances.get(mig_uuid)
            if memory is not None:
                series[allocated] = memory
        started = holding.pod.started
        for vgpu in keys.vgpus:
            if vgpu.limit is not None and vgpu.limit[0] in real:
                series[vgpu.limit[1]] = real[vgpu.limit[0]]
            for key in vgpu.stand_ins:
                if key not in real:
                    series[key] = 0.0
            elapsed = real.get(vgpu.last_kernel)
            if elapsed is None and started is not None:  # the series exists once a kernel ran
                elapsed = max(0.0, now - started)
            if elapsed is not None:
                series[vgpu.idle] = elapsed
    return Batch(series, samples=len(series), families=schema.ALLOCATION_FAMILIES)


_MIG_TOTAL = schema.MIG_MEMORY_TOTAL.encode() + b"{"


def mig_memory(real: Mapping[bytes, float]) -> Mapping[str, float]:
    """Each MIG instance's memory on the node (by MIG UUID, cut as a ``device_uuid`` is), as
    its agent reads it through NVML. Read only for a node with MIG grants: it looks at every key of the node."""
    found: dict[str, float] = {}
    for key, value in real.items():
        if key.startswith(_MIG_TOTAL):
            uuid = dict(key_labels(key)[1]).get("mig_uuid")
            if uuid:
                found[labelsets.device_uuid(uuid)] = value  # as a grant's UUID is cut
    return found


def _pod_keys(namespace: str, pod: str, grants: tuple[Grant, ...]) -> _PodKeys:
    fixed: list[tuple[bytes, float]] = []
    migs: list[tuple[bytes, str]] = []
    for kind, container in sorted({(g.kind, g.container) for g in grants}):
        info = labelsets.container_info(namespace, pod, container, kind)
        fixed.append((labelsets.key(schema.GPU_INFO, info), 1.0))
    vgpus = []
    for grant in grants:
        labels = labelsets.vgpu(
            namespace, pod, grant.container, grant.vdevice_index, grant.device_uuid
        )
        allocated, cores, limit, last_kernel, idle, *stand_ins = labelsets.keys(
            (schema.MEMORY_ALLOCATED, schema.CORE_ALLOCATED, *_VGPU_FAMILIES), labels
        )
        if grant.memory is not None:
            fixed.append((allocated, grant.memory))
        elif grant.kind == "mig" and grant.device_uuid:
            migs.append((allocated, labelsets.device_uuid(grant.device_uuid)))
        if grant.cores is not None:
            fixed.append((cores, grant.cores))
        if grant.kind not in (
            "whole",
            "mig",
        ):  # no HAMi-core region: neither usage to stand in for nor kernels
            own_limit = None if grant.memory is not None else (limit, allocated)
            vgpus.append(_VgpuKeys(tuple(stand_ins), last_kernel, idle, own_limit))
    return _PodKeys(tuple(fixed), tuple(vgpus), tuple(migs))
