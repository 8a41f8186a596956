"""A writer of HAMi-core shared region files, for tests and the demo.

The agent itself never writes a region (see :mod:`agent.hamicore`). This module
exists so that the reader can be tested against files laid out as HAMi-core
lays them out (docs/agent.md), and so that the demo
can show containers without a GPU. Its offsets are the reader's own
(:mod:`agent.region_layout`), which is why the tests check the bytes it writes
against the reference's literal numbers rather than against the reader.

All integers are little-endian, packed with explicit ``struct`` formats at
explicit offsets into a zeroed buffer of the layout's total size plus one byte
(HAMi-core makes the file ``sizeof(shared_region_t) + 1`` bytes long).

The "known bad" files (pre-v0, HAMi v2.8.1's intermediate v1.1, no magic,
truncated, unknown version) are produced by :func:`bad_file`. Their sizes are
exact; their contents are only plausible (magic and version where the layout
had them), because the reader refuses them by size before looking inside.
"""

from __future__ import annotations

import contextlib
import dataclasses
import mmap
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from agent.region_layout import (
    I32,
    MAGIC,
    MAX_DEVICES,
    MAX_PROCS,
    MEM,
    OFFSETS,
    PRE_V0_TOTAL,
    U32,
    U64,
    UTIL,
    UUID_LEN,
    V0,
    V1,
    V281_TOTAL,
    VERSIONS,
    Offsets,
    layout_for_size,
    v1_name,
)
from agent.region_layout import LayoutName as Layout

__all__ = [
    "MAX_PROCS",
    "V0",
    "V1",
    "BadKind",
    "Layout",
    "MemTuple",
    "ProcSlot",
    "RegionSpec",
    "RegionUpdater",
    "UtilTuple",
    "bad_file",
    "open_for_update",
    "pack",
    "write_bytes_atomic",
    "write_region",
]

BadKind = Literal["pre_v0", "v281", "no_magic", "truncated", "unknown_version"]

MemTuple = tuple[int, int, int, int, int]
UtilTuple = tuple[int, int, int]


@dataclass(slots=True)
class ProcSlot:
    """One process slot. ``used``/``device_util``/``monitorused`` are per device, index = vdevice."""

    pid: int
    hostpid: int = 0
    used: Sequence[MemTuple] = ()
    """(context, module, data, offset, total) bytes per device."""
    device_util: Sequence[UtilTuple] = ()
    """(dec_util, enc_util, sm_util) per device."""
    monitorused: Sequence[int] = ()
    status: int = 1
    """1 running, 2 swapped, 0 exited."""
    seqlock: int = 0


@dataclass(slots=True)
class RegionSpec:
    """Everything a region file holds that a test may want to set."""

    layout: Layout = "v1.2"
    uuids: Sequence[str] = ()
    limits: Sequence[int] = ()
    sm_limits: Sequence[int] = ()
    procs: Sequence[ProcSlot] = ()
    """Written to slots 0, 1, ... in order."""
    proc_num: int | None = None
    """Defaults to ``len(procs)``; set it to test clamping (negative, > 1024)."""
    device_num: int | None = None
    """Defaults to ``len(uuids)``."""
    last_kernel_time: int = 0
    utilization_switch: int = 0
    recent_kernel: int = 0
    priority: int = 0
    owner_pid: int = 0
    sm_init_flag: int = 0
    magic: int = MAGIC
    version: tuple[int, int] | None = None
    """(major, minor) for v1 layouts; defaults to the layout's own."""
    extra: dict[int, bytes] = field(default_factory=dict)
    """Raw bytes to place at absolute offsets after everything else (for odd cases)."""


def _put_uuids(buf: bytearray, at: int, uuids: Sequence[str]) -> None:
    """Write each uuid into its 96-byte field from ``at`` on (NUL-padded by the zeroed buffer)."""
    for i, uuid in enumerate(uuids):
        raw = uuid.encode("ascii")
        if len(raw) > UUID_LEN:
            raise ValueError(f"uuid longer than {UUID_LEN} bytes: {uuid!r}")
        buf[at + i * UUID_LEN : at + i * UUID_LEN + len(raw)] = raw


def _put_version(buf: bytearray, off: Offsets, version: tuple[int, int] | None) -> None:
    if off.major is not None and off.minor is not None and version is not None:
        U32.pack_into(buf, off.major, version[0])
        U32.pack_into(buf, off.minor, version[1])


