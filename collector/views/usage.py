"""The REST API's read model: a node's cards and vGPU containers, parsed once per key set.

A :class:`~collector.store.latest.NodeView` is immutable and replaced whenever its node
changes, which for a scraped node is every scrape. What the view's *keys* say
(which card or container each series belongs to, and as which reading) changes
only when cards or containers come and go, so it is kept as the node's
:class:`Shape`. A new view with the same keys as the last (in steady state the
very same key objects, in the same order) costs one C-level pass of identity
checks plus a read by place per card reading; a new key set costs one label parse per
card and per container vGPU (their families share the label text). Container
readings are taken from the view only when asked for. Nothing is kept for a
node beyond its current view.

Cards are identified by ``device_uuid`` (by ``device_index`` when a flavour
sends no UUID), so two sources' copies of one card with different label sets
(a monitor without ``device_type`` and an agent with it) make one card.
Containers are identified by namespace, pod, container, vdevice index and
device UUID.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Final, NamedTuple

from collector.normalise import schema
from collector.normalise.batch import Series
from collector.normalise.labelsets import card_model, key_labels
from collector.store.latest import NodeView

_CARD_SLOTS: Final[Mapping[bytes, int]] = {
    family.encode(): slot for slot, family in enumerate(schema.CARD_FAMILIES)
}
_CONTAINER_FAMILIES: Final = (
    *schema.VGPU_FAMILIES,
    *(f for _, f in schema.ALLOCATION_READINGS),
    schema.CONTAINER_ENERGY,
)
_CONTAINER_SLOTS: Final[Mapping[bytes, int]] = {
    family.encode(): slot for slot, family in enumerate(_CONTAINER_FAMILIES)
}

_ALLOCATED_SLOT: Final = _CONTAINER_SLOTS[schema.MEMORY_ALLOCATED.encode()]

_CARD_READINGS: Final = tuple(reading for reading, _ in schema.CARD_READINGS)
_VGPU_READINGS: Final = (
    *(reading for reading, _ in (*schema.VGPU_READINGS, *schema.ALLOCATION_READINGS)),
    "energy",
)

CardLabels = tuple[int | None, str, str | None]
"""device_index (None if absent or not a number), device_uuid ("" if absent), device_type."""
ContainerLabels = tuple[str, str, str, str, str]
"""namespace, pod, container, vdevice_index, device_uuid, as the labels spell them."""


class _CardKey(NamedTuple):
    """A key holding reading ``slot`` of the card with these labels."""

    slot: int
    labels: CardLabels

    @property
    def card(self) -> str:
        return self.labels[1] or f"#{self.labels[0]}"


class _ContainerKey(NamedTuple):
    """A key holding reading ``slot`` of the container vGPU with these labels."""

    slot: int
    labels: ContainerLabels


_Info = _CardKey | _ContainerKey | None
"""What a key is to the read model (None: nothing it shows, e.g. build info, MIG)."""
_Places = tuple[int | None, ...]
"""Where each reading's series is in the shape's keys (None: no series carries it)."""


class CardReading(NamedTuple):
    """One physical card's latest readings; a reading no source sent is None."""

    device_index: int | None
    device_uuid: str
    device_type: str | None
    memory_used: int | None
    memory_total: int | None
    utilization: float | None
    memory_controller_utilization: float | None
    temperature: float | None
    power: float | None


class ContainerReading(NamedTuple):
    """One vGPU of one container; a reading no source sent is None."""

    namespace: str
    pod: str
    container: str
    vdevice_index: int | None
    device_uuid: str
    memory_used: int | None
    memory_limit: int | None
    sm_utilization: float | None
    last_kernel_seconds: float | None
    memory_context: int | None
    memory_module: int | None
    memory_buffer: int | None
    memory_allocated: int | None = None
    cores_allocated: float | None = None
    """Share of the card's cores, 0-1."""
    idle_seconds: float | None = None
    energy: float | None = None
    """Joules since the node's agent started (NVML's process view)."""


