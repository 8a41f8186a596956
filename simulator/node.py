"""One simulated GPU node and the monitor on it: readings that drift, pods that churn.

Everything here is pure Python, performs no I/O and is deterministic: a node's
later state is a function of its seed and of the times passed to
:meth:`SimulatedNode.step`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from simulator.devices import Allocation, Card
from simulator.expositions import monitor_samples, visible_allocations
from simulator.families import MONITOR_METRICS, MONITORS
from simulator.textformat import MonitorSample, render_exposition
from simulator.workload import (
    MIB,
    Profile,
    Slot,
    draw_kai_annotation,
    fill,
    new_pod,
    new_profile,
)

WEIRD_SUFFIX = ' q"uote b\\ack n\nl {br},c=v ü中'
"""Appended to namespace, pod and container while a node's ``weird_labels`` is on."""


class SimulatedNode:
    """One GPU node and the monitor running on it, one of :data:`~simulator.families.MONITORS`."""

    CHURN_PERIOD_S = 60
    """Pods may end (and be replaced) once per this many seconds of simulated time."""
    CHURN_PROBABILITY = 0.04
    """Chance that a given pod ends at a churn point."""
    MAX_CHURN_EPOCHS = 16
    """A step that jumps further than this many churn periods applies only the last ones."""

    def __init__(
        self,
        name: str,
        flavour: str,
        cards: Sequence[Card],
        allocations: Sequence[Allocation],
        seed: int = 0,
        memory_scaling: float = 1.0,
    ) -> None:
        if flavour not in MONITORS:
            raise ValueError(f"unknown flavour {flavour!r}; expected one of {MONITORS}")
        indices = [card.index for card in cards]
        if len(set(indices)) != len(indices):
            raise ValueError(f"node {name}: duplicate card index in {indices}")
        missing = {a.card for a in allocations} - set(indices)
        if missing:
            raise ValueError(f"node {name}: allocations reference unknown cards {sorted(missing)}")
        self.name = name
        self.flavour = flavour
        """The monitor version this node runs, one of :data:`~simulator.families.MONITORS`."""
        self.cards: list[Card] = list(cards)
        self.allocations: list[Allocation] = list(allocations)
        self.seed = seed
        self.memory_scaling = memory_scaling
        """HAMi's ``deviceMemoryScaling`` on this node: its plugin registers this many times each
        card's memory on the Node (:mod:`simulator.node_objects`) and its scheduler grants up
        to that (1: none; above 1, the node is oversubscribed on purpose)."""
        self.revision = 0
        """Bumped whenever the node's state changes; lets servers cache renderings."""
        self._weird_labels = False
        self._tick: int | None = None
        self._epoch: int | None = None
        self._profiles: dict[tuple[str, str, int], Profile] = {}
        self._kept: set[str] = set()

    def __repr__(self) -> str:
        return (
            f"SimulatedNode(name={self.name!r}, flavour={self.flavour!r}, "
            f"cards={len(self.cards)}, allocations={len(self.allocations)}, seed={self.seed})"
        )

    # -- state --------------------------------------------------------------

    @property
    def weird_labels(self) -> bool:
        """While on, namespace/pod/container label values end in :data:`WEIRD_SUFFIX`."""
        return self._weird_labels

    @weird_labels.setter
    def weird_labels(self, value: bool) -> None:
        if value != self._weird_labels:
            self._weird_labels = value
            self.revision += 1

    def keep(self, allocation: Allocation) -> None:
        """Add ``allocation`` as a pod of its own that never ends at a churn point."""
        if allocation.card not in {card.index for card in self.cards}:
            raise ValueError(
                f"node {self.name}: allocation references unknown card {allocation.card}"
            )
        if allocation.pod_uid in {a.pod_uid for a in self.allocations}:
            raise ValueError(f"node {self.name}: pod {allocation.pod_uid} is already placed")
        self.allocations.append(allocation)
        self._kept.add(allocation.pod_uid)
        self.refresh_cards()

    def refresh_cards(self) -> None:
        """Derive each card's host readings from the allocations it backs.

        memory used = reserved + sum of vGPU usage (capped at the total),
        utilisation = sum of SM utilisation (capped at 100), memory-controller
        utilisation = 40 % of that.
        """
        used: dict[int, int] = {card.index: 0 for card in self.cards}
        util: dict[int, int] = {card.index: 0 for card in self.cards}
        for allocation in self.allocations:
            used[allocation.card] += allocation.used
            util[allocation.card] += allocation.sm_util
        for card in self.cards:
            card.memory_used = min(card.memory_total, card.reserved + used[card.index])
            card.utilization = min(100, util[card.index])
            card.memory_controller_utilization = card.utilization * 2 // 5
        self.revision += 1

    def step(self, now: float) -> None:
        """Advance the simulation to ``now`` (Unix seconds).

        Readings are a function of the whole second ``floor(now)``, so repeated
        calls within one second change nothing. Every :attr:`CHURN_PERIOD_S`
        seconds each pod (but those :meth:`keep` added) ends with
        :attr:`CHURN_PROBABILITY` and a new pod with the same shape (containers,
        vGPUs, cards) takes its place, so the number of allocations never changes. The first call only sets the readings.
        Card readings are then re-derived (:meth:`refresh_cards`); a node built by
        hand keeps the card readings it was given until its first step.
        """
        tick = math.floor(now)
        if tick == self._tick:
            return
        epoch = tick // self.CHURN_PERIOD_S
        if self._epoch is not None and epoch > self._epoch:
            first = max(self._epoch + 1, epoch - self.MAX_CHURN_EPOCHS + 1)
            for churn_epoch in range(first, epoch + 1):
                self._churn(churn_epoch, tick)
        self._epoch = epoch
        self._tick = tick
        self._apply_readings(tick)
        self.refresh_cards()

    def _profile(self, allocation: Allocation) -> Profile:
        profile = self._profiles.get(allocation.key)
        if profile is None:
            profile = new_profile(self.seed, self.name, allocation)
            self._profiles[allocation.key] = profile
        return profile

    def _apply_readings(self, tick: int) -> None:
        last_kernel: dict[tuple[str, str], int] = {}
        for allocation in self.allocations:
            self._profile(allocation).apply(allocation, tick)
            if allocation.last_kernel_time is not None:
                container = (allocation.pod_uid, allocation.container)
                last_kernel[container] = max(
                    last_kernel.get(container, allocation.last_kernel_time),
                    allocation.last_kernel_time,
                )
        # HAMi-core keeps one last-kernel time per container, shared by its vGPUs.
        for allocation in self.allocations:
            shared = last_kernel.get((allocation.pod_uid, allocation.container))
            if shared is not None:
                allocation.last_kernel_time = shared

    def _churn(self, epoch: int, tick: int) -> None:
        rng = random.Random(f"churn|{self.seed}|{self.name}|{epoch}")
        pods: dict[str, list[Allocation]] = {}
        for allocation in self.allocations:
            pods.setdefault(allocation.pod_uid, []).append(allocation)
        # Every pod draws, kept or not, so keeping one changes no other pod's fate.
        ending = [
            uid for uid in pods if rng.random() < self.CHURN_PROBABILITY and uid not in self._kept
        ]
        if not ending:
            return
        taken = {(a.namespace, a.pod) for a in self.allocations}
        for uid in ending:
            old = pods[uid]
            # The pod taking its place asks for the same (a controller's next replica does):
            # the cards stay within what the scheduler grants.
            slots = [
                Slot(
                    a.container,
                    a.vdevice_index,
                    a.card,
                    a.limit // MIB,
                    a.cores,
                    exact=True,
                    fill=fill(self.memory_scaling),
                )
                for a in old
            ]
            fresh = new_pod(rng, slots, tick, taken, draw_kai_annotation(rng))
            for allocation in old:
                self._profiles.pop(allocation.key, None)
            position = self.allocations.index(old[0])
            remaining = [a for a in self.allocations if a.pod_uid != uid]
            self.allocations = remaining[:position] + fresh + remaining[position:]
        self.revision += 1

    # -- what the monitor serves ----------------------------------------------

    def visible_allocations(self) -> list[Allocation]:
        """The allocations this node's monitor reports (KAI: annotated pods only)."""
        return visible_allocations(self.flavour, self.allocations)

    def samples(self, now: float) -> list[MonitorSample]:
        """Every sample the monitor would serve at ``now``, in no particular order."""
        suffix = WEIRD_SUFFIX if self._weird_labels else ""
        return monitor_samples(
            self.flavour, self.name, self.cards, self.visible_allocations(), now, suffix
        )

    def exposition(self, now: float) -> bytes:
        """The exact body this node's monitor serves on ``/metrics`` at ``now``."""
        return render_exposition(self.samples(now), MONITOR_METRICS[self.flavour])
