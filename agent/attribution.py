"""NVML's per-process readings turned into per-container usage, and a card's energy split among them.

:func:`usage` groups :class:`~agent.nvml.ProcessSample` records by device and
owner (:mod:`agent.cgroups`); :class:`EnergyLedger` turns each card's energy
counter into running per-container shares, the share of processes of no pod
and the card's idle remainder; :class:`Utilization` picks each HAMi-core
region's utilisation (the region's, or NVML's where the region has none) and
clamps every container's to 100.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

from agent.cgroups import Owner
from agent.hamicore import DeviceUsage, RegionUsage
from agent.nvml import ProcessSample
from agent.region_scan import RegionKey
from core.payload import Card, ContainerUsage

Source = Literal["hami-core", "nvml"]
"""Which reading a region device's utilisation is (:attr:`core.payload.Device.utilization_source`)."""

MAX_UTILIZATION: Final = 100.0

#: (card UUID, device UUID, pod UID, container ID): one running energy share.
_Key = tuple[str, str, str | None, str | None]


@dataclass(slots=True)
class _Group:
    processes: int = 0
    memory: int = 0
    utilization: float | None = None


def usage(
    samples: Sequence[ProcessSample], owners: Mapping[int, Owner | None]
) -> list[ContainerUsage]:
    """One :class:`ContainerUsage` per (device, owner), in the order the samples first name them.

    Memory is summed (a hidden reading counts 0), SM utilisation is summed over
    the processes that have one (None when none has: MIG), processes are the
    samples counted. A sample whose PID is not in ``owners`` (its cgroup could
    not be read) is left out rather than given to anyone; an owner of None is
    the host's (``pod_uid``/``container_id`` None).
    """
    groups: dict[tuple[str, Owner | None], _Group] = {}
    for sample in samples:
        if sample.pid not in owners:
            continue
        group = groups.setdefault((sample.device, owners[sample.pid]), _Group())
        group.processes += 1
        group.memory += sample.memory or 0
        if sample.sm is not None:
            group.utilization = (group.utilization or 0.0) + sample.sm
    return [_record(device, who, group) for (device, who), group in groups.items()]


def _record(device: str, who: Owner | None, group: _Group) -> ContainerUsage:
    return ContainerUsage(
        device=device,
        pod_uid=None if who is None else who.pod_uid,
        container_id=None if who is None else who.container_id,
        processes=group.processes,
        memory_used=group.memory,
        utilization=group.utilization,
    )


def _parts(card_utilization: float | None, weights: list[float], energy: float) -> list[float]:
    """Each weight's share of the busy part of ``energy``; all zero when every weight is 0 (idle)."""
    total = sum(weights)
    if total <= 0:
        return [0.0] * len(weights)
    busy = min(1.0, (total if card_utilization is None else card_utilization) / 100)
    return [busy * energy * weight / total for weight in weights]


