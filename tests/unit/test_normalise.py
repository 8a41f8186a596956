"""Normalisation: every flavour lands in the canonical schema, values and units unchanged."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.exposition.parse import ParseError, parse_series
from collector.normalise import schema
from collector.normalise.batch import Batch
from collector.normalise.bodies import Normaliser, PassThrough
from simulator.cluster import build_cluster
from simulator.families import MONITORS
from testing.oracle import expected_canonical


def canonical(batch: Batch, node: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """The batch as the simulator's oracle writes series: node label included."""
    out = {}
    for key, value in batch.series.items():
        name, labels = parse_series(key)
        assert "node" not in dict(labels), "node is added on output, never kept in a key"
        out[(name, frozenset((*labels, ("node", node))))] = value
    return out


@pytest.mark.parametrize("flavour", MONITORS)
def test_each_flavour_matches_the_oracle(flavour: str) -> None:
    now = time.time()
    (node,) = build_cluster(1, seed=7, flavours=(flavour,), start_time=now)
    normaliser = Normaliser(node.name)
    strict = normaliser.normalise(node.exposition(now))
    fast = normaliser.normalise(node.exposition(now))
    assert strict == fast, "the cached fast path must give what the strict path gave"
    got = canonical(fast, node.name)
    assert got == expected_canonical(node, now)
    assert (fast.duplicates, fast.conflicts, fast.dropped) == (0, 0, 0)
    names = {name for name, _ in got}
    assert not names & set(schema.LEGACY), "no legacy name may reach the output"


def test_values_follow_the_body_in_steady_state() -> None:
    (node,) = build_cluster(1, seed=3, flavours=("volcano",))
    normaliser = Normaliser(node.name)
    for step in range(5):
        now = 1_900_000_000.0 + 17 * step
        node.step(now)
        got = canonical(normaliser.normalise(node.exposition(now)), node.name)
        assert got == expected_canonical(node, now)


def test_hami_host_series_lose_their_own_node_label() -> None:
    body = (
        b'hami_host_gpu_utilization_ratio{device_index="0",device_type="NVIDIA-NVIDIA H200",'
        b'device_uuid="GPU-1",node="node-a",zone="vGPU"} 7\n'
    )
    batch = Normaliser("node-a").normalise(body)
    assert list(batch.series) == [
        b'hami_host_gpu_utilization_ratio{device_index="0",device_type="NVIDIA-NVIDIA H200",device_uuid="GPU-1",zone="vGPU"}'
    ]
    assert batch.conflicts == 0


def test_a_foreign_node_label_is_corrected_and_counted_every_scrape() -> None:
    body = b'HostCoreUtilization{deviceidx="0",deviceuuid="GPU-1",nodeid="elsewhere"} 5\nother 1\n'
    normaliser = Normaliser("here")
    for _ in range(2):
        batch = normaliser.normalise(body)
        assert batch.conflicts == 1
        assert (
            batch.series[b'hami_host_gpu_utilization_ratio{device_index="0",device_uuid="GPU-1"}']
            == 5
        )


def test_breakdown_labels_become_series_and_offset_goes() -> None:
    body = (
        b'hami_container_device_memory_bytes{buffer_size="3",container="c",context_size="1",'
        b'device_uuid="G",module_size="2",namespace="n",offset="9",pod="p",vdevice_index="0",zone="vGPU"} 6\n'
    )
    batch = Normaliser("x").normalise(body)
    rest = b'{container="c",device_uuid="G",namespace="n",pod="p",vdevice_index="0",zone="vGPU"}'
    assert batch.series == {
        b"hami_container_device_memory_bytes" + rest: 6.0,
        b"hami_vgpu_memory_context_bytes" + rest: 1.0,
        b"hami_vgpu_memory_module_bytes" + rest: 2.0,
        b"hami_vgpu_memory_buffer_bytes" + rest: 3.0,
    }


def test_byte_sizes_that_change_every_scrape_match_a_fresh_parse() -> None:
    legacy = (
        b'Device_memory_desc_of_container{context="%d",ctrname="c",data="%d",deviceuuid="G",'
        b'module="%d",node="elsewhere",offset="%d",podname="p",podnamespace="n",vdeviceid="0"} %d\n'
    )
    other = b'hami_vgpu_memory_used_bytes{data="%d",offset="%d"} 1\n'  # not sizes here
    warm = Normaliser("x")
    for scrape in range(4):
        sizes = (scrape, 1000 + scrape, 7 * scrape, 3 + scrape, 2000 + scrape)
        body = legacy % sizes + other % sizes[:2]
        fresh = Normaliser("x").normalise(body)
        batch = warm.normalise(body)
        assert batch == fresh, "a known shape gives what parsing the text gives"
        assert batch.series[b'hami_vgpu_memory_used_bytes{data="%d",offset="%d"}' % sizes[:2]] == 1
        assert batch.conflicts == 1
    rest = b'{container="c",device_uuid="G",namespace="n",pod="p",vdevice_index="0"}'
    assert batch.series[b"hami_vgpu_memory_buffer_bytes" + rest] == 1003
    with pytest.raises(ValueError, match="invalid value"):
        warm.normalise(legacy.replace(b'data="%d"', b'data="lots"') % (1, 2, 3, 4))
    assert warm.normalise(body) == fresh


