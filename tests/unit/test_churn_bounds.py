"""What the collector remembers per source returns to its steady size after churn.

Agents restart under new instance names, nodes leave and join: the lines of
``hami_usage_collector_source_*`` must follow the sources alive now, not every name seen.
"""

from __future__ import annotations

from collector.exposition.parse import parse
from collector.normalise.batch import Batch, Source
from collector.normalise.schema import SourceKind
from collector.remote.encode import Heads
from collector.selfmetrics import SelfMetrics
from collector.store.latest import Store


def _agent(node: str, instance: int) -> Source:
    return Source(f"agent/{node}", f"agent {node}-{instance}", node, SourceKind.AGENT, 0)


def _source_up(metrics: SelfMetrics) -> dict[tuple[str, str], float]:
    page = b"".join(metrics.render(openmetrics=False))
    return {
        (dict(s.labels)["node"], dict(s.labels)["source"]): s.value
        for s in parse(page).samples
        if s.name == "hami_usage_collector_source_up"
    }


def test_a_restarted_agent_leaves_one_source_line_naming_its_new_instance() -> None:
    metrics = SelfMetrics(Store(stale_after=60))
    for instance in range(50):
        metrics.pushed(_agent("n1", instance), Batch({}), 0, wall=float(instance))
    assert _source_up(metrics) == {("n1", "agent n1-49"): 1.0}


def test_source_lines_follow_the_live_sources_through_node_and_agent_churn() -> None:
    metrics = SelfMetrics(Store(stale_after=60))
    steady: dict[tuple[str, str], float] = {}
    for generation in range(40):
        nodes = [f"node-{generation // 4}-{i}" for i in range(3)]  # replaced every 4 generations
        for node in nodes:
            metrics.pushed(_agent(node, generation), Batch({}), 0, wall=float(generation))
        gone = {f"node-{(generation - 1) // 4}-{i}" for i in range(3)} - set(nodes)
        for node in gone:
            metrics.forget(_agent(node, generation - 1))
        steady = _source_up(metrics)
        assert len(steady) == len(nodes), f"generation {generation}: {sorted(steady)}"
    assert set(steady) == {(f"node-9-{i}", f"agent node-9-{i}-39") for i in range(3)}


def test_remote_write_heads_of_nodes_that_left_are_dropped_with_their_series() -> None:
    heads = Heads([("cluster", "test")])
    for generation in range(30):
        node = f"node-{generation}"  # a node replaced by one of a new name each generation
        keys = [
            f'hami_vgpu_memory_used_bytes{{pod="p{generation}-{i}"}}'.encode() for i in range(4)
        ]
        heads.heads(node, keys)
        heads.forget(node, keys)  # its series vanished: the markers were sent
        assert (len(heads), heads.nodes) == (0, 0), f"generation {generation}"
