"""The process' memory policy: glibc's mmap threshold, and no huge pages for numpy arrays.

Keep glibc from holding on to the memory of one large, short-lived buffer.

glibc serves a block of 128 KiB or more with its own mapping and unmaps it on
free, but each such free raises that threshold to the freed size (up to
32 MiB). After one oversized scrape body (a 4 MiB buffer) every later buffer
under 4 MiB, page renders, pushes, history blocks, comes from the heap
instead, which fragments and is not given back: the resident size steps up
with each large body and stays there. Fixing the threshold turns the
adjustment off. Written by hand: one ``mallopt`` call, which no library wraps.
"""

from __future__ import annotations

import ctypes
import ctypes.util

from numpy._core import multiarray

M_MMAP_THRESHOLD = -3
"""``mallopt`` parameter number, from glibc's malloc.h."""

THRESHOLD = 128 * 1024
"""glibc's own starting threshold, kept for good."""


def pin_mmap_threshold(threshold: int = THRESHOLD) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` bytes; False where there is no glibc."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # noqa: B018  # present in glibc only: musl's mallopt does nothing
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, threshold))


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
    return pin_mmap_threshold(), small_pages()
