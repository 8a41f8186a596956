"""The soak's own oracle (bench/soak/checks.py): each rule finds what it must, and only that."""

from __future__ import annotations

from bench.soak.checks import (
    NodeState,
    Verdict,
    judge,
    largest_gap,
    parse_page,
    slope_per_hour,
)

PAGE = """\
# TYPE hami_vgpu_memory_used_bytes gauge
hami_vgpu_memory_used_bytes{node="a",pod="p1"} 1
hami_vgpu_memory_used_bytes{node="a",pod="p2"} 2
hami_vgpu_memory_used_bytes{node="b",pod="p3"} 3
# TYPE hami_usage_collector_node_source_info gauge
hami_usage_collector_node_source_info{node="a",source="m",kind="hami"} 1
hami_usage_collector_node_source_info{node="b",source="m",kind="hami"} 1
# TYPE hami_usage_collector_asyncio_tasks gauge
hami_usage_collector_asyncio_tasks 42
"""


def _keys(page_text: str, node: str) -> frozenset[tuple[str, frozenset[tuple[str, str]]]]:
    return frozenset(parse_page(page_text).series[node])


def _judge(
    page_text: str, states: list[NodeState], now: float = 100.0, before: set[str] | None = None
) -> Verdict:
    return judge(parse_page(page_text), states, now, 0.0, 5.0, 6.0, before or set())


def test_page_is_split_by_node_with_our_own_series_apart() -> None:
    page = parse_page(PAGE)
    assert sorted(page.series) == ["a", "b"]
    assert len(page.series["a"]) == 2
    assert page.value("hami_usage_collector_asyncio_tasks") == 42
    assert page.duplicates == []


def test_a_repeated_series_is_a_duplicate() -> None:
    page = parse_page(PAGE + 'hami_vgpu_memory_used_bytes{node="b",pod="p3"} 4\n')
    assert len(page.duplicates) == 1
    assert "duplicate series" in _judge(PAGE.replace('"p2"', '"p1"'), []).problems[0]


def test_a_healthy_page_has_no_problem_and_counts_what_held() -> None:
    states = [
        NodeState("a", True, 0.0, expected=_keys(PAGE, "a")),
        NodeState("b", True, 0.0, pods=frozenset({"p3"})),
        NodeState("c", False, 0.0),
    ]
    verdict = _judge(PAGE, states)
    assert verdict.problems == []
    assert sum(verdict.passed.values()) == 3


def test_a_live_node_missing_after_its_grace_is_found_not_before() -> None:
    states = [NodeState("a", True, 0.0), NodeState("b", True, 0.0), NodeState("c", True, 90.0)]
    assert _judge(PAGE, states, now=94.0).problems == []
    assert _judge(PAGE, states, now=96.0).problems == ["node c missing (6 s after its last change)"]


def test_a_gone_node_is_a_ghost_only_past_stale_after() -> None:
    states = [NodeState("a", True, 0.0), NodeState("b", False, 90.0)]
    assert _judge(PAGE, states, now=100.0).problems == []
    assert _judge(PAGE, states, now=102.0).problems == ["ghost: node b shown 12 s after it went"]


def test_unknown_and_refused_nodes_are_problems_at_once() -> None:
    page = PAGE + 'hami_vgpu_memory_used_bytes{node="gpu-refused-x",pod="p"} 1\n'
    problems = _judge(page, [NodeState("a", True, 0.0)]).problems
    assert "node gpu-refused-x shown: a refused push was accepted" in problems
    assert "node b shown: no such node" in problems


def test_series_differing_from_the_oracle_count_only_at_the_second_read() -> None:
    wrong = frozenset(k for k in _keys(PAGE, "a") if dict(k[1])["pod"] == "p1")
    states = [NodeState("a", True, 0.0, expected=wrong), NodeState("b", True, 0.0)]
    first = _judge(PAGE, states)
    assert first.problems == []
    assert first.mismatched == {"a"}
    second = _judge(PAGE, states, before=first.mismatched)
    assert len(second.problems) == 1
    assert second.problems[0].startswith("node a: 0 series missing, 1 extra")


def test_wrongly_attributed_pods_are_found() -> None:
    states = [NodeState("a", True, 0.0), NodeState("b", True, 0.0, pods=frozenset({"p9"}))]
    problems = _judge(PAGE, states, before={"b"}).problems
    assert problems == ["node b: pods ['p3'] shown that should not be, ['p9'] missing"]


def test_nothing_is_judged_while_quiet_but_refused_data_still_is() -> None:
    page = parse_page(PAGE + 'x{node="gpu-refused-y"} 1\n')
    verdict = judge(page, [NodeState("c", True, 0.0)], 100.0, 200.0, 5.0, 6.0, set())
    assert verdict.problems == [
        "node a shown: no such node",
        "node b shown: no such node",
        "node gpu-refused-y shown: a refused push was accepted",
    ]


def test_slope_and_gap() -> None:
    assert slope_per_hour([(0.0, 100.0), (1800.0, 110.0), (3600.0, 120.0)]) == 20.0
    assert slope_per_hour([(0.0, 1.0), (1.0, 1.0)]) == 0.0
    assert largest_gap([2.0, 4.0, 9.0], 0.0, 10.0) == 5.0
    assert largest_gap([], 0.0, 10.0) == 10.0
