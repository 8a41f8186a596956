"""Compiled loops that read arrays by address fail safe under numba's bounds checking.

The history's passes (:mod:`collector.tsdb.lookups`) read segments through a
table of addresses (:class:`collector.compiled.Pinned`, :func:`array_at`). Under
``NUMBA_BOUNDSCHECK=1`` a wrong table must give an exception (a traceback), never
a read of wild memory (a segfault of the whole collector); without it the checks
must not be compiled at all. The first is shown in a child process started with
the variable (numba reads it once, at import) and without a compile cache, so its
loops are compiled under the checks: :func:`child` is what it runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import numba
import numpy as np
from numpy.typing import NDArray

from collector.compiled import CHECKED, Pinned, array_at
from collector.tsdb import lookups
from collector.tsdb.blocks import Segment, pack
from collector.tsdb.lookups import Windows, gridded

HERE = Path(__file__).resolve().parent
PAST_THE_ARRAY = "items past the end of the array its table row names"
"""Part of :func:`array_at`'s message, which compiled code holds where it checks."""
MATRIX = np.arange(24.0).reshape(8, 3)
"""8 times x 3 series of a segment."""


def packed(matrix: NDArray[np.float64]) -> Segment:
    """The segment of a times x series ``matrix``, times one second apart."""
    times, series = matrix.shape
    segment = pack(np.arange(float(times)), np.arange(series), matrix)
    assert segment is not None
    return segment


def node_of(segment: Segment) -> Windows:
    """A node's whole ``segment``, as a pass reads it."""
    return Windows([(segment, 0, len(segment.times))], np.arange(len(segment.times)), None, 3)


def grid(arrays: list[NDArray[Any]], window: list[int]) -> Any:
    """The range selector's pass (``gridded``) over a node's ``window``: a row of its table."""
    pinned = Pinned(arrays, np.array([window], np.int64))
    return pinned.call(lookups._grid, np.zeros(0, bool), np.zeros(1, np.int64), 3, 8)


def row(address: int, size: int) -> NDArray[np.int64]:
    """A table of one array: its ``address`` and ``size`` in bytes."""
    return np.array([[address, size]], np.int64)


@numba.njit
def read(table: NDArray[np.int64], row: int, offset: int, count: int) -> Any:
    """``count`` int64s from byte ``offset`` of ``table``'s array ``row``, in a compiled loop."""
    return array_at(table, row, offset, count, np.int64)


def wrong_tables(segment: Segment) -> dict[str, Callable[[], object]]:
    """Passes and reads handed a wrong table of ``segment``'s addresses, by what is wrong."""
    buffer, address = segment.buffer, segment.address
    claims = buffer.copy()
    claims[:8].view(np.int64)[0] = 1 << 40  # a head that says far more runs than it holds
    table = row(address, buffer.nbytes)
    return {
        "values past the row's size": lambda: grid(
            [buffer[:-8]], [address, buffer.nbytes - 8, 0, 0, 8]
        ),
        "runs past the row's size": lambda: grid(
            [claims], [claims.ctypes.data, claims.nbytes, 0, 0, 8]
        ),
        "a node past the nodes": lambda: grid([buffer], [address, buffer.nbytes, 1, 0, 8]),
        "a row past the table": lambda: read(table, 1, 0, 1),
        "a negative row": lambda: read(table, -1, 0, 1),
        "a negative offset": lambda: read(table, 0, -8, 1),
        "items past the row's size": lambda: read(table, 0, buffer.nbytes - 8, 2),
        "a row naming another array": lambda: Pinned([buffer], row(address + 8, buffer.nbytes - 8)),
        "a row larger than its array": lambda: Pinned([buffer], row(address, buffer.nbytes + 1)),
        "fewer rows than arrays": lambda: Pinned([buffer, claims], table),
    }