class Compared(NamedTuple):
    """The memory of the cards that report both their used memory and their total: the
    figures a ratio of used to total may compare (``allocated``: what the vGPUs on those
    cards were given, None when none has a memory allocation)."""

    cards: int
    used: int
    total: int
    allocated: int | None


class Shape:
    """What a node's key set says, values aside: its cards, its containers, and their keys.

    ``cards`` is sorted by index then UUID, ``containers`` by namespace, pod,
    container and vdevice index; each holds its identity labels and the place
    of each of its readings in ``keys`` (None where no series carries that
    reading). Values are read by place from the series' packed values: looking
    them up by key would build a key index per batch, which cost a node's read
    model a third of its time.
    """

    __slots__ = ("cards", "container_count", "containers", "keys", "namespaces", "pods")

    def __init__(self, series: Mapping[bytes, float]) -> None:
        self.keys = tuple(series)
        cards: dict[str, tuple[CardLabels, list[int | None]]] = {}
        containers: dict[ContainerLabels, list[int | None]] = {}
        classify = _Classifier()
        for place, key in enumerate(self.keys):
            info = classify(key)
            if isinstance(info, _CardKey):
                held = cards.get(info.card)
                if held is None:
                    held = cards[info.card] = (info.labels, [None] * len(_CARD_SLOTS))
                elif held[0] != info.labels:
                    held = cards[info.card] = (_merge(held[0], info.labels), held[1])
                held[1][info.slot] = place
            elif isinstance(info, _ContainerKey):
                keys = containers.get(info.labels)
                if keys is None:
                    keys = containers[info.labels] = [None] * len(_CONTAINER_SLOTS)
                keys[info.slot] = place
        self.cards: tuple[tuple[CardLabels, _Places], ...] = tuple(
            sorted(
                ((labels, tuple(keys)) for labels, keys in cards.values()),
                key=lambda c: (c[0][0] is None, c[0][0] or 0, c[0][1]),
            )
        )
        self.containers: tuple[tuple[ContainerLabels, _Places], ...] = tuple(
            sorted(
                ((labels, tuple(keys)) for labels, keys in containers.items()),
                key=lambda c: (*c[0][:3], _int(c[0][3]) or 0, c[0][3:]),
            )
        )
        self.container_count = len({labels[:3] for labels in containers})
        self.pods = frozenset(labels[:2] for labels in containers)
        self.namespaces = frozenset(namespace for namespace, _ in self.pods)

    def fits(self, series: Mapping[bytes, float]) -> bool:
        """Whether ``series`` has the keys this shape was made from, in the same order.

        Batches of one source keep their order (the monitor's), and in steady
        state the very same key objects, so this is a C-level pass of identity checks.
        """
        return len(series) == len(self.keys) and tuple(series) == self.keys


