"""Simulated clusters: GPU nodes with monitors of every version, a pure function of a seed.

Every GPU node of a HAMi, Volcano vGPU or KAI cluster runs a monitor on port
9394 that serves Prometheus text for its own node. :func:`build_cluster` makes
such nodes (:class:`~simulator.node.SimulatedNode`), whose monitors serve,
byte for byte, what each upstream version serves
(:mod:`simulator.families`), from simulated cards and vGPU allocations
whose values drift with time.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace

from simulator.devices import Allocation
from simulator.families import MONITORS
from simulator.node import SimulatedNode
from simulator.workload import (
    HELD_ON_CARD_0_CORES,
    HELD_ON_CARD_0_MIB,
    MIB,
    draw_cards,
    draw_kai_annotation,
    fill,
    grant_cores,
    new_pod,
    plan_slots,
)


def _check(nodes: int, cards: int, allocations_per_node: int, flavours: Sequence[str]) -> None:
    if nodes < 0 or cards < 0 or allocations_per_node < 0:
        raise ValueError("nodes, cards and allocations_per_node must not be negative")
    if not flavours:
        raise ValueError("flavours must not be empty")
    unknown = [f for f in flavours if f not in MONITORS]
    if unknown:
        raise ValueError(f"unknown flavours {unknown}; expected some of {MONITORS}")
    if cards == 0 and allocations_per_node > 0:
        raise ValueError("allocations need at least one card per node")


def _build_node(
    name: str,
    flavour: str,
    rng: random.Random,
    cards: int,
    allocations: int,
    now: int,
    seed: int,
    memory_scaling: float = 1.0,
) -> SimulatedNode:
    """One node whose allocations HAMi's scheduler would have granted: each card's memory
    limits sum to at most its memory times ``memory_scaling`` (HAMi's ``deviceMemoryScaling``;
    above 1 each vGPU takes its whole share of the scaled card, so the node is oversubscribed),
    its SM shares to at most the whole card, and card 0 keeps room for the pods placed later."""
    node_cards = draw_cards(rng, cards)
    cap_mib = {
        card.index: int((card.memory_total - card.reserved) * memory_scaling) // MIB
        - (HELD_ON_CARD_0_MIB if card.index == 0 else 0)
        for card in node_cards
    }
    budget = {
        card.index: 100 - (HELD_ON_CARD_0_CORES if card.index == 0 else 0) for card in node_cards
    }
    planned = plan_slots(rng, cards, allocations, cap_mib)
    shares = grant_cores(random.Random(f"cores|{seed}|{name}"), planned, budget)
    oversubscribed = memory_scaling > 1
    taken: set[tuple[str, str]] = set()
    pods: list[Allocation] = []
    for slots in shares:
        if oversubscribed:
            slots = [replace(s, exact=True, fill=fill(memory_scaling)) for s in slots]
        pods.extend(new_pod(rng, slots, now, taken, draw_kai_annotation(rng)))
    node = SimulatedNode(name, flavour, node_cards, pods, seed, memory_scaling)
    node.refresh_cards()
    return node


def build_cluster(
    nodes: int,
    seed: int = 0,
    cards: int = 8,
    allocations_per_node: int = 28,
    flavours: Sequence[str] = MONITORS,
    *,
    start_time: float | None = None,
    memory_scaling: Mapping[int, float] | None = None,
) -> list[SimulatedNode]:
    """A cluster of ``nodes`` simulated GPU nodes, monitor versions assigned round-robin.

    ``flavours`` are some of :data:`~simulator.families.MONITORS`. Nodes are
    named ``gpu-node-001``…; each has ``cards`` cards of one model and
    ``allocations_per_node`` vGPU allocations (pods such as ``team-a/train-…``
    with containers such as ``cuda`` or ``main``), every one of which has
    launched a kernel. Last-kernel times are placed relative to ``start_time``
    (default: now), so the cluster is a pure function of ``seed`` and
    ``start_time``. ``memory_scaling`` oversubscribes the nodes at those positions (from
    0) by that factor, as HAMi's ``deviceMemoryScaling`` lets its scheduler.
    """
    _check(nodes, cards, allocations_per_node, flavours)
    now = math.floor(time.time() if start_time is None else start_time)
    width = max(3, len(str(nodes)))
    return [
        _build_node(
            f"gpu-node-{position + 1:0{width}d}",
            flavours[position % len(flavours)],
            random.Random(f"node|{seed}|{position}"),
            cards,
            allocations_per_node,
            now,
            seed,
            (memory_scaling or {}).get(position, 1.0),
        )
        for position in range(nodes)
    ]