def child() -> None:
    """The child's part, under bounds checking: each wrong table's exception, as JSON;
    then the first again, uncaught."""
    assert CHECKED, "the child runs under bounds checking"
    segment = packed(MATRIX)
    assert gridded([node_of(segment)]).values.tolist() == MATRIX.T.tolist(), "a right table"
    raised: dict[str, str | None] = {}
    cases = wrong_tables(segment)
    for name, case in cases.items():
        try:
            case()
            raised[name] = None
        except (IndexError, ValueError) as error:
            raised[name] = type(error).__name__
    buffer = segment.buffer
    table = row(segment.address, buffer.nbytes)
    head = [len(segment.ids), len(segment.values), segment.values.ctypes.data - segment.address]
    assert read(table, 0, 0, 3).tolist() == head, "a read inside its row"
    assert read(table, 0, buffer.nbytes - 8, 1)[0] == buffer[-8:].view(np.int64)[0], "to its end"
    irs = cast(Any, lookups._grid).inspect_llvm().values()
    holds = any(PAST_THE_ARRAY in ir for ir in irs)
    print(json.dumps({"raised": raised, "holds_the_check": holds}), flush=True)
    cases["values past the row's size"]()


def test_a_wrong_table_raises_under_bounds_checking() -> None:
    """Under ``NUMBA_BOUNDSCHECK=1`` each wrong table handed to a compiled loop raises
    IndexError, and one handed to :class:`Pinned` ValueError; uncaught, the process ends
    with a traceback, not a signal."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["NUMBA_BOUNDSCHECK"] = "1"
    code = "import test_compiled; test_compiled.child()"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=HERE, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 1, f"ended by {done.returncode}: {done.stderr[-2000:]}"
    assert done.stderr.rstrip().splitlines()[-1].startswith("IndexError: array_at"), done.stderr
    report: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    assert report["raised"] == {
        "values past the row's size": "IndexError",
        "runs past the row's size": "IndexError",
        "a node past the nodes": "IndexError",  # numba's own check, in the loop
        "a row past the table": "IndexError",
        "a negative row": "IndexError",
        "a negative offset": "IndexError",
        "items past the row's size": "IndexError",
        "a row naming another array": "ValueError",
        "a row larger than its array": "ValueError",
        "fewer rows than arrays": "ValueError",
    }
    assert report["holds_the_check"], "the checked loop holds array_at's check"


def test_without_bounds_checking_the_checks_are_not_compiled() -> None:
    """The lookups' loop compiled as the collector compiles it holds :func:`array_at`'s check
    only under bounds checking: without it, its reads cost what they cost before."""
    loop = numba.njit(nogil=True, error_model="numpy")(cast(Any, lookups._lookup).py_func)
    node = node_of(packed(MATRIX))
    at, starts = np.array([3, 7]), np.array([0, 8])
    values, row_of = lookups._pinned([node]).call(
        loop, np.zeros(0, bool), np.zeros(1, np.int64), 3, node.times_ms, starts, at, 5
    )
    assert values.tolist() == MATRIX[[3, 7]].T.tolist()
    assert row_of.tolist() == [0, 1, 2]
    (ir,) = loop.inspect_llvm().values()
    assert (PAST_THE_ARRAY in ir) == CHECKED


def test_a_pass_holds_its_arrays_until_it_returns_and_no_longer() -> None:
    """The arrays a pass reads are held by its :class:`Pinned` while it runs, whoever else
    lets them go (here every segment before the pass), and by nothing of it after."""
    segments = [packed(MATRIX + k) for k in range(2)]
    held = [weakref.ref(segment.buffer) for segment in segments]
    pinned = lookups._pinned([node_of(segment) for segment in segments])
    del segments
    assert all(ref() is not None for ref in held), "the pass's arrays are pinned"
    values, row_of = pinned.call(lookups._grid, np.zeros(0, bool), np.array([0, 3]), 6, 8)
    assert values.tolist() == [*MATRIX.T.tolist(), *(MATRIX.T + 1).tolist()]
    assert row_of.tolist() == list(range(6))
    del pinned
    assert all(ref() is None for ref in held), "the answers hold none of the pinned arrays"
