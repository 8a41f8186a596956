"""The demo's full container: kept through churn, its vGPU memory at its limit at every step.

tests/integration/test_alertmanager.py counts on it for ``HamiVGPUMemoryNearLimit``.
"""

from __future__ import annotations

import pytest

from simulator.cluster import build_cluster
from simulator.devices import Allocation
from simulator.node import SimulatedNode
from simulator.workload import FULL_NAMESPACE, full_pod

START = 1_767_225_600  # 2026-01-01T00:00:00Z


def node_with_full_pod() -> SimulatedNode:
    [node] = build_cluster(1, seed=1, start_time=START)
    node.keep(full_pod(1, node.name, card=0))
    return node


def the_full_one(node: SimulatedNode) -> Allocation:
    [full] = [a for a in node.allocations if a.pod == f"fill-{node.name}"]
    return full


def test_the_full_pod_stays_full_and_busy_while_the_others_churn() -> None:
    node = node_with_full_pod()
    kept = the_full_one(node).pod_uid
    others = {a.pod_uid for a in node.allocations} - {kept}
    count = len(node.allocations)
    for minute in range(0, 240, 7):
        now = START + minute * 60 + 13
        node.step(now)
        full = the_full_one(node)
        assert full.pod_uid == kept
        assert full.namespace == FULL_NAMESPACE
        assert full.used == full.limit
        assert full.used / full.limit > 0.95
        assert full.sm_util > 0
        assert full.last_kernel_time == now
        assert len(node.allocations) == count
    assert others - {a.pod_uid for a in node.allocations}, "no other pod churned in 4 hours"


def test_its_card_counts_its_memory() -> None:
    node = node_with_full_pod()
    full = the_full_one(node)
    used = sum(a.used for a in node.allocations if a.card == 0)
    assert node.cards[0].memory_used == min(
        node.cards[0].memory_total, node.cards[0].reserved + used
    )
    assert full.used <= used


def test_a_pod_on_an_unknown_card_or_placed_twice_is_refused() -> None:
    node = node_with_full_pod()
    with pytest.raises(ValueError, match="unknown card 99"):
        node.keep(full_pod(1, "elsewhere", card=99))
    with pytest.raises(ValueError, match="already placed"):
        node.keep(full_pod(1, node.name, card=0))
