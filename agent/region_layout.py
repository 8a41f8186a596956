"""The byte layout of HAMi-core's shared region: offsets, struct formats, layout by size.

Every offset is HAMi-core's C struct as compiled on x86-64 (docs/agent.md
describes the layouts), kept in one :class:`Offsets` per layout:
:data:`V0`, and :data:`V1` for both v1.1 and v1.2 (v1.2 only starts using the
slot seqlock). The reader (:mod:`agent.hamicore`) and the writer for tests
(:mod:`simulator.regions`) both take their offsets from here, so a number exists
once; the tests pin these tables to the reference's literal numbers, so a
mistake here fails a test instead of being mirrored by both sides.

All integers are little-endian. HAMi-core makes the file
``sizeof(shared_region_t) + 1`` bytes long, which is why the known sizes come
in pairs.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

MAGIC: Final = 19920718
"""``initialized_flag`` of an initialised region (0x012FF74E)."""
MAX_DEVICES: Final = 16
MAX_PROCS: Final = 1024
UUID_LEN: Final = 96

LayoutName = Literal["v0", "v1.1", "v1.2"]


@dataclass(frozen=True, slots=True)
class Offsets:
    """Byte offsets of one layout, straight from the reference tables."""

    # device_memory_t / device_util_t
    mem_size: int
    util_size: int
    # process slot
    slot_size: int
    slot_pid: int
    slot_hostpid: int
    slot_used: int
    slot_monitorused: int
    slot_util: int
    slot_status: int
    slot_seqlock: int | None
    # region
    magic: int
    major: int | None
    minor: int | None
    sm_init_flag: int
    owner_pid: int
    device_num: int
    uuids: int
    limit: int
    sm_limit: int
    procs: int
    """Where the slots start: everything before it is the header."""
    proc_num: int
    utilization_switch: int
    recent_kernel: int
    priority: int
    last_kernel_time: int | None
    total: int


V1: Final = Offsets(
    mem_size=64,
    util_size=48,
    slot_size=1960,
    slot_pid=0,
    slot_hostpid=4,
    slot_used=8,
    slot_monitorused=1032,
    slot_util=1160,
    slot_status=1928,
    slot_seqlock=1936,
    magic=0,
    major=4,
    minor=8,
    sm_init_flag=12,
    owner_pid=16,
    device_num=56,
    uuids=64,
    limit=1600,
    sm_limit=1728,
    procs=1856,
    proc_num=2008896,
    utilization_switch=2008900,
    recent_kernel=2008904,
    priority=2008908,
    last_kernel_time=2008912,
    total=2008952,
)

V0: Final = Offsets(
    mem_size=40,
    util_size=24,
    slot_size=1168,
    slot_pid=0,
    slot_hostpid=4,
    slot_used=8,
    slot_monitorused=648,
    slot_util=776,
    slot_status=1160,
    slot_seqlock=None,
    magic=0,
    major=None,
    minor=None,
    sm_init_flag=4,
    owner_pid=8,
    device_num=48,
    uuids=56,
    limit=1592,
    sm_limit=1720,
    procs=1848,
    proc_num=1197880,
    utilization_switch=1197884,
    recent_kernel=1197888,
    priority=1197892,
    last_kernel_time=None,
    total=1197896,
)

OFFSETS: Final[dict[LayoutName, Offsets]] = {"v0": V0, "v1.1": V1, "v1.2": V1}
VERSIONS: Final[dict[LayoutName, tuple[int, int] | None]] = {
    "v0": None,
    "v1.1": (1, 1),
    "v1.2": (1, 2),
}

V0_SIZE: Final = V0.total
V1_SIZE: Final = V1.total
PRE_V0_TOTAL: Final = 804_680
"""``sizeof(shared_region_t)`` of the pre-v0 layout (2023, no device_util)."""
V281_TOTAL: Final = 2_008_984
"""``sizeof(shared_region_t)`` of HAMi v2.8.1's intermediate v1.1."""
PRE_V0_SIZES: Final = frozenset({PRE_V0_TOTAL, PRE_V0_TOTAL + 1})
V281_SIZES: Final = frozenset({V281_TOTAL, V281_TOTAL + 1})

I32: Final = struct.Struct("<i")
U32: Final = struct.Struct("<I")
U64: Final = struct.Struct("<Q")
MEM: Final = struct.Struct("<QQQQQ")
"""The start of ``device_memory_t``: context_size, module_size, data_size, offset, total."""
MEM_CONTEXT: Final = 0
MEM_MODULE: Final = 8
MEM_DATA: Final = 16
MEM_TOTAL: Final = 32
UTIL: Final = struct.Struct("<QQQ")
"""The start of ``device_util_t``: dec_util, enc_util, sm_util."""
UTIL_SM: Final = 16


