"""Read HAMi-core shared region files, read-only, and aggregate them per vGPU.

HAMi-core (``libvgpu.so`` in every vGPU container) keeps each container's
accounting in a memory-mapped file, the *shared region*. This module is the
agent's reader of one such file (byte layouts: :mod:`agent.region_layout`; finding
the files: :mod:`agent.region_scan`; a writer for tests lives in :mod:`simulator.regions`).

Never a byte written
    Files are opened ``O_RDONLY`` and read with ``os.pread``; nothing is mapped at
    all, so nothing can be written back. (Upstream's monitor writes
    ``utilization_switch``/``recent_kernel`` for its priority feature; a read-only
    agent must not.) ``O_NONBLOCK`` keeps a FIFO named ``*.cache`` from hanging
    the agent, and anything that is not a regular file is refused.

Why ``pread`` and not ``mmap`` (SIGBUS)
    A region can be truncated or replaced while we read it (container restart,
    pod cleanup). Touching a mapped page that now lies past the end of the file
    raises SIGBUS, which in CPython kills the whole agent: the fault happens inside
    a C ``memcpy``, where no Python handler can run. Checking the size with
    ``fstat`` after mapping does not help (the file can shrink a microsecond
    later). ``pread`` instead returns a short read, which we detect and report
    as reason ``changed``. A file replaced by rename is harmless either way: our
    descriptor keeps the old inode. The cost is one copy of the bytes we need,
    and we only need the header, the tail and the slots below ``proc_num``
    (a few preads of tens of kilobytes, not the 2 MB region).

Layout by size
    Sizes that match a known-bad layout exactly (pre-v0: 804,680/804,681 bytes;
    HAMi v2.8.1's intermediate v1.1: 2,008,984/2,008,985 bytes, struct and file
    size) are refused first, whatever their contents. Then: no magic ->
    ``no_magic``; shorter than the v0 struct -> ``too_short``; at least v0 and
    below v1 -> v0; at least v1 -> v1, whose version must be 1.1 or 1.2
    (``unknown_version`` otherwise).

Aggregation (as upstream, less the slots whose process is gone)
    Over slots ``0 <= s < clamp(proc_num, 0, 1024)`` with ``status != 0``, per
    device ``i < clamp(device_num, 0, 16)``: memory used = sum of
    ``used[i].total``; context / module / buffer = sums of context_size /
    module_size / data_size; SM = sum of ``device_util[i].sm_util``; limit =
    ``limit[i]``. ``last_kernel_time`` is reported only when > 0 (v1 only).

Slots whose process is gone
    HAMi-core clears a slot only when its process exits normally; a SIGKILLed
    or OOM-killed process leaves ``status = 1`` and all its counters until
    another CUDA process of the container compacts the region, which may never
    happen (HAMi#2310). Upstream's monitor counts such a slot. Given a
    :data:`SlotJudge` (:mod:`agent.slots`, which asks the host's ``/proc``),
    the reader shows it each slot upstream would count and leaves out those
    judged ``gone``: their memory goes to ``stale_memory`` instead, their SM
    utilisation nowhere. Without a judge every such slot counts, as upstream
    counts it, and is counted as ``unchecked``.

Devices whose uuid is empty are skipped
    HAMi-core fills ``uuids[i]`` for every device it exposes when it initialises
    the region; an empty one is a device that was never set up. It cannot be tied
    to a card, and the push payload requires a uuid, so it is left out (its index
    is kept for the others: ``index`` is always the position in the region). A
    uuid that is not printable ASCII means the bytes are not what we think they
    are (e.g. a truncated v1 file read as v0), and the region is refused as
    ``bad_uuid`` rather than reported with garbage. (Size alone cannot tell a v1
    file cut into the v0 size range from a v0 file; read as v0, its uuids start
    with v1's ``device_num`` bytes, which this check refuses, or its v0
    ``device_num`` reads as 0: no device is ever reported from it.)

Consistency (v1.2 seqlock)
    Each slot of a v1.2 region carries a seqlock: odd while a writer updates it.
    We read the slots below ``proc_num`` three times in a row (one ``pread`` each): the first
    copy gives each slot's sequence *before*, the second is the data, the third
    gives the sequence *after*. A slot whose two sequences differ or are odd is
    re-read on its own (sequence, slot, sequence) up to :data:`MAX_TRIES` times,
    then the region is refused as ``changed``. v0 and v1.1 have no lock and are
    copied once, as upstream does. Header fields (uuids, limits) are written at
    initialisation and read once.
"""

