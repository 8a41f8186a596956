"""How the project compiles its loops: numba, in one configuration.

``error_model="numpy"``: a division by zero gives an infinity or NaN, as in Go,
not an exception. ``nogil``: the event loop runs while a query's thread is in a
loop. No on-disk cache (a loop compiles in 0.3-2.4 s at its first use in a
process): the chart runs the collector on a read-only root filesystem, where
numba's cache has nowhere to be written.
"""

from __future__ import annotations

import numba

compiled = numba.njit(nogil=True, error_model="numpy")

inlined = numba.njit(inline="always")
"""For a small function called only from compiled loops: numba inlines it at each call (called
instead, the JSON body's copy of a piece took 30-40% longer: :mod:`collector.web.promjson`)."""
