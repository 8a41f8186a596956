"""Outside queries a freed large buffer leaves nothing resident; while queries run, large buffers
are reused from glibc's heap without page faults, and go back when given back."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
from helpers import eventually, holds

from collector.memory import malloc

# Run in a child: the test process' own allocator state is not ours to change.
_OUTSIDE = """
import sys
from collector.memory.malloc import pin_thresholds

def rss_kib():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))

pinned = pin_thresholds() if sys.argv[1] == "pin" else False
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
        [sys.executable, "-c", _OUTSIDE, mode], capture_output=True, text=True, check=True
    ).stdout.split()
    return out[0], int(out[1])


@pytest.mark.skipif(sys.platform != "linux", reason="glibc is a Linux libc")
def test_outside_queries_a_buffer_freed_after_a_large_one_is_given_back() -> None:
    pinned, kept = _after_free("pin")
    if pinned != "True":
        pytest.skip("no glibc here")
    assert kept < 512, f"{kept} KiB of a freed 2 MiB buffer stayed resident"
    _, unpinned = _after_free("default")
    assert unpinned >= 1024, "glibc's own threshold moved up: this test shows nothing"


_QUERIES = """
import resource, sys
from collector.memory import malloc

def rss_kib():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))

def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

malloc.set_policy()
if sys.argv[1] == "queries":
    malloc.for_queries()
size = 64 << 20  # a query's series x steps matrix at cluster scale
first = bytearray(size)  # zero-filled: every page touched
del first
malloc.queries_done()
malloc.for_queries()  # the next query
before = faults()
second = bytearray(size)
faulted = faults() - before
del second
malloc.queries_done()
held = rss_kib()
given = malloc.give_back()
print(given, faulted, size // 4096, held - rss_kib())
"""


def _queries(mode: str) -> tuple[str, int, int, int]:
    out = subprocess.run(
        [sys.executable, "-c", _QUERIES, mode], capture_output=True, text=True, check=True
    ).stdout.split()
    return out[0], int(out[1]), int(out[2]), int(out[3])


@pytest.mark.skipif(sys.platform != "linux", reason="glibc is a Linux libc")
def test_a_query_reuses_the_last_one_s_pages_which_go_back_once_given_back() -> None:
    given, faulted, pages, freed = _queries("queries")
    if given != "True":
        pytest.skip("no glibc here")
    assert faulted < pages // 10, f"{faulted} of {pages} pages faulted in again"
    assert freed >= 48 << 10, f"giving back freed {freed} KiB of a freed 64 MiB"
    _, unheld, _, _ = _queries("outside")
    assert unheld >= pages // 2, "pages reused outside queries: this test shows nothing"


async def test_memory_goes_back_only_once_queries_are_quiet(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The policy follows the queries: held while one runs, given back only after ``after``
    seconds without one, and held again for the next."""
    calls: list[str] = []
    monkeypatch.setattr(malloc, "for_queries", lambda: calls.append("queries"))
    monkeypatch.setattr(malloc, "queries_done", lambda: calls.append("done"))

    def give_back() -> bool:
        calls.append("back")
        return True

    monkeypatch.setattr(malloc, "give_back", give_back)
    busy, idle = asyncio.Event(), asyncio.Event()
    idle.set()
    task = asyncio.create_task(malloc.follow_queries(busy, idle, after=0.05))

    def query() -> None:
        busy.set()
        idle.clear()

    def done() -> None:
        busy.clear()
        idle.set()

    try:
        query()
        await eventually(lambda: holds(calls == ["queries"]), 5, "held while a query runs")
        done()
        await eventually(lambda: holds(calls[:2] == ["queries", "done"]), 5, "the query ended")
        await eventually(lambda: holds(calls == ["queries", "done", "back"]), 5, "given back")
        query()
        done()  # shorter than a loop turn: the policy still sees it
        await eventually(lambda: holds(calls[3:] == ["queries", "done"]), 5, "the next query")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_numpy_is_told_to_use_small_pages() -> None:
    child = (
        "from numpy._core import multiarray\n"
        "from collector.memory.malloc import small_pages\n"
        "before = multiarray._get_madvise_hugepage()\n"
        "print(small_pages(), before, multiarray._get_madvise_hugepage())"
    )
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True)
    done, _, after = out.stdout.split()
    assert done == "True"
    assert after == "False", "numpy still advises huge pages"