def _pack_slot(buf: bytearray | mmap.mmap, base: int, off: Offsets, slot: ProcSlot) -> None:
    if len(slot.used) > MAX_DEVICES or len(slot.device_util) > MAX_DEVICES:
        raise ValueError("more than 16 devices in a slot")
    I32.pack_into(buf, base + off.slot_pid, slot.pid)
    I32.pack_into(buf, base + off.slot_hostpid, slot.hostpid)
    for i, mem in enumerate(slot.used):
        MEM.pack_into(buf, base + off.slot_used + i * off.mem_size, *mem)
    for i, value in enumerate(slot.monitorused):
        U64.pack_into(buf, base + off.slot_monitorused + 8 * i, value)
    for i, util in enumerate(slot.device_util):
        UTIL.pack_into(buf, base + off.slot_util + i * off.util_size, *util)
    I32.pack_into(buf, base + off.slot_status, slot.status)
    if off.slot_seqlock is not None:
        U64.pack_into(buf, base + off.slot_seqlock, slot.seqlock)


def pack(spec: RegionSpec) -> bytes:
    """The file bytes of ``spec``: the layout's total size plus HAMi-core's one extra byte."""
    off = OFFSETS[spec.layout]
    if len(spec.uuids) > MAX_DEVICES or len(spec.procs) > MAX_PROCS:
        raise ValueError("more than 16 devices or 1024 processes")
    buf = bytearray(off.total + 1)
    I32.pack_into(buf, off.magic, spec.magic)
    _put_version(buf, off, spec.version or VERSIONS[spec.layout])
    I32.pack_into(buf, off.sm_init_flag, spec.sm_init_flag)
    U64.pack_into(buf, off.owner_pid, spec.owner_pid)
    device_num = len(spec.uuids) if spec.device_num is None else spec.device_num
    U64.pack_into(buf, off.device_num, device_num)
    _put_uuids(buf, off.uuids, spec.uuids)
    for i, limit in enumerate(spec.limits):
        U64.pack_into(buf, off.limit + 8 * i, limit)
    for i, sm_limit in enumerate(spec.sm_limits):
        U64.pack_into(buf, off.sm_limit + 8 * i, sm_limit)
    for s, slot in enumerate(spec.procs):
        _pack_slot(buf, off.procs + s * off.slot_size, off, slot)
    proc_num = len(spec.procs) if spec.proc_num is None else spec.proc_num
    I32.pack_into(buf, off.proc_num, proc_num)
    I32.pack_into(buf, off.utilization_switch, spec.utilization_switch)
    I32.pack_into(buf, off.recent_kernel, spec.recent_kernel)
    I32.pack_into(buf, off.priority, spec.priority)
    if off.last_kernel_time is not None:
        U64.pack_into(buf, off.last_kernel_time, spec.last_kernel_time)
    for at, raw in spec.extra.items():
        buf[at : at + len(raw)] = raw
    return bytes(buf)