from __future__ import annotations

import os
import stat
import struct
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any, Final, Literal

from agent.region_layout import (
    I32,
    MAGIC,
    MAX_DEVICES,
    MAX_PROCS,
    PRE_V0_SIZES,
    READ_STRUCTS,
    SEQ_STRUCT,
    SLOT_SUMMED,
    U64,
    V0_SIZE,
    V281_SIZES,
    LayoutName,
    Offsets,
    ReadStructs,
    layout_for_size,
    v1_name,
)

MAX_TRIES: Final = 100
"""Attempts at a consistent copy of one v1.2 slot before giving up on the region."""

Reason = Literal[
    "no_magic",
    "too_short",
    "pre_v0",
    "v281_layout",
    "unknown_version",
    "bad_uuid",
    "changed",
    "vanished",
    "unreadable",
    "bad_folder",
]


Verdict = Literal["live", "gone", "unchecked"]
"""A slot's process: still there, gone, or not checked (then it counts, as upstream counts it)."""


@dataclass(frozen=True, slots=True)
class Slot:
    """A slot upstream's monitor counts (below ``proc_num``, ``status != 0``), as a judge sees it."""

    index: int
    pid: int
    """The process's PID in its container's PID namespace (HAMi-core's ``getpid()``)."""
    hostpid: int
    """Its host PID as HAMi-core detected it at start; 0 when detection failed."""


SlotJudge = Callable[[Sequence[Slot]], Sequence[Verdict]]
"""Decides, for one region's slots at once, whether each slot's process is gone."""


class RegionError(Exception):
    """A region (file or folder) that could not be read; ``reason`` is short and fixed."""

    def __init__(self, reason: Reason, path: Path | str, detail: str) -> None:
        super().__init__(f"{path}: {detail} [{reason}]")
        self.reason: Reason = reason
        self.path = Path(path)
        self.detail = detail


@dataclass(frozen=True, slots=True)
class DeviceUsage:
    """One vGPU of a region; fields map 1:1 onto :class:`core.payload.Device`."""

    index: int
    uuid: str
    memory_used: int
    memory_limit: int
    context: int
    module: int
    buffer: int
    sm_utilization: float
    stale_memory: int | None = None
    """Bytes the slots judged gone still hold, left out of ``memory_used``; None unjudged."""


@dataclass(frozen=True, slots=True)
class RegionUsage:
    """One region file, aggregated over its live processes."""

    path: Path
    layout: LayoutName
    devices: tuple[DeviceUsage, ...]
    last_kernel_time: int | None
    processes: int
    """Slots counted: status != 0, below proc_num, not judged gone."""
    stale: int = 0
    """Slots with status != 0 whose process the judge found gone (upstream would count them)."""
    unchecked: int = 0
    """Slots counted without a check: no judge, or one that could not tell."""
    retries: int = 0
    """Slot re-reads the v1.2 seqlock needed (contention indicator for self-metrics)."""


@dataclass(frozen=True, slots=True)
class _Header:
    """What the reader takes from the header, read once (written at initialisation)."""

    layout: LayoutName
    devices: int
    """``device_num`` clamped to 16."""
    uuids: Sequence[bytes]
    limits: Sequence[int]


def _pread(fd: int, path: Path, size: int, offset: int) -> bytes:
    """Exactly ``size`` bytes at ``offset``; a short read means the file shrank under us."""
    data = os.pread(fd, size, offset)
    if len(data) != size:
        raise RegionError(
            "changed", path, f"file shrank while reading ({len(data)} of {size} bytes at {offset})"
        )
    return data


