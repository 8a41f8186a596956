"""The process' memory policy: glibc's heap for large buffers, given back when queries are
quiet, and no huge pages for numpy arrays.

glibc serves a block of 128 KiB or more with a mapping of its own and unmaps
it on free, so every such block is fresh memory whose pages fault in on first
touch (~3 GB/s here, against ~40 GB/s for memory reused from the heap). A
range query at 1,000 nodes makes ~630 MB of short-lived arrays: 161,000 page
faults, 250 ms of system time in a 570 ms query. Served from the heap, the
next query reuses what the last one freed, and the same query takes 270 ms.

So the mmap and trim thresholds are both pinned at :data:`THRESHOLD`: nearly
every buffer comes from the heap, and what is freed stays there for the next
one. Pinning also turns off glibc's own adjustment of the threshold, which
raised it to the size of each large buffer freed and left the resident size
stepping up with every large scrape body. What the heap holds free goes back
to the system in one ``malloc_trim`` once queries have been quiet a while
(:func:`keep_trimmed`), and every minute while none come. Written by hand:
``mallopt`` and ``malloc_trim`` calls, which no library wraps.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import functools
from collections.abc import Callable

from numpy._core import multiarray

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
"""``mallopt`` parameter numbers, from glibc's malloc.h."""

THRESHOLD = 512 << 20
"""Buffers under it come from the heap: above the largest array a query makes at 1,000 nodes
(a 46 MB series x steps matrix; 300 MB for a raw-series panel at 15 s)."""

QUIET = 120.0
"""Seconds without a query before the heap's free memory goes back to the system: a dashboard
refreshing every minute keeps its queries' memory warm."""


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """The C library, if it is glibc (musl's ``mallopt`` does nothing)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.gnu_get_libc_version  # noqa: B018  # present in glibc only
    except (OSError, AttributeError):
        return None
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.mallopt.restype = ctypes.c_int
    libc.malloc_trim.argtypes = [ctypes.c_size_t]
    libc.malloc_trim.restype = ctypes.c_int
    return libc


def pin_thresholds(threshold: int = THRESHOLD) -> bool:
    """Fix glibc's mmap and trim thresholds at ``threshold`` bytes; False where there is no glibc."""
    libc = _glibc()
    if libc is None:
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, threshold)) and bool(
        libc.mallopt(M_TRIM_THRESHOLD, threshold)
    )


def trim() -> bool:
    """Give the free memory of every heap back to the system; whether any went back."""
    libc = _glibc()
    return libc is not None and bool(libc.malloc_trim(0))


async def keep_trimmed(
    quiet: Callable[[], float], every: float = 60.0, after: float = QUIET
) -> None:
    """Every ``every`` seconds, :func:`trim` if ``quiet()`` (seconds without a query) is ``after``
    or more."""
    while True:
        await asyncio.sleep(every)
        if quiet() >= after:
            trim()


def small_pages() -> bool:
    """Have numpy stop asking the kernel for transparent huge pages; False where it cannot.

    Why: numpy advises huge pages for every array of 4 MiB or more. A range
    query at 1,000 nodes makes ~170 MB of such short-lived arrays, and here (a
    virtual machine) the first touch of a fresh 2 MiB page cost up to ~400 us:
    the same query took 470 ms to 1.3 s, the difference all system time. With
    4 KiB pages it took 490-520 ms every time. Numpy reads its switch
    (``NUMPY_MADVISE_HUGEPAGE``) when imported; this sets it after.
    """
    setter = getattr(multiarray, "_set_madvise_hugepage", None)
    if setter is None:
        return False
    setter(False)
    return True


def set_policy() -> tuple[bool, bool]:
    """Both settings, as the collector's command sets them (benches that measure it too)."""
    return pin_thresholds(), small_pages()
