"""The history: aligned points per node, staleness markers, retention and a point cap."""

from __future__ import annotations

import math

from collector.tsdb.history import History
from collector.tsdb.series import Columns, Matcher, absent_mask, is_stale

A, B = b'm{pod="a"}', b'm{pod="b"}'


def points(
    history: History, *matchers: Matcher, start: float = 0, end: float = 1e12
) -> dict[str, list[tuple[float, float | str]]]:
    out: dict[str, list[tuple[float, float | str]]] = {}
    for group in history.select(list(matchers), start, end):
        for labels, row, absent in zip(
            group.labels, group.values.tolist(), absent_mask(group.values), strict=True
        ):
            label = f"{labels['node']}/{labels.get('pod', '')}/{labels['__name__']}"
            out[label] = [
                (t, "stale" if is_stale(v) else v)
                for t, v, gone in zip(group.times.tolist(), row, absent, strict=True)
                if not gone
            ]
    return out


def test_points_align_and_vanished_series_get_one_stale_marker() -> None:
    history = History()
    history.record("n1", {A: 1.0, B: 2.0}, sampled=10)
    history.record("n1", {A: 1.5, B: 2.5}, sampled=20)
    history.record("n1", {A: 2.0}, sampled=30)
    history.record("n1", {A: 2.5}, sampled=40)
    history.record("n1", {A: 3.0, B: 9.0}, sampled=50)
    assert points(history) == {
        "n1/a/m": [(10, 1.0), (20, 1.5), (30, 2.0), (40, 2.5), (50, 3.0)],
        "n1/b/m": [(10, 2.0), (20, 2.5), (30, "stale"), (40, "stale"), (50, 9.0)],
    }
    assert history.points == 10


def test_a_node_that_goes_marks_everything_stale() -> None:
    history = History()
    history.record("n1", {A: 1.0}, sampled=10)
    history.record("n1", {}, sampled=20)
    history.record("n1", {}, sampled=30)
    assert points(history) == {"n1/a/m": [(10, 1.0), (20, "stale")]}
    history.record("n9", {}, sampled=30)
    assert "n9" not in str(points(history))


def test_select_filters_by_matchers_and_window() -> None:
    history = History()
    for t in (10, 20, 30):
        history.record("n1", {A: t, B: -t}, sampled=t)
        history.record("n2", {A: t * 10}, sampled=t)
    got = points(
        history, Matcher.of("__name__", "=", "m"), Matcher.of("pod", "=~", "a|z"), start=15, end=30
    )
    assert got == {"n1/a/m": [(20, 20.0), (30, 30.0)], "n2/a/m": [(20, 200.0), (30, 300.0)]}
    assert points(history, Matcher.of("node", "!=", "n1"), Matcher.of("pod", "!~", "a")) == {}
    assert history.label_values("node", [Matcher.of("pod", "=", "b")], 0, 100) == {"n1"}
    assert history.label_names([], 0, 100) == {"__name__", "pod", "node"}


def test_out_of_order_points_are_not_recorded() -> None:
    history = History()
    history.record("n1", {A: 1.0}, sampled=20)
    history.record("n1", {A: 9.0}, sampled=10)
    history.record("n1", {A: 9.0}, sampled=20)
    assert points(history) == {"n1/a/m": [(20, 1.0)]}


def test_retention_and_the_point_cap_drop_the_oldest_first() -> None:
    now = [0.0]
    history = History(retention=100, max_points=1000, clock=lambda: now[0])
    for t in range(0, 200, 10):
        history.record("n1", {A: t, B: t}, sampled=t)
    history.trim(now=195)
    assert [t for t, _ in points(history)["n1/a/m"]] == list(range(100, 200, 10))
    assert history.points == 20
    history.max_points = 10
    history.trim(now=195)
    assert history.points <= 10
    kept = [t for t, _ in points(history)["n1/a/m"]]
    assert kept == sorted(kept)
    assert kept[-1] == 190, "the newest points stay"
    history.trim(now=1000)
    assert points(history) == {}
    assert history.points == 0


def test_a_series_that_only_trims_away_is_forgotten_and_steady_state_continues() -> None:
    history = History(retention=25)
    history.record("n1", {A: 1.0, B: 1.0}, sampled=10)
    for t in (20, 30, 40):
        history.record("n1", {A: float(t)}, sampled=t)
    history.trim(now=50)
    history.record("n1", {A: 50.0}, sampled=50)
    assert points(history) == {"n1/a/m": [(30, 30.0), (40, 40.0), (50, 50.0)]}


def test_columns_are_what_select_yields() -> None:
    history = History()
    history.record("n1", {A: math.nan}, sampled=1)
    (group,) = history.select([], 0, 2)
    assert isinstance(group, Columns)
    assert group.values.shape == (1, 1)
    assert math.isnan(group.values[0, 0])
    assert not is_stale(group.values[0, 0]), "a NaN reading is not a staleness marker"
    assert not absent_mask(group.values).any(), "nor an absent point"
