"""The demo's allocations stay within what HAMi's scheduler grants, but for the one node
oversubscribed on purpose, and its containers' utilisation within their shares, but for
the few that burst.

HAMi's scheduler (``pkg/device/nvidia/device.go``, reference node-registration.md) fits a
vGPU on a card while the card's tasks stay within its split count (10 by default), their
``gpucores`` within its ``devcore`` (100: the whole card) and their memory within its
``devmem`` (the card's memory times ``deviceMemoryScaling``). The allocations are read
back as the collector reads them: through its own pod-watch parser, from the objects the
demo serves.
"""

from __future__ import annotations

from collections import defaultdict

from collector.sources.allocation_series import node_batch
from simulator.agents import SimulatedDirectory
from simulator.cluster import build_cluster
from simulator.families import MONITORS
from simulator.node import SimulatedNode
from simulator.pods import fresh_pod
from simulator.run import DRA_NODES, MEMORY_SCALING
from simulator.workload import full_pod

SPLIT_COUNT = 10
"""HAMi's default ``deviceSplitCount``: tasks a card takes at most."""
NOW = 1_800_000_000.0


def demo_cluster(nodes: int = 6) -> list[SimulatedNode]:
    """The demo's cluster as ``hami-collector demo`` builds it (its first node oversubscribed,
    its full pod kept)."""
    cluster = build_cluster(
        nodes + DRA_NODES,
        seed=1,
        flavours=MONITORS,
        memory_scaling={0: MEMORY_SCALING},
        start_time=NOW,
    )
    cluster[0].keep(full_pod(1, cluster[0].name, card=0))
    return cluster


def granted(cluster: list[SimulatedNode]) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """(node, card UUID) -> each vGPU's (memory, cores) as the collector reads the pods."""
    directory = SimulatedDirectory(cluster, dra=[n.name for n in cluster[-DRA_NODES:]])
    cards: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for holding in directory.holdings():
        for grant in holding.grants:
            memory = grant.memory
            if memory is None:  # a KAI fraction: its memory is the limit its monitor reports
                node = next(n for n in cluster if n.name == holding.pod.node)
                memory = next(
                    a.limit
                    for a in [*node.allocations, fresh_pod(node)]
                    if a.pod == holding.pod.name and a.vdevice_index == grant.vdevice_index
                )
            cards[(holding.pod.node, grant.device_uuid)].append((memory, grant.cores or 0.0))
    return cards


def check_grants(cluster: list[SimulatedNode]) -> None:
    cards = granted(cluster)
    for node in cluster:
        for card in node.cards:
            vgpus = cards[(node.name, card.device_uuid)]
            memory = sum(m for m, _ in vgpus)
            assert 0 < len(vgpus) <= SPLIT_COUNT, (node.name, card.index)
            assert sum(c for _, c in vgpus) <= 1 + 1e-9, (node.name, card.index, vgpus)
            assert memory <= card.memory_total * node.memory_scaling, (node.name, card.index)
            if node.memory_scaling > 1:  # on purpose: every card past its size
                assert memory > card.memory_total, (node.name, card.index)
            assert card.memory_used <= card.memory_total


def test_the_demo_grants_what_hamis_scheduler_would_and_no_more() -> None:
    cluster = demo_cluster()
    assert [n.memory_scaling for n in cluster] == [MEMORY_SCALING] + [1.0] * (len(cluster) - 1)
    check_grants(cluster)
    # pods end and others take their place for an hour: still within the same bounds
    for minute in range(0, 61, 5):
        for node in cluster:
            node.step(NOW + 60 * minute)
    assert any(
        a.pod_uid not in {b.pod_uid for b in demo_cluster()[0].allocations}
        for a in cluster[0].allocations
    )
    check_grants(cluster)


def test_utilisation_stays_within_each_share_but_for_a_few_bursts() -> None:
    cluster = demo_cluster()
    within = bursting = 0
    for t in (NOW, NOW + 97, NOW + 1800):
        for node in cluster:
            node.step(t)
            for a in node.allocations:
                if not 0 < a.cores < 100 or a.sm_util == 0:
                    continue
                if a.sm_util <= a.cores:
                    within += 1
                else:
                    bursting += 1
                    assert a.sm_util <= min(100, round(a.cores * 1.6) + 20), a
    assert bursting > 0, "the demo shows containers past their share"
    assert bursting < within / 5, "bursts are the exception"


def test_the_oversubscribed_nodes_allocations_reach_the_collector_as_granted() -> None:
    cluster = demo_cluster(1)
    directory = SimulatedDirectory(cluster, dra=[n.name for n in cluster[-DRA_NODES:]])
    node = cluster[0]
    held = [h for h in directory.holdings() if h.pod.node == node.name]
    series = node_batch(held, {}, NOW).series
    allocated = sum(v for k, v in series.items() if k.startswith(b"hami_vgpu_memory_allocated"))
    physical = sum(card.memory_total for card in node.cards)
    assert physical < allocated <= physical * MEMORY_SCALING
