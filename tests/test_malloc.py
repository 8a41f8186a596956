"""Large buffers are reused from glibc's heap without page faults, and go back when trimmed."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
from helpers import eventually, holds

from core import malloc

# Run in a child: the test process' own allocator state is not ours to change.
_CHILD = """
import resource, sys
from core.malloc import pin_thresholds, trim

def rss_kib():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))

def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

pinned = pin_thresholds() if sys.argv[1] == "pin" else False
size = 64 << 20  # a query's series x steps matrix at cluster scale
first = bytearray(size)  # zero-filled: every page touched
del first
before = faults()
second = bytearray(size)  # the next query's
faulted = faults() - before
del second
held = rss_kib()
trimmed = trim()
print(pinned, faulted, size // 4096, held - rss_kib(), trimmed)
"""


def _child(mode: str) -> tuple[str, int, int, int]:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, mode], capture_output=True, text=True, check=True
    ).stdout.split()
    return out[0], int(out[1]), int(out[2]), int(out[3])


@pytest.mark.skipif(sys.platform != "linux", reason="glibc is a Linux libc")
def test_a_large_buffer_reuses_a_freed_one_s_pages_which_a_trim_gives_back() -> None:
    pinned, faulted, pages, given_back = _child("pin")
    if pinned != "True":
        pytest.skip("no glibc here")
    assert faulted < pages // 10, f"{faulted} of {pages} pages faulted in again"
    assert given_back >= 48 << 10, f"the trim gave back {given_back} KiB of a freed 64 MiB"
    _, unpinned, _, _ = _child("default")
    assert unpinned >= pages // 2, "glibc reused the pages by itself: this test shows nothing"


async def test_memory_goes_back_only_once_queries_are_quiet(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trims: list[float] = []
    asked: list[float] = []
    quiet = [malloc.QUIET - 1]

    def quiet_for() -> float:
        asked.append(quiet[0])
        return quiet[0]

    def trim() -> bool:
        trims.append(quiet[0])
        return True

    monkeypatch.setattr(malloc, "trim", trim)
    task = asyncio.create_task(malloc.keep_trimmed(quiet_for, every=0.001))
    try:
        await eventually(lambda: holds(len(asked) >= 3), 5, "three ticks while queries came")
        assert trims == []
        quiet[0] = malloc.QUIET
        await eventually(lambda: holds(bool(trims)), 5, "a trim once they were quiet")
        assert trims[0] == malloc.QUIET
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


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