class EnergyLedger:
    """Splits each card's energy among the containers on it, snapshot by snapshot.

    Between two snapshots a card used E = energy_now - energy_before joules.
    The busy fraction b is the card's utilisation / 100 (capped at 1; where the
    card has none, the sum of its containers' SM utilisation / 100, capped);
    each container (and the host's processes, pod_uid None) on the card or one
    of its MIG instances gets b * E * u / sum(u) by its SM utilisation u (None
    counts 0; nothing when sum(u) is 0). What no share took, E - sum(shares), is
    the card's idle energy; what the shares of processes of no pod took is also
    the card's unattributed energy. Both are running totals from the ledger's
    first reading of the card, and so is each usage's energy.

    Invariant: for each card, idle_energy + unattributed_energy + the energy of
    every usage of a pod on it == the card's energy now - its energy at the
    ledger's first reading, while every (device, pod, container) once reported
    on the card is still reported (the processes of no pod may come and go:
    their part is the card's).
    A usage absent from a snapshot loses its running total (its series ends,
    and a counter that comes back starts at 0), so afterwards only increases
    add up: over any interval between two consecutive snapshots that report the
    same usages on the card, the increases of idle_energy and of each usage's
    energy sum to the card's energy increase. The first reading of a card, a
    reading lower than the one before (the driver reloaded) and the first
    reading after the card was absent are baselines: nothing is split for that
    interval and the totals go on from there. A card without an energy reading
    has idle_energy None and its usages energy None; its totals are kept, and
    the next reading splits the whole gap by the utilisation of that snapshot.
    """

    def __init__(self) -> None:
        self._state = _State()

    def split(
        self, cards: Sequence[Card], usages: Sequence[ContainerUsage]
    ) -> tuple[list[Card], list[ContainerUsage]]:
        """``cards`` with ``idle_energy`` and ``usages`` (one per key, as :func:`usage` gives) with ``energy``.

        A usage on a device of no card in ``cards`` gets energy None.
        """
        on_card = _by_card(cards, usages)
        energies: list[float | None] = [None] * len(usages)
        # Built afresh from this snapshot, so whatever it does not name is forgotten.
        state = _State()
        out: list[Card] = []
        for card in cards:
            mine = on_card.get(card.uuid, [])
            keys = [_key(card.uuid, usages[i]) for i in mine]
            weights = [usages[i].utilization or 0.0 for i in mine]
            for i, total in zip(mine, self._card(card, keys, weights, state), strict=True):
                energies[i] = total
            kept: dict[str, float | None] = {"idle_energy": None, "unattributed_energy": None}
            if card.energy is not None:
                kept = {
                    "idle_energy": state.idle[card.uuid],
                    "unattributed_energy": state.unattributed[card.uuid],
                }
            out.append(card.model_copy(update=kept))
        self._state = state
        updated = [
            u.model_copy(update={"energy": e}) for u, e in zip(usages, energies, strict=True)
        ]
        return out, updated

    def _card(
        self, card: Card, keys: list[_Key], weights: list[float], state: _State
    ) -> list[float | None]:
        """One card's step into the next ``state``; the running totals of its usages."""
        old = self._state
        if card.energy is None:
            # Keep the state so the next reading splits the gap: energy is conserved.
            old.carry(card.uuid, keys, state)
            return [None] * len(keys)
        previous = old.before.get(card.uuid)
        state.before[card.uuid] = card.energy
        # No previous reading, or a lower one (the driver reloaded): a baseline.
        interval = 0.0 if previous is None or card.energy < previous else card.energy - previous
        parts = _parts(card.utilization, weights, interval)
        totals: list[float | None] = []
        unattributed = old.unattributed.get(card.uuid, 0.0)
        for key, part in zip(keys, parts, strict=True):
            state.shares[key] = old.shares.get(key, 0.0) + part
            totals.append(state.shares[key])
            if key[2] is None:
                unattributed += part
        state.unattributed[card.uuid] = unattributed
        # Rounding can leave -1e-13 when the card was fully busy; a counter is never negative.
        state.idle[card.uuid] = max(0.0, old.idle.get(card.uuid, 0.0) + interval - sum(parts))
        return totals


@dataclass(slots=True)
class _State:
    """Per card: the last energy reading, the idle and unattributed totals; per usage key: its
    running share."""

    before: dict[str, float] = field(default_factory=dict)
    idle: dict[str, float] = field(default_factory=dict)
    unattributed: dict[str, float] = field(default_factory=dict)
    shares: dict[_Key, float] = field(default_factory=dict)

    def carry(self, card: str, keys: list[_Key], into: _State) -> None:
        """Copy one card's entries (and its usages') into the next state unchanged."""
        if card in self.before:
            into.before[card] = self.before[card]
        if card in self.idle:
            into.idle[card] = self.idle[card]
        if card in self.unattributed:
            into.unattributed[card] = self.unattributed[card]
        for key in keys:
            if key in self.shares:
                into.shares[key] = self.shares[key]