class NodeUsage:
    """What one store view says about its node.

    ``newest`` is the monotonic time of the newest batch that fed the view (:func:`_newest`);
    ``reported`` whether a monitor or agent feeds it (not the pod watch alone).
    ``containers`` is read from the view on first use.

    Each memory sum says what it covers: ``memory_used`` sums the ``memory_used_cards``
    cards that report their used memory, ``memory_total`` the ``memory_total_cards`` that
    report a total (whichever source gave it), each None when no card does; ``compared``
    holds the cards that report both (None when none does).
    """

    __slots__ = (
        "_containers",
        "card_models",
        "card_types",
        "cards",
        "compared",
        "memory_total",
        "memory_total_cards",
        "memory_used",
        "memory_used_cards",
        "newest",
        "reported",
        "shape",
        "utilization_average",
        "view",
    )

    def __init__(self, view: NodeView, shape: Shape) -> None:
        self.view = view
        self.shape = shape
        values = _packed(view.series)
        self.cards = tuple(_card(labels, places, values) for labels, places in shape.cards)
        used = [c.memory_used for c in self.cards if c.memory_used is not None]
        totals = [c.memory_total for c in self.cards if c.memory_total is not None]
        utils = [c.utilization for c in self.cards if c.utilization is not None]
        self.card_types = tuple(sorted({c.device_type for c in self.cards if c.device_type}))
        self.card_models = tuple(sorted({card_model(t) for t in self.card_types}))
        self.memory_used = sum(used) if used else None
        self.memory_used_cards = len(used)
        self.memory_total = sum(totals) if totals else None
        self.memory_total_cards = len(totals)
        self.compared = _compared(self.cards, shape, values)
        self.utilization_average = sum(utils) / len(utils) if utils else None
        self.newest = _newest(view)
        self.reported = any(h.source.kind not in schema.WATCH_KINDS for h in view.sources)
        self._containers: tuple[ContainerReading, ...] | None = None

    @property
    def node(self) -> str:
        """The node's name."""
        return self.view.node

    @property
    def container_count(self) -> int:
        """Distinct containers (namespace, pod, container) with vGPU series."""
        return self.shape.container_count

    @property
    def namespaces(self) -> frozenset[str]:
        """Namespaces of those containers."""
        return self.shape.namespaces

    @property
    def pods(self) -> frozenset[tuple[str, str]]:
        """(namespace, pod) of those containers."""
        return self.shape.pods

    @property
    def containers_read(self) -> bool:
        """Whether :attr:`containers` has been read (and so is built)."""
        return self._containers is not None

    @property
    def containers(self) -> tuple[ContainerReading, ...]:
        """Every vGPU of every container, in the shape's order."""
        if self._containers is None:
            values = _packed(self.view.series)
            self._containers = tuple(
                _container(labels, places, values) for labels, places in self.shape.containers
            )
        return self._containers


def _compared(
    cards: Sequence[CardReading], shape: Shape, packed: Sequence[float]
) -> Compared | None:
    """The cards that report used and total memory, and the memory allocated on them (read
    by place from the containers' keys: the summary builds no container reading)."""
    both = [c for c in cards if c.memory_used is not None and c.memory_total is not None]
    if not both:
        return None
    uuids = {c.device_uuid for c in both if c.device_uuid}
    allocated = [
        packed[place]
        for labels, places in shape.containers
        if labels[4] in uuids and (place := places[_ALLOCATED_SLOT]) is not None
    ]
    known = [v for v in allocated if math.isfinite(v)]
    return Compared(
        len(both),
        sum(c.memory_used or 0 for c in both),
        sum(c.memory_total or 0 for c in both),
        int(sum(known)) if known else None,
    )


def _newest(view: NodeView) -> float:
    """When the newest monitor or agent batch came; the watches' only for a node without one.

    The pod and node watches remake their batches every interval whatever the
    monitors do, so they would hide a silent monitor.
    """
    real = [h.received for h in view.sources if h.source.kind not in schema.WATCH_KINDS]
    return max(real or [h.received for h in view.sources], default=-math.inf)


class UsageIndex:
    """Keeps one :class:`NodeUsage` per node, rebuilt only when the node's view changes."""

    def __init__(self) -> None:
        self._nodes: dict[str, NodeUsage] = {}

    def usage(self, view: NodeView) -> NodeUsage:
        """Return the read model of ``view`` (cached while the view is the store's current one)."""
        cached = self._nodes.get(view.node)
        if cached is not None and cached.view is view:
            return cached
        if cached is not None and cached.shape.fits(view.series):
            shape = cached.shape
        else:
            shape = Shape(view.series)
        usage = NodeUsage(view, shape)
        self._nodes[view.node] = usage
        return usage

    def prune(self, live: Iterable[str]) -> None:
        """Forget nodes not in ``live`` (nodes the store no longer holds)."""
        for node in self._nodes.keys() - set(live):
            del self._nodes[node]

    def __len__(self) -> int:
        return len(self._nodes)


