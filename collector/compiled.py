"""How the project compiles its loops: numba, in one configuration.

``error_model="numpy"``: a division by zero gives an infinity or NaN, as in Go,
not an exception. ``nogil``: the event loop runs while a query's thread is in a
loop. No on-disk cache (a loop compiles in 0.3-2.4 s at its first use in a
process): the chart runs the collector on a read-only root filesystem, where
numba's cache has nowhere to be written.
"""

from __future__ import annotations

from typing import Any

import numba
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.numpy_support import carray

compiled = numba.njit(nogil=True, error_model="numpy")

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