def read_region(path: Path | str, judge: SlotJudge | None = None) -> RegionUsage:
    """Read and aggregate one region file; raise :class:`RegionError` if it cannot be trusted.

    ``judge`` decides which slots' processes are gone (see the module docstring);
    it only reads, as does everything here.
    """
    path = Path(path)
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
    try:
        fd = os.open(path, flags)
    except FileNotFoundError as exc:
        raise RegionError("vanished", path, "file disappeared") from exc
    except OSError as exc:
        raise RegionError("unreadable", path, f"cannot open: {exc.strerror or exc}") from exc
    try:
        return _read_fd(fd, path, judge)
    except OSError as exc:
        raise RegionError("unreadable", path, f"read failed: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)


def _read_fd(fd: int, path: Path, judge: SlotJudge | None) -> RegionUsage:
    off = _layout_of(fd, path)
    structs = READ_STRUCTS[off]
    header = _header(fd, path, off, structs)
    tail = structs.tail.unpack(_pread(fd, path, structs.tail.size, off.proc_num))
    proc_num = min(max(tail[0], 0), MAX_PROCS)
    n = header.devices
    rows, retries = _slot_rows(fd, path, off, header.layout, structs.slots[n], proc_num)
    status = SLOT_SUMMED + 5 * n  # status follows pid, hostpid and the 5n summed fields
    counted = [(s, row) for s, row in enumerate(rows) if row[status] != 0]
    slots = [Slot(s, row[0], row[1]) for s, row in counted]
    verdicts: Sequence[Verdict] = ["unchecked"] * len(slots) if judge is None else judge(slots)
    live = [row for (_, row), v in zip(counted, verdicts, strict=True) if v != "gone"]
    gone = [row for (_, row), v in zip(counted, verdicts, strict=True) if v == "gone"]
    return RegionUsage(
        path=path,
        layout=header.layout,
        devices=_devices(path, header, live, None if judge is None else gone),
        last_kernel_time=tail[1] if len(tail) > 1 and tail[1] > 0 else None,
        processes=len(live),
        stale=len(gone),
        unchecked=sum(1 for v in verdicts if v == "unchecked"),
        retries=retries,
    )


def _layout_of(fd: int, path: Path) -> Offsets:
    """The layout table by file size, after the refusals that size alone decides."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise RegionError("unreadable", path, "not a regular file")
    size = st.st_size
    if size in PRE_V0_SIZES:
        raise RegionError("pre_v0", path, f"pre-v0 HAMi-core region ({size} bytes), not supported")
    if size in V281_SIZES:
        raise RegionError(
            "v281_layout",
            path,
            f"HAMi v2.8.1 intermediate v1.1 layout ({size} bytes), not supported; upgrade HAMi-core",
        )
    if size < I32.size:
        raise RegionError("too_short", path, f"{size} bytes, no region yet")
    off = layout_for_size(size)
    if off is None:
        (magic,) = I32.unpack(_pread(fd, path, I32.size, 0))  # magic comes first in every layout
        if magic != MAGIC:
            raise RegionError("no_magic", path, f"not an initialised region (flag {magic})")
        raise RegionError("too_short", path, f"{size} bytes, shorter than any layout ({V0_SIZE})")
    return off


def _header(fd: int, path: Path, off: Offsets, structs: ReadStructs) -> _Header:
    header: tuple[Any, ...] = structs.header.unpack(_pread(fd, path, off.procs, 0))
    if header[0] != MAGIC:
        raise RegionError("no_magic", path, f"not an initialised region (flag {header[0]})")
    # struct fields are in offset order: magic[, major, minor], device_num, uuids, limits
    layout: LayoutName = "v0"
    pos = 2
    device_num = header[1]
    if off.major is not None:
        major, minor, device_num = header[1], header[2], header[3]
        pos = 4
        if major != 1 or minor not in (1, 2):
            raise RegionError(
                "unknown_version", path, f"region version {major}.{minor}, want 1.1 or 1.2"
            )
        layout = v1_name(minor)
    return _Header(
        layout=layout,
        devices=min(device_num, MAX_DEVICES),
        uuids=header[pos : pos + MAX_DEVICES],
        limits=header[pos + MAX_DEVICES : pos + 2 * MAX_DEVICES],
    )


def _slot_rows(
    fd: int,
    path: Path,
    off: Offsets,
    layout: LayoutName,
    slot_struct: struct.Struct,
    proc_num: int,
) -> tuple[list[tuple[int, ...]], int]:
    """The unpacked slots below ``proc_num`` and the re-reads the seqlock needed."""
    slots = _pread(fd, path, proc_num * off.slot_size, off.procs)
    if layout == "v1.2":
        return _read_slots_locked(fd, path, off, slot_struct, slots, proc_num)
    return list(slot_struct.iter_unpack(slots)), 0


def _sums(rows: Sequence[tuple[int, ...]], n: int) -> list[int]:
    """The column sums of the 5n summed fields of ``rows`` (4n memory fields, then n SM)."""
    if not rows:
        return [0] * (5 * n)
    return [sum(col) for col in islice(zip(*rows, strict=True), SLOT_SUMMED, SLOT_SUMMED + 5 * n)]


def _devices(
    path: Path,
    header: _Header,
    live: Sequence[tuple[int, ...]],
    gone: Sequence[tuple[int, ...]] | None,
) -> tuple[DeviceUsage, ...]:
    """Per device, the sums over the live slots (and the memory of the gone ones, if judged);
    devices with an empty uuid are left out."""
    n = header.devices
    sums = _sums(live, n)
    stale = None if gone is None else _sums(gone, n)
    devices: list[DeviceUsage] = []
    for i in range(n):
        uuid = _uuid(path, i, header.uuids[i])
        if not uuid:
            continue
        devices.append(
            DeviceUsage(
                index=i,
                uuid=uuid,
                memory_used=sums[4 * i + 3],
                memory_limit=header.limits[i],
                context=sums[4 * i],
                module=sums[4 * i + 1],
                buffer=sums[4 * i + 2],
                sm_utilization=float(sums[4 * n + i]),
                stale_memory=None if stale is None else stale[4 * i + 3],
            )
        )
    return tuple(devices)


def _uuid(path: Path, index: int, raw: bytes) -> str:
    text = raw.split(b"\0", 1)[0]
    uuid = text.decode("ascii", errors="replace")
    if not text.isascii() or not uuid.isprintable():
        raise RegionError(
            "bad_uuid", path, f"uuid of device {index} is not printable text: {text[:40]!r}"
        )
    return uuid


def _read_slots_locked(
    fd: int,
    path: Path,
    off: Offsets,
    slot_struct: struct.Struct,
    before: bytes,
    proc_num: int,
) -> tuple[list[tuple[int, ...]], int]:
    """Consistent copies of slots ``0..proc_num-1`` under their v1.2 seqlocks.

    ``before`` was read (in full) before the data copy; a third read after it
    gives the sequences after. Slots that were odd or moved are re-read singly.
    """
    assert off.slot_seqlock is not None
    slots_len = proc_num * off.slot_size
    data = _pread(fd, path, slots_len, off.procs)
    after = _pread(fd, path, slots_len, off.procs)
    rows = list(slot_struct.iter_unpack(data))
    retries = 0
    seq_pairs: Iterator[tuple[tuple[int, ...], tuple[int, ...]]] = zip(
        SEQ_STRUCT.iter_unpack(before), SEQ_STRUCT.iter_unpack(after), strict=True
    )
    for s, (seq_before, seq_after) in enumerate(seq_pairs):
        if seq_before[0] % 2 == 0 and seq_before == seq_after:
            continue
        rows[s], tries = _read_slot_locked(fd, path, off, slot_struct, s)
        retries += tries
    return rows, retries


def _read_slot_locked(
    fd: int, path: Path, off: Offsets, slot_struct: struct.Struct, s: int
) -> tuple[tuple[int, ...], int]:
    assert off.slot_seqlock is not None
    base = off.procs + s * off.slot_size
    seq_at = base + off.slot_seqlock
    for attempt in range(1, MAX_TRIES):
        (seq1,) = U64.unpack(_pread(fd, path, U64.size, seq_at))
        if seq1 % 2 == 0:
            raw = _pread(fd, path, off.slot_size, base)
            (seq2,) = U64.unpack(_pread(fd, path, U64.size, seq_at))
            if seq1 == seq2:
                return slot_struct.unpack(raw), attempt
        # A writer holds the slot for microseconds; yield first, then back off a little.
        time.sleep(0 if attempt < 10 else 1e-4)
    raise RegionError(
        "changed", path, f"slot {s} kept changing (seqlock odd or moving) over {MAX_TRIES} reads"
    )
