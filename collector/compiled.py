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
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import numba
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.numpy_support import carray

F = TypeVar("F", bound=Callable[..., Any])


def _cache_folder(base: str) -> str:
    """The folder under ``base`` for this version of the collector's sources ("" for none), and
    for numba's bounds checking (the loops compiled under it are other code)."""
    if not base:
        return ""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.rglob("*.py")):
        digest.update(path.read_bytes())
    checked = "-boundscheck" if os.environ.get("NUMBA_BOUNDSCHECK") == "1" else ""
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
def array_at(address: int, count: int, dtype: Any) -> Any:
    """The ``count`` items of ``dtype`` that lie at ``address``, as an array (no copy).

    Why: a compiled loop takes its arrays one argument each, and a read of many
    nodes crosses ~1,000 segments of a few arrays each. Handed over in a numba
    typed list they cost 3.6 us an array to gather, ~70 ns each access; their
    addresses, laid in one int64 array, cost nothing. Whoever passes an address
    keeps its array alive for the loop's length.
    """
    return carray(_pointer(address), count, dtype)
