"""A freed large buffer must not leave later buffers on glibc's heap, where RSS stays."""

from __future__ import annotations

import subprocess
import sys

import pytest

# Run in a child: the test process' own allocator state is not ours to change.
_CHILD = """
import sys
from core.malloc import pin_mmap_threshold

def rss_kib():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))

pinned = pin_mmap_threshold() if sys.argv[1] == "pin" else False
big = bytearray(4 << 20)  # an oversized scrape body, gone at once
big[-1] = 1
del big
before = rss_kib()
buffer = bytearray(2 << 20)  # a later, smaller one: a page render, a push
buffer[::4096] = b"x" * len(buffer[::4096])
del buffer
print(pinned, rss_kib() - before)
"""


def _after_free(mode: str) -> tuple[str, int]:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, mode], capture_output=True, text=True, check=True
    ).stdout.split()
    return out[0], int(out[1])


@pytest.mark.skipif(sys.platform != "linux", reason="glibc is a Linux libc")
def test_a_buffer_freed_after_a_large_one_is_given_back_once_pinned() -> None:
    pinned, kept = _after_free("pin")
    if pinned != "True":
        pytest.skip("no glibc here")
    assert kept < 512, f"{kept} KiB of a freed 2 MiB buffer stayed resident"
    _, unpinned = _after_free("default")
    assert unpinned >= 1024, "glibc's own threshold moved up: this test shows nothing"


def test_numpy_is_told_to_use_small_pages() -> None:
    child = (
        "from numpy._core import multiarray\n"
        "from core.malloc import small_pages\n"
        "before = multiarray._get_madvise_hugepage()\n"
        "print(small_pages(), before, multiarray._get_madvise_hugepage())"
    )
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True)
    done, _, after = out.stdout.split()
    assert done == "True"
    assert after == "False", "numpy still advises huge pages"
