"""NVML's per-process readings turned into per-container usage, and a card's energy split among them.

:func:`usage` groups :class:`~agent.nvml.ProcessSample` records by device and
owner (:mod:`agent.cgroups`); :class:`EnergyLedger` turns each card's energy
counter into running per-container shares and the card's idle remainder.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agent.cgroups import Owner
from agent.nvml import ProcessSample
from core.payload import Card, ContainerUsage

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
    the card's idle energy. Both are running totals from the ledger's first
    reading of the card.

    Invariant: for each card, idle_energy + the energy of every usage on it ==
    the card's energy now - its energy at the ledger's first reading, while
    every (device, pod, container) once reported on the card is still reported.
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
            kept = None if card.energy is None else state.idle[card.uuid]
            out.append(card.model_copy(update={"idle_energy": kept}))
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
        for key, part in zip(keys, parts, strict=True):
            state.shares[key] = old.shares.get(key, 0.0) + part
            totals.append(state.shares[key])
        # Rounding can leave -1e-13 when the card was fully busy; a counter is never negative.
        state.idle[card.uuid] = max(0.0, old.idle.get(card.uuid, 0.0) + interval - sum(parts))
        return totals


@dataclass(slots=True)
class _State:
    """Per card: the last energy reading and the idle total; per usage key: its running share."""

    before: dict[str, float] = field(default_factory=dict)
    idle: dict[str, float] = field(default_factory=dict)
    shares: dict[_Key, float] = field(default_factory=dict)

    def carry(self, card: str, keys: list[_Key], into: _State) -> None:
        """Copy one card's entries (and its usages') into the next state unchanged."""
        if card in self.before:
            into.before[card] = self.before[card]
        if card in self.idle:
            into.idle[card] = self.idle[card]
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