def test_a_series_of_its_own_beats_a_breakdown_label() -> None:
    rest = b'{container="c",device_uuid="G",namespace="n",pod="p",vdevice_index="0"}'
    body = (
        b'hami_container_device_memory_bytes{container="c",context_size="1",device_uuid="G",'
        b'namespace="n",pod="p",vdevice_index="0"} 6\n'
        b"hami_vgpu_memory_context_bytes" + rest + b" 5\n"
    )
    batch = Normaliser("x").normalise(body)
    assert batch.series[b"hami_vgpu_memory_context_bytes" + rest] == 5
    assert batch.duplicates == 0


def test_duplicates_last_wins_and_are_counted() -> None:
    normaliser = Normaliser("x")
    for _ in range(2):
        batch = normaliser.normalise(b'a{l="1"} 1\nb 2\na{l="1"} 3\n')
        assert batch.series == {b'a{l="1"}': 3.0, b"b{}": 2.0}
        assert batch.duplicates == 1


def test_unknown_families_pass_through_with_their_metadata() -> None:
    body = b'# HELP hami_build_info Build.\n# TYPE hami_build_info gauge\nhami_build_info{version="v2.10.0"} 1\n'
    batch = Normaliser("x").normalise(body)
    assert batch.series == {b'hami_build_info{version="v2.10.0"}': 1.0}
    assert batch.families["hami_build_info"] == schema.Family("hami_build_info", "Build.", "gauge")


def test_denied_and_unmappable_families_are_dropped_and_counted() -> None:
    normaliser = Normaliser("x", PassThrough(allow=(".*",), deny=("go_.*",)))
    body = b'go_goroutines 5\ngo_threads 3\nMigInfo{deviceuuid="G",instanceid="1"} 1\nkeep 1\n'
    for _ in range(2):
        batch = normaliser.normalise(body)
        assert batch.series == {b"keep{}": 1.0}
        assert (batch.dropped, batch.duplicates) == (3, 0)


def test_a_bad_body_raises_and_the_normaliser_still_works() -> None:
    normaliser = Normaliser("x")
    good = normaliser.normalise(b"a 1\n")
    with pytest.raises(ParseError, match="line 2"):
        normaliser.normalise(b"a 1\na{ 2\n")
    with pytest.raises(ValueError, match="invalid value"):
        normaliser.normalise(b'hami_container_device_memory_bytes{context_size="lots"} 1\n')
    assert normaliser.normalise(b"a 1\n") == good


def test_what_the_normaliser_keeps_stays_bounded_as_series_churn() -> None:
    normaliser = Normaliser("x")
    for round_ in range(30):
        body = b"".join(b'm{pod="p%d"} 1\n' % (round_ * 100 + i) for i in range(100))
        assert len(normaliser.normalise(body).series) == 100
    assert normaliser._layout is not None
    assert len(normaliser._layout.texts) == 100, "only the last body's texts are kept"


_MEMORY = (
    b'Device_memory_desc_of_container{context="%d",ctrname="%s",data="%d",deviceuuid="G",'
    b'module="%d",offset="0",podname="%s",podnamespace="n",vdeviceid="0"} %d\n'
)


def _volcano(rows: list[tuple[int, bytes, int, int, bytes, int]]) -> bytes:
    """Memory lines sorted by their text, sizes included, as the monitors sort them."""
    return (
        b"".join(sorted(_MEMORY % row for row in rows)) + b'HostCoreUtilization{deviceuuid="G"} 3\n'
    )


def test_memory_lines_that_change_order_with_their_sizes_match_a_fresh_parse() -> None:
    warm = Normaliser("x")
    keys = None
    for scrape in range(6):
        rows = [
            (5 - scrape, b"a", 100 * scrape, 7, b"p1", 11 + scrape),
            (scrape, b"b", 50, 9 * scrape, b"p2", 22),
            (scrape % 2, b"c", 1, 2, b"p3", 33),
        ]
        body = _volcano(rows)
        batch = warm.normalise(body)
        assert batch == Normaliser("x").normalise(body)
        if keys is not None:
            assert list(batch.series) == keys, "keys keep their order from scrape to scrape"
        keys = list(batch.series)
    rest = b'{container="a",device_uuid="G",namespace="n",pod="p1",vdevice_index="0"}'
    assert batch.series[b"hami_vgpu_memory_buffer_bytes" + rest] == 500
    assert batch.series[b"hami_container_device_memory_bytes" + rest] == 16


