"""How the project compiles its loops: numba, in one configuration.

``error_model="numpy"``: a division by zero gives an infinity or NaN, as in Go,
not an exception. ``nogil``: the event loop runs while a query's thread is in a
loop. A loop compiles in 0.3-2.4 s at its first use in a process, so the query
engine's warm-up (:mod:`collector.promql.warmup`) makes those first uses before
the collector says it is ready: 10-14 s of compiling on a small node.

With ``NUMBA_CACHE_DIR`` set (the chart sets it to a folder of the pod, which
outlives a container's restart; ``make test`` to one of the checkout), the
compiled loops are kept there and a later process loads them: its warm-up takes
about 0.5 s. Why a folder of its own per version of the sources: numba checks a
cached loop against its own file only, not against the loops inlined into it
from other files, so an edited helper would leave its callers stale. Without
the variable nothing is written: the chart's root filesystem is read-only.

Under numba's bounds checking (``NUMBA_BOUNDSCHECK=1``, :data:`CHECKED`; ``make
test-boundscheck``) an index past an array raises IndexError instead of reading
past it, and so do the loops' reads by address (:func:`array_at`): a mistake is a
traceback, not a segfault of the whole collector. Without it those checks are not
compiled at all.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

import numba
import numpy as np
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.numpy_support import carray
from numpy.typing import NDArray

F = TypeVar("F", bound=Callable[..., Any])
R = TypeVar("R")

CHECKED: bool = bool(numba.config.BOUNDSCHECK)  # type: ignore[attr-defined]  # see CACHE_DIR
"""Whether numba checks the compiled loops' indexes (``NUMBA_BOUNDSCHECK=1``): then
:func:`array_at` checks its reads too, and :class:`Pinned` the addresses it is given."""


def _cache_folder(base: str) -> str:
    """The folder under ``base`` for this version of the collector's sources ("" for none), and
    for numba's bounds checking (the loops compiled under it are other code)."""
    if not base:
        return ""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.rglob("*.py")):
        digest.update(path.read_bytes())
    checked = "-boundscheck" if CHECKED else ""
    return str(Path(base) / f"collector-{numba.__version__}-{digest.hexdigest()[:16]}{checked}")


_CACHE = _cache_folder(os.environ.get("NUMBA_CACHE_DIR", ""))
numba.config.CACHE_DIR = _CACHE  # type: ignore[attr-defined]  # the stubs lack numba's settings
_njit = numba.njit(nogil=True, error_model="numpy", cache=bool(_CACHE))
LOOPS: list[Any] = []
"""Every loop made by :func:`compiled`, in the order their modules were imported."""


def compiled(function: F) -> F:
    """``function`` as a compiled loop (a numba dispatcher), compiled at its first call for
    each set of argument types (``collector/promql/warmup.py`` makes those calls at start)."""
    loop = _njit(function)
    LOOPS.append(loop)
    return cast(F, loop)


def specialisations() -> int:
    """Compilations of :data:`LOOPS` made in this process so far: one per loop and argument
    types. A count that grows after the warm-up means a query paid for a compilation."""
    return sum(len(loop.signatures) for loop in LOOPS)


inlined = numba.njit(inline="always")
"""For a small function called only from compiled loops: numba inlines it at each call (called
instead, the JSON body's copy of a piece took 30-40% longer: :mod:`collector.web.promjson`)."""


def _as_pointer(typingctx: Any, address: Any) -> tuple[Any, Any]:
    """The int64 ``address`` as a pointer :func:`carray` reads."""

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.inttoptr(args[0], cgutils.voidptr_t)

    return types.voidptr(types.int64), codegen


_pointer: Any = intrinsic(_as_pointer)


@inlined
def array_at(table: Any, row: int, offset: int, count: int, dtype: Any) -> Any:
    """The ``count`` items of ``dtype`` from byte ``offset`` of the array at ``table``'s
    ``row`` (:class:`Pinned`: its address and size in bytes), as an array (no copy).

    Why addresses: a compiled loop takes its arrays one argument each, and a read
    of many nodes crosses ~1,000 segments of a few arrays each. Handed over in a
    numba typed list they cost 3.6 us an array to gather, ~70 ns each access;
    their addresses, laid in one int64 array, cost nothing. Under bounds checking
    (:data:`CHECKED`) a row past the table, or items past the row's array, raise
    IndexError; without it the loop reads what it is told, and :class:`Pinned`
    keeps the arrays alive.
    """
    # CHECKED is a constant of the compiled code: when False neither check is compiled (their
    # cost: nothing; tests/integration/test_compiled.py reads the loops' LLVM IR for it)
    if CHECKED and (row < 0 or row >= table.shape[0] or offset < 0 or count < 0):
        raise IndexError("array_at: a row past its table, or a negative offset or count")
    found = carray(_pointer(table[row, 0] + offset), count, dtype)
    if CHECKED and offset + found.nbytes > table[row, 1]:
        raise IndexError("array_at: items past the end of the array its table row names")
    return found


class Pinned:
    """A table of arrays' addresses for one compiled pass, and the arrays it names.

    Row ``i`` of the table begins with the address of ``arrays[i]`` and a size in
    bytes no larger than that array's; its other columns are the caller's (which
    part of the array a pass reads, say). The pass reads the arrays through
    :func:`array_at`. Why the caller lays the addresses: reading an array's costs
    ~1 us (numpy's ``ctypes``), 2 ms for a pass over 2,000 segments, so their owner
    takes it once, when it makes them (:meth:`collector.tsdb.blocks.Segment.laid`).
    Under bounds checking (:data:`CHECKED`) each row is checked against its array,
    and a row that names another raises ValueError.

    The object holds a reference to every array its table names, and hands the
    table to nothing but :meth:`call`, which holds the object until the loop
    returns: so no address outlives its array, whatever happens meanwhile to the
    objects that held them (an axis may drop or merge its segments while a
    query's thread is in a loop, the GIL released).

    How long it lives: from where the pass's table is made, just before the
    compiled call, until that call returns; a local variable of the function that
    makes the call, never stored in a result or on another object. The loops'
    answers are new arrays, not views of these, so once the pass returns the
    arrays are held by their owners alone again.
    """

    __slots__ = ("_arrays", "_table")

    def __init__(self, arrays: Sequence[NDArray[Any]], table: NDArray[np.int64]) -> None:
        self._arrays = tuple(arrays)
        self._table = table
        if CHECKED:
            self._check()

    def _check(self) -> None:
        """Raise ValueError where a row is not the address and size of its array."""
        if self._table.ndim != 2 or len(self._table) != len(self._arrays):
            raise ValueError("Pinned: the table has not one row per array")
        for i, array in enumerate(self._arrays):
            address, size = self._table[i, :2]
            if address != array.ctypes.data or not 0 <= size <= array.nbytes:
                raise ValueError(f"Pinned: row {i} is not the address and size of its array")
            if not array.flags.c_contiguous:
                raise ValueError(f"Pinned: array {i} is not contiguous")

    def call(self, loop: Callable[..., R], *args: Any) -> R:
        """``loop(table, *args)``, the arrays held until it returns."""
        return loop(self._table, *args)
