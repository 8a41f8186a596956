"""Keep glibc from holding on to the memory of one large, short-lived buffer.

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