def layout_for_size(size: int) -> Offsets | None:
    """The table a file of ``size`` bytes is laid out by; None below the v0 struct."""
    if size >= V1_SIZE:
        return V1
    if size >= V0_SIZE:
        return V0
    return None


def v1_name(minor: int) -> LayoutName:
    """The v1 layout a minor version names (the seqlock came with minor 2)."""
    return "v1.2" if minor == 2 else "v1.1"


# --------------------------------------------------------------------------- reading structs


def _format(fields: Sequence[tuple[int, str]], size: int | None = None) -> str:
    """A little-endian struct format placing each (offset, code) exactly, padded to ``size``."""
    out = ["<"]
    pos = 0
    for offset, code in sorted(fields):
        if offset < pos:
            raise AssertionError(f"overlapping field at {offset}")
        if offset > pos:
            out.append(f"{offset - pos}x")
        out.append(code)
        pos = offset + struct.calcsize("<" + code)
    if size is None:
        return "".join(out)
    if pos > size:
        raise AssertionError("fields past the end")
    if size > pos:
        out.append(f"{size - pos}x")
    return "".join(out)


SLOT_SUMMED: Final = 2
"""Where a slot row's summed fields start: after pid and hostpid."""


def _slot_struct(off: Offsets, n: int) -> struct.Struct:
    """One slot -> (pid, hostpid, ctx0, mod0, data0, total0, ..., sm0..sm[n-1], status[, seqlock]).

    Only the fields the aggregation and the liveness check need, for the first
    ``n`` devices, so that ``iter_unpack`` over the slots does all the byte work in C.
    """
    fields: list[tuple[int, str]] = [(off.slot_pid, "i"), (off.slot_hostpid, "i")]
    for i in range(n):
        base = off.slot_used + i * off.mem_size
        fields += [(base + at, "Q") for at in (MEM_CONTEXT, MEM_MODULE, MEM_DATA, MEM_TOTAL)]
    fields += [(off.slot_util + i * off.util_size + UTIL_SM, "Q") for i in range(n)]
    fields.append((off.slot_status, "i"))
    if off.slot_seqlock is not None:
        fields.append((off.slot_seqlock, "Q"))
    return struct.Struct(_format(fields, off.slot_size))


def _header_struct(off: Offsets) -> struct.Struct:
    """magic[, major, minor], device_num, uuids[16], limit[16]."""
    fields: list[tuple[int, str]] = [(off.magic, "i"), (off.device_num, "Q")]
    if off.major is not None and off.minor is not None:
        fields += [(off.major, "I"), (off.minor, "I")]
    fields += [(off.uuids + UUID_LEN * i, f"{UUID_LEN}s") for i in range(MAX_DEVICES)]
    fields += [(off.limit + 8 * i, "Q") for i in range(MAX_DEVICES)]
    return struct.Struct(_format(fields, off.procs))


def _tail_struct(off: Offsets) -> struct.Struct:
    """proc_num[, last_kernel_time], starting at proc_num."""
    fields: list[tuple[int, str]] = [(0, "i")]
    if off.last_kernel_time is not None:
        fields.append((off.last_kernel_time - off.proc_num, "Q"))
    return struct.Struct(_format(fields))


@dataclass(frozen=True, slots=True)
class ReadStructs:
    """The structs the reader unpacks one layout with, built once from its offsets."""

    header: struct.Struct
    """The whole header, ``procs`` bytes: magic[, major, minor], device_num, uuids, limits."""
    tail: struct.Struct
    """proc_num[, last_kernel_time], read from ``proc_num`` on."""
    slots: tuple[struct.Struct, ...]
    """One slot's aggregated fields, indexed by the number of devices (0 to 16)."""


def _read_structs(off: Offsets) -> ReadStructs:
    return ReadStructs(
        header=_header_struct(off),
        tail=_tail_struct(off),
        slots=tuple(_slot_struct(off, n) for n in range(MAX_DEVICES + 1)),
    )


READ_STRUCTS: Final = {off: _read_structs(off) for off in (V0, V1)}
"""The reader's structs per layout table."""
SEQ_STRUCT: Final = struct.Struct(_format([(V1.slot_seqlock or 0, "Q")], V1.slot_size))
"""A v1 slot's seqlock alone, for ``iter_unpack`` over a run of slots."""