def _by_card(cards: Sequence[Card], usages: Sequence[ContainerUsage]) -> dict[str, list[int]]:
    """Card UUID -> indices of the usages on the card or one of its MIG instances."""
    card_of = {m.uuid: card.uuid for card in cards for m in card.mig}
    card_of.update({card.uuid: card.uuid for card in cards})
    on_card: dict[str, list[int]] = {}
    for i, used in enumerate(usages):
        if used.device in card_of:
            on_card.setdefault(card_of[used.device], []).append(i)
    return on_card


def _key(card: str, used: ContainerUsage) -> _Key:
    return (card, used.device, used.pod_uid, used.container_id)


class Utilization:
    """Each HAMi-core region device's utilisation and its source, every container's clamped.

    HAMi-core's region carries a container's SM utilisation only while its
    utilisation watcher runs, and on the HAMi-core versions between PR #166
    and PR #198 it does not start without ``GPU_CORE_UTILIZATION_POLICY=force``
    (HAMi#1864, HAMi-core#195): the region then reads 0 however busy the
    container is. A region device that has never shown a utilisation above 0
    takes, while it has none, NVML's per-process SM utilisation of its
    container's processes on that card, summed (source ``nvml``); the container
    is known by the pod UID and container ID of the processes of its live slots
    (:meth:`agent.slots.SlotTick.owners`). Once the region shows a utilisation,
    its watcher runs, and the region's reading is used from then on (source
    ``hami-core``), idle or not, so the source does not flap with the load.

    A sum above 100 (HAMi#1565: frozen or double-counted slots upstream; NVML
    samples summed over processes) is clamped to 100 and counted in
    :attr:`clamped`.
    """

    def __init__(self) -> None:
        self._reporting: set[tuple[Path, int]] = set()
        """(region file, device index) whose region has shown a utilisation above 0."""
        self.clamped = 0
        """Utilisations clamped to 100, cumulative."""

    def usages(self, usages: Sequence[ContainerUsage]) -> list[ContainerUsage]:
        """``usages`` with each utilisation clamped to 100."""
        out = []
        for used in usages:
            if used.utilization is not None and used.utilization > MAX_UTILIZATION:
                used = used.model_copy(update={"utilization": self.clamp(used.utilization)})
            out.append(used)
        return out

    def regions(
        self,
        regions: Mapping[RegionKey, RegionUsage],
        owners: Callable[[RegionKey], frozenset[Owner]],
        usages: Sequence[ContainerUsage],
    ) -> dict[tuple[RegionKey, int], tuple[float, Source]]:
        """(region key, device index) -> (utilisation, source) of every device of ``regions``.

        ``owners``: the containers of a region's live slots; ``usages``: NVML's
        per-container view of this snapshot.
        """
        nvml: dict[tuple[Owner, str], float] = {}
        for used in usages:
            pod, container, busy = used.pod_uid, used.container_id, used.utilization
            if pod is not None and container is not None and busy is not None:
                at = (Owner(pod, container), used.device)
                nvml[at] = nvml.get(at, 0.0) + busy
        reporting: set[tuple[Path, int]] = set()
        out: dict[tuple[RegionKey, int], tuple[float, Source]] = {}
        for key, region in regions.items():
            for device in region.devices:
                ident = (region.path, device.index)
                if device.sm_utilization > 0 or ident in self._reporting:
                    reporting.add(ident)
                    out[(key, device.index)] = (self.clamp(device.sm_utilization), "hami-core")
                else:
                    out[(key, device.index)] = self._nvml(device, owners(key), nvml)
        self._reporting = reporting
        return out

    def _nvml(
        self, device: DeviceUsage, owners: frozenset[Owner], nvml: Mapping[tuple[Owner, str], float]
    ) -> tuple[float, Source]:
        found = [nvml[(who, device.uuid)] for who in owners if (who, device.uuid) in nvml]
        if not found:
            return device.sm_utilization, "hami-core"
        return self.clamp(sum(found)), "nvml"

    def clamp(self, value: float) -> float:
        """``value``, or 100 (counted) if it is above."""
        if value > MAX_UTILIZATION:
            self.clamped += 1
            return MAX_UTILIZATION
        return value