def bad_file(kind: BadKind, spec: RegionSpec | None = None, *, size: int | None = None) -> bytes:
    """Bytes of a region file the reader must refuse.

    - ``pre_v0``: 804,681 bytes, magic set (the 2023 layout without device_util).
    - ``v281``: HAMi v2.8.1's intermediate v1.1, 2,008,985 bytes (struct 2,008,984 + 1),
      magic and version 1.1 set; the inside is only an approximation (the uuids start
      32 bytes late, as when ``sem_postinit`` sits after ``sem``), enough to show that a
      v1 reader would misread it. Only its size identifies it.
    - ``no_magic``: ``spec`` packed with ``initialized_flag`` 0.
    - ``truncated``: ``spec`` packed and cut to ``size`` bytes (default: half).
    - ``unknown_version``: ``spec`` packed as v1 with version 2.0.
    """
    spec = spec or RegionSpec(uuids=["GPU-bad"], limits=[1 << 30])
    if kind == "pre_v0":
        buf = bytearray(PRE_V0_TOTAL + 1)
        I32.pack_into(buf, V0.magic, MAGIC)
        U64.pack_into(buf, V0.device_num, len(spec.uuids))
        _put_uuids(buf, V0.uuids, spec.uuids)
        return bytes(buf)
    if kind == "v281":
        buf = bytearray(V281_TOTAL + 1)
        I32.pack_into(buf, V1.magic, MAGIC)
        _put_version(buf, V1, (1, 1))
        shifted = 32  # sem_postinit (32 B) sits after sem, pushing device_num and uuids down
        U64.pack_into(buf, V1.device_num + shifted, len(spec.uuids))
        _put_uuids(buf, V1.uuids + shifted, spec.uuids)
        return bytes(buf)
    if kind == "no_magic":
        return pack(dataclasses.replace(spec, magic=0))
    if kind == "truncated":
        data = pack(spec)
        return data[: len(data) // 2 if size is None else size]
    if kind == "unknown_version":
        layout: Layout = "v1.2" if spec.layout == "v0" else spec.layout
        return pack(dataclasses.replace(spec, layout=layout, version=(2, 0)))
    raise ValueError(f"unknown bad file kind {kind!r}")


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename.

    A reader never sees a half-written file. The temporary name does not end in
    ``.cache``, so a concurrent scan does not pick it up.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def write_region(path: Path, spec: RegionSpec) -> None:
    """Write ``spec`` to ``path`` atomically (temporary file + rename)."""
    write_bytes_atomic(path, pack(spec))


class RegionUpdater:
    """A writable mapping of a region file, updating fields in place like HAMi-core does.

    For v1.2 every slot update follows the seqlock protocol: the slot's
    ``seqlock`` goes to odd, the fields are written one ``struct`` call at a time
    (so a concurrent reader can see a half-written slot), then it goes to even.
    ``pause`` is called between field writes to widen that window in tests.
    """

    def __init__(self, mm: mmap.mmap, layout: Layout) -> None:
        self._mm = mm
        self.layout: Layout = layout
        self.offsets = OFFSETS[layout]

    def _slot_base(self, index: int) -> int:
        if not 0 <= index < MAX_PROCS:
            raise IndexError(index)
        return self.offsets.procs + index * self.offsets.slot_size

    def seqlock_value(self, index: int) -> int:
        """The slot's current seqlock value (0 for layouts without one)."""
        if self.offsets.slot_seqlock is None:
            return 0
        value: int = U64.unpack_from(self._mm, self._slot_base(index) + self.offsets.slot_seqlock)[
            0
        ]
        return value

    def set_seqlock(self, index: int, value: int) -> None:
        """Force the slot's seqlock (e.g. odd forever, as a writer that died mid-update leaves it)."""
        if self.offsets.slot_seqlock is None:
            raise ValueError(f"layout {self.layout} has no seqlock")
        U64.pack_into(self._mm, self._slot_base(index) + self.offsets.slot_seqlock, value)

    @contextlib.contextmanager
    def locked(self, index: int) -> Iterator[None]:
        """Hold the slot's seqlock odd for the duration (no-op before v1.2)."""
        if self.layout != "v1.2":
            yield
            return
        seq = self.seqlock_value(index)
        if seq % 2:
            raise RuntimeError(f"slot {index} seqlock already odd ({seq})")
        self.set_seqlock(index, seq + 1)
        try:
            yield
        finally:
            self.set_seqlock(index, seq + 2)

    def update_slot(
        self,
        index: int,
        *,
        pid: int | None = None,
        used: Sequence[MemTuple] | None = None,
        device_util: Sequence[UtilTuple] | None = None,
        status: int | None = None,
        pause: Callable[[], None] | None = None,
        lock: bool = True,
    ) -> None:
        """Write the given fields of slot ``index`` under its seqlock, one field at a time.

        ``lock=False`` writes without touching the seqlock (inside :meth:`locked`,
        or to play a writer that ignores the protocol).
        """
        off = self.offsets
        base = self._slot_base(index)
        step = pause or (lambda: None)
        with self.locked(index) if lock else contextlib.nullcontext():
            if pid is not None:
                I32.pack_into(self._mm, base + off.slot_pid, pid)
                step()
            for i, mem in enumerate(used or ()):
                for k, value in enumerate(mem):
                    U64.pack_into(self._mm, base + off.slot_used + i * off.mem_size + 8 * k, value)
                    step()
            for i, util in enumerate(device_util or ()):
                for k, value in enumerate(util):
                    U64.pack_into(self._mm, base + off.slot_util + i * off.util_size + 8 * k, value)
                    step()
            if status is not None:
                I32.pack_into(self._mm, base + off.slot_status, status)

    def set_proc_num(self, value: int) -> None:
        I32.pack_into(self._mm, self.offsets.proc_num, value)

    def set_last_kernel_time(self, value: int) -> None:
        if self.offsets.last_kernel_time is None:
            raise ValueError("v0 has no last_kernel_time")
        U64.pack_into(self._mm, self.offsets.last_kernel_time, value)


def _layout_of(mm: mmap.mmap) -> Layout:
    off = layout_for_size(len(mm))
    if off is None:
        raise ValueError("file too short for any known layout")
    if off.minor is None:
        return "v0"
    minor: int = U32.unpack_from(mm, off.minor)[0]
    return v1_name(minor)


@contextlib.contextmanager
def open_for_update(path: Path, layout: Layout | None = None) -> Iterator[RegionUpdater]:
    """Map ``path`` writable (MAP_SHARED) and yield a :class:`RegionUpdater` for it.

    The layout is taken from the file size (and the minor version for v1) unless given.
    """
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        mm = mmap.mmap(fd, 0, access=mmap.ACCESS_WRITE)
    finally:
        os.close(fd)
    try:
        yield RegionUpdater(mm, layout or _layout_of(mm))
    finally:
        mm.close()