class _Classifier:
    """Tells what a key is to the read model, parsing each label text once.

    The families of one card (or one container vGPU) share their label text
    (``{...}``), so a node's keys need one parse per card and per vGPU.
    """

    def __init__(self) -> None:
        self._cards: dict[bytes, CardLabels] = {}
        self._containers: dict[bytes, ContainerLabels] = {}

    def __call__(self, key: bytes) -> _Info:
        brace = key.find(b"{")
        name, text = (key[:brace], key[brace:]) if brace >= 0 else (key, b"{}")
        slot = _CARD_SLOTS.get(name)
        if slot is not None:
            card = self._cards.get(text)
            if card is None:
                card = self._cards[text] = _card_labels(dict(key_labels(key)[1]))
            return _CardKey(slot, card)
        slot = _CONTAINER_SLOTS.get(name)
        if slot is not None:
            container = self._containers.get(text)
            if container is None:
                container = self._containers[text] = _container_labels(dict(key_labels(key)[1]))
            return _ContainerKey(slot, container)
        return None


def _card_labels(labels: dict[str, str]) -> CardLabels:
    kind = labels.get("device_type")
    return (
        _int(labels.get("device_index", "")),
        labels.get("device_uuid", ""),
        None if kind is None else sys.intern(kind),
    )


def _container_labels(labels: dict[str, str]) -> ContainerLabels:
    # Namespaces, container names and indexes repeat across pods and nodes: share them.
    return (
        sys.intern(labels.get("namespace", "")),
        labels.get("pod", ""),
        sys.intern(labels.get("container", "")),
        sys.intern(labels.get("vdevice_index", "")),
        labels.get("device_uuid", ""),
    )


def _merge(old: CardLabels, new: CardLabels) -> CardLabels:
    """One card seen with two label sets: keep every label either one knows."""
    return (
        old[0] if old[0] is not None else new[0],
        old[1] or new[1],
        old[2] if old[2] is not None else new[2],
    )


def _int(text: str) -> int | None:
    """A label's whole number (device or vdevice index), or None if it is not one."""
    return int(text) if 0 < len(text) <= 9 and text.isascii() and text.isdigit() else None


def _packed(series: Mapping[bytes, float]) -> Sequence[float]:
    """The values of ``series`` in its keys' order (a shape's places index them)."""
    return series.packed()[1] if isinstance(series, Series) else tuple(series.values())


def _values(places: _Places, packed: Sequence[float]) -> list[float | None]:
    values = [None if place is None else packed[place] for place in places]
    if all(v is None or v - v == 0 for v in values):  # no NaN, no infinity: the usual case
        return values
    return [v if v is not None and math.isfinite(v) else None for v in values]


def _bytes(value: float | None) -> int | None:
    return None if value is None else int(value)


def _card(labels: CardLabels, places: _Places, packed: Sequence[float]) -> CardReading:
    read = dict(zip(_CARD_READINGS, _values(places, packed), strict=True))
    return CardReading(
        device_index=labels[0],
        device_uuid=labels[1],
        device_type=labels[2],
        memory_used=_bytes(read["memory_used"]),
        memory_total=_bytes(read["memory_total"]),
        utilization=read["utilization"],
        memory_controller_utilization=read["memory_controller_utilization"],
        temperature=read["temperature"],
        power=read["power"],
    )


def _container(
    labels: ContainerLabels, places: _Places, packed: Sequence[float]
) -> ContainerReading:
    read = dict(zip(_VGPU_READINGS, _values(places, packed), strict=True))
    used = read["memory_used"]
    return ContainerReading(
        namespace=labels[0],
        pod=labels[1],
        container=labels[2],
        vdevice_index=_int(labels[3]),
        device_uuid=labels[4],
        memory_used=_bytes(used if used is not None else read["device_memory"]),
        memory_limit=_bytes(read["memory_limit"]),
        sm_utilization=read["sm_utilization"],
        last_kernel_seconds=read["last_kernel_seconds"],
        memory_context=_bytes(read["memory_context"]),
        memory_module=_bytes(read["memory_module"]),
        memory_buffer=_bytes(read["memory_buffer"]),
        memory_allocated=_bytes(read["memory_allocated"]),
        cores_allocated=read["cores_allocated"],
        idle_seconds=read["idle_seconds"],
        energy=read["energy"],
    )
