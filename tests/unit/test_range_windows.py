"""Range functions over stacked windows: blocks of nodes scraped at one spacing, each at
its own times, stacked into one window, give each block what it gives alone."""

from __future__ import annotations

from unittest import mock

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.promql import lookup
from collector.promql.arrays import Block
from collector.promql.lookup import Window, bounds, windows
from collector.promql.ranges import RANGE_FUNCTIONS, TIMED
from collector.promql.values import Labels

STEP_MS = 60_000


@st.composite
def blocks(draw: st.DrawFn) -> list[Block]:
    """Nodes of 1-4 series on axes of one spacing at their own offsets (a few with
    another spacing), values with repeats, resets and NaNs, points missing here and there."""
    width = draw(st.integers(1, 12))
    spacing = draw(st.sampled_from((15_000, 30_000, 60_000)))
    made: list[Block] = []
    for _ in range(draw(st.integers(1, 5))):
        offset = draw(st.integers(0, spacing - 1))
        own = spacing if draw(st.integers(0, 4)) else spacing + 1_000
        times = 1_000_000 + offset + np.arange(width, dtype=np.int64) * own
        rows = draw(st.integers(1, 4))
        cells = st.sampled_from((0.0, 1.0, 2.5, 7.0, -3.0, np.nan, 1e15))
        values = np.array(draw(st.lists(cells, min_size=rows * width, max_size=rows * width)))
        present = np.array(
            draw(st.lists(st.booleans(), min_size=rows * width, max_size=rows * width))
        ).reshape(rows, width)
        stale = np.zeros((rows, width), dtype=bool)
        labels: list[Labels] = [(("pod", f"p{len(made)}-{r}"),) for r in range(rows)]
        made.append(Block(times, labels, values.reshape(rows, width), present, stale))
    return made


def alone(block: Block, refs: np.ndarray, range_ms: int) -> Window:
    axis = block.times - block.times[0]
    spans = bounds(block.times, refs, range_ms)
    return Window(
        axis, block.times[:1, None], block.values, block.points, spans, refs, range_ms, refs
    )


@settings(max_examples=150, deadline=None)
@given(
    made=blocks(),
    range_ms=st.sampled_from((30_000, 60_000, 300_000, 3_600_000)),
    name=st.sampled_from(sorted(RANGE_FUNCTIONS)),
    cells=st.sampled_from((lookup.CACHED_CELLS, 30)),
)
def test_each_row_of_stacked_windows_is_what_its_block_gives_alone(
    made: list[Block], range_ms: int, name: str, cells: int
) -> None:
    """Also where a stack is cut into windows of a row or two (``cells``)."""
    refs = 1_000_000 + np.arange(0, 13 * STEP_MS, STEP_MS // 2, dtype=np.int64)
    args = {
        "quantile_over_time": [np.full(refs.size, 0.9)],
        "predict_linear": [np.full(refs.size, 60.0)],
    }
    args["holt_winters"] = [np.full(refs.size, 0.5), np.full(refs.size, 0.3)]
    fn = RANGE_FUNCTIONS[name]
    extra = args.get(name, [])
    with np.errstate(all="ignore"), mock.patch.object(lookup, "CACHED_CELLS", cells):
        stacked, back = windows(made, refs, range_ms, refs, name in TIMED)
        values = np.concatenate([fn(w, extra)[0] for w in stacked])
        present = np.concatenate([fn(w, extra)[1] for w in stacked])
        if back is not None:
            values, present = values[back], present[back]
        want = [fn(alone(b, refs, range_ms), extra) for b in made]
    np.testing.assert_array_equal(present, np.concatenate([p for _, p in want]))
    expected = np.concatenate([v for v, _ in want])
    # to the answers' tolerance: a tensor's reduction may add in another order for
    # another shape (numpy picks its inner loop), as Prometheus adds in its own
    np.testing.assert_allclose(
        np.where(present, values, 0.0), np.where(present, expected, 0.0), rtol=1e-9, atol=0
    )


def test_nodes_scraped_at_one_interval_share_a_window_and_another_spacing_does_not() -> None:
    def node(offset: int, spacing: int) -> Block:
        times = 1_000_000 + offset + np.arange(8, dtype=np.int64) * spacing
        ones = np.ones((2, 8))
        return Block(times, [(("pod", "a"),), (("pod", "b"),)], ones, ones > 0, ones < 0)

    refs = 1_000_000 + np.arange(0, 8 * 15_000, 15_000, dtype=np.int64) + 15_000
    made = [node(1_000, 15_000), node(7_000, 15_000), node(2_000, 16_000)]
    for timed in (True, False):
        stacked, back = windows(made, refs, 60_000, refs, timed)
        rows = [w.values.shape[0] for w in stacked]
        assert back is not None
        if not timed:  # the bounds alone decide
            assert rows[0] >= 4
            continue
        assert rows == [4, 2]
        assert stacked[0].origin[:, 0].tolist() == [1_001_000, 1_001_000, 1_007_000, 1_007_000]