@pytest.mark.parametrize(
    "change",
    [
        (b'podname="p2"', b'podname="p9"'),  # a pod replaced, same line count
        (b'ctrname="b"', b'ctrname="a"'),  # two lines of one series: the last wins
        (b'offset="0",podname="p3"', b'offset="5",podname="p3"'),  # a size no series takes
        (b"HostCoreUtilization", b"HostGPUMemoryUsage"),  # a plain line renamed
        (b'ctrname="c"', b'ctrname="c",extra="1"'),  # a memory line with another label set
        (b'ctrname="c"', b'ctrname="c\\\\"'),  # an escaped backslash
    ],
)
def test_a_body_laid_out_almost_as_the_last_matches_a_fresh_parse(
    change: tuple[bytes, bytes],
) -> None:
    rows = [(1, b"a", 2, 3, b"p1", 4), (5, b"b", 6, 7, b"p2", 8), (9, b"c", 10, 11, b"p3", 12)]
    normaliser = Normaliser("x")
    normaliser.normalise(_volcano(rows))
    body = _volcano(rows).replace(*change)
    for _ in range(2):
        assert normaliser.normalise(body) == Normaliser("x").normalise(body)


@pytest.mark.parametrize(
    ("bad", "good", "error"),
    [
        (b"} 8_0\n", b"} 8\n", "line 2"),  # a digit separator: Go's ParseFloat refuses it
        (b"} x\n", b"} 3\n", "line 3"),
        (b'data="6_0"', b'data="6"', "invalid value"),  # a size
    ],
)
def test_a_bad_value_in_a_known_layout_is_refused(bad: bytes, good: bytes, error: str) -> None:
    rows = [(1, b"a", 2, 3, b"p1", 4), (5, b"b", 6, 7, b"p2", 8)]
    normaliser = Normaliser("x")
    before = normaliser.normalise(_volcano(rows))
    with pytest.raises(ValueError, match=error):
        normaliser.normalise(_volcano(rows).replace(good, bad))
    assert normaliser.normalise(_volcano(rows)) == before


_LINE = st.one_of(
    st.builds(
        lambda size, pod, offset, value: (
            _MEMORY % (size % 3, pod, size, 7, pod, value)
            if not offset
            else (_MEMORY % (1, pod, size, 7, pod, value)).replace(b'offset="0"', b'offset="4"')
        ),
        st.integers(0, 99),
        st.sampled_from([b"a", b"b", b"c"]),
        st.booleans(),
        st.integers(0, 9),
    ),
    st.sampled_from(
        [
            b'HostCoreUtilization{deviceuuid="G"} 3\n',
            b'HostCoreUtilization{deviceuuid="G",nodeid="other"} 4\n',
            b"go_goroutines 5\n",
            b'MigInfo{deviceuuid="G"} 1\n',
            b"# HELP m Some help.\n",
            b"\n",
            b"m 1_0\n",
            b"m 2 1700000000\n",
            b'hami_vgpu_memory_context_bytes{container="a",device_uuid="G",namespace="n",pod="a",vdevice_index="0"} 8\n',
        ]
    ),
)


def _outcome(normaliser: Normaliser, body: bytes) -> tuple[object, ...]:
    """What normalising ``body`` gives: series and counts, or the error.

    Families are left out: a normaliser remembers those of the families it met
    before. So is the order of the series, which follows the layout a
    normaliser found (and stays from one scrape to the next).
    """
    try:
        batch = normaliser.normalise(body)
    except ValueError as exc:
        return (str(exc),)
    counts = (batch.samples, batch.duplicates, batch.conflicts, batch.dropped)
    return dict(batch.series), counts


def test_the_last_line_of_a_container_wins_whichever_lines_share_their_sizes() -> None:
    """Found by the property below: three lines of one container, the first and last with
    the same sizes (``offset`` has no series), after a body that knew two of their texts."""

    def line(size: int, offset: int, value: int, pod: bytes = b"b") -> bytes:
        text = _MEMORY % (size, pod, size, 7, pod, value)
        return text.replace(b'offset="0"', b'offset="%d"' % offset)

    first = line(0, 0, 0, b"a") * 5 + line(0, 0, 0) + line(1, 0, 0)
    body = line(0, 0, 0, b"a") * 3 + line(1, 4, 0) + line(0, 0, 1) + line(1, 0, 0)
    warm = Normaliser("x")
    warm.normalise(first)
    got, fresh = warm.normalise(body), Normaliser("x").normalise(body)
    assert dict(got.series) == dict(fresh.series)
    rest = b'{container="b",device_uuid="G",namespace="n",pod="b",vdevice_index="0"}'
    assert got.series[b"hami_container_device_memory_bytes" + rest] == 0, "the last line's value"
    assert got.series[b"hami_vgpu_memory_context_bytes" + rest] == 1, "the last line's sizes"
    assert got.series[b"hami_vgpu_memory_buffer_bytes" + rest] == 1


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_LINE, max_size=8), min_size=1, max_size=6))
def test_a_warm_normaliser_gives_what_a_fresh_one_gives(bodies: list[list[bytes]]) -> None:
    """Bodies laid out as the last, or almost, or not at all: the layout changes nothing."""
    warm = Normaliser("x", PassThrough(deny=("go_.*",)))
    for lines in bodies:
        body = b"".join(lines)
        fresh = Normaliser("x", PassThrough(deny=("go_.*",)))
        assert _outcome(warm, body) == _outcome(fresh, body)
