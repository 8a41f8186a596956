"""The process' memory policy: glibc's mmap threshold pinned, large buffers from the heap
while queries run, and no huge pages for numpy arrays.

glibc serves a block of 128 KiB or more with a mapping of its own and unmaps
it on free, but each such free raises that threshold to the freed size (up to
32 MiB). After one oversized scrape body (a 4 MiB buffer) every later buffer
under 4 MiB, page renders, pushes, history blocks, comes from the heap
instead, which fragments and is not given back: the resident size steps up
with each large body and stays there. Pinning the threshold (and the trim
threshold with it) turns the adjustment off.

Queries are the exception. A mapping of its own is fresh memory whose pages
fault in on first touch (~3 GB/s here, against ~40 GB/s for memory reused
from the heap), and a range query at 1,000 nodes makes ~630 MB of short-lived
arrays: 161,000 page faults, 250 ms of system time in a 570 ms query. So
while queries run (:func:`for_queries`) large buffers come from the heap and
what is freed stays there: the next query reuses it, and the same query takes
270 ms. Once they are quiet a while, the heap's free memory goes back to the
system (:func:`keep_given_back`). Outside queries nothing changes: with the
heap kept for every buffer instead, a 12-minute soak's RSS rose 8 MiB where
it had risen 3.

Written by hand: ``mallopt`` and ``malloc_trim`` calls, which no library wraps.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import functools

from numpy._core import multiarray

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
"""``mallopt`` parameter numbers, from glibc's malloc.h."""

THRESHOLD = 128 * 1024
"""glibc's own starting mmap and trim thresholds, kept outside queries."""

QUERY_THRESHOLD = 512 << 20
"""Buffers under it come from the heap while queries run: above the largest array a query
makes at 1,000 nodes (a 46 MB series x steps matrix; 300 MB for a raw-series panel at 15 s)."""

QUIET = 120.0
"""Seconds without a query before the heap's free memory goes back to the system: a dashboard
refreshing every minute keeps its queries' memory warm."""

_held = False
"""Whether the heap keeps what queries freed (its trim threshold is raised)."""


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


def pin_thresholds(mmap: int = THRESHOLD, trim: int = THRESHOLD) -> bool:
    """Fix glibc's mmap and trim thresholds (bytes); False where there is no glibc."""
    libc = _glibc()
    if libc is None:
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, mmap)) and bool(libc.mallopt(M_TRIM_THRESHOLD, trim))


def for_queries() -> None:
    """Queries began: large buffers from the heap, and what is freed kept there."""
    global _held
    _held = pin_thresholds(QUERY_THRESHOLD, QUERY_THRESHOLD)


def queries_done() -> None:
    """The last query ended: large buffers mapped again; what the queries freed stays on the
    heap for the next ones until :func:`give_back`."""
    pin_thresholds(THRESHOLD, QUERY_THRESHOLD if _held else THRESHOLD)


def give_back() -> bool:
    """Give the heap's free memory back to the system and trim it as glibc does again; whether
    the queries had left any there."""
    global _held
    libc = _glibc()
    if libc is None or not _held:
        return False
    libc.malloc_trim(0)
    pin_thresholds()
    _held = False
    return True


async def follow_queries(busy: asyncio.Event, idle: asyncio.Event, after: float = QUIET) -> None:
    """The policy through the queries' comings and goings, until cancelled: :func:`for_queries`
    once ``busy`` is set (a query holds a slot), :func:`queries_done` once ``idle`` is, and
    :func:`give_back` when ``after`` seconds pass with ``busy`` unset.

    Why a task and not the query path: the policy is the process', so its owner is the
    application's lifecycle; a query only says that it runs.
    """
    await busy.wait()
    while True:  # every wake by ``busy`` leads to for_queries, however short the query was
        for_queries()
        await idle.wait()
        queries_done()
        try:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a cancel
            async with asyncio.timeout(after):
                await busy.wait()
        except TimeoutError:
            give_back()
            await busy.wait()


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
