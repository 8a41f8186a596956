"""Read HAMi-core shared region files, read-only, and aggregate them per vGPU.

HAMi-core (``libvgpu.so`` in every vGPU container) keeps each container's
accounting in a memory-mapped file, the *shared region*. This module is the
agent's reader of those files (byte layouts: ``reference/hamicore-shared-region.md``;
a writer for tests lives in :mod:`agent.packer`).

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

Aggregation (as upstream)
    Over slots ``0 <= s < clamp(proc_num, 0, 1024)`` with ``status != 0``, per
    device ``i < clamp(device_num, 0, 16)``: memory used = sum of
    ``used[i].total``; context / module / buffer = sums of context_size /
    module_size / data_size; SM = sum of ``device_util[i].sm_util``; limit =
    ``limit[i]``. ``last_kernel_time`` is reported only when > 0 (v1 only).

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

Where the files are (:func:`scan`)
    Each root is a base folder holding ``containers/`` and/or ``claims/``: pass
    ``/usr/local/vgpu`` for HAMi, KAI and HAMi-DRA, and ``/usr/local/vgpu/vgpu``
    as well for Volcano (its plugin writes ``/usr/local/vgpu/vgpu/containers``).
    A root or subfolder that does not exist is simply empty. The same key found
    under two roots is one region (the newest file wins, as below).

Several ``.cache`` files for one key
    A container folder collects one random-named ``.cache`` file per container
    run (restarts), so older files are leftovers whose processes are gone but
    whose slots may still say "running". They are never summed, and never
    used: only the most recently modified file is read, the others are counted
    in ``Scan.ignored``. If the newest one cannot be read (a container that has
    just started and not yet initialised it), the key is a failure of this scan
    rather than a report of an earlier run's figures.
"""

from __future__ import annotations

import errno
import os
import stat
import struct
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

MAGIC: Final = 19920718
MAX_DEVICES: Final = 16
MAX_PROCS: Final = 1024
UUID_LEN: Final = 96
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
LayoutName = Literal["v0", "v1.1", "v1.2"]

PodKey = tuple[Literal["pod"], str, str]
ClaimKey = tuple[Literal["claim"], str]
RegionKey = PodKey | ClaimKey
"""("pod", pod_uid, container) or ("claim", claim_uid)."""


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


@dataclass(frozen=True, slots=True)
class RegionUsage:
    """One region file, aggregated over its live processes."""

    path: Path
    layout: LayoutName
    devices: tuple[DeviceUsage, ...]
    last_kernel_time: int | None
    processes: int
    """Live slots (status != 0) below proc_num."""
    retries: int = 0
    """Slot re-reads the v1.2 seqlock needed (contention indicator for self-metrics)."""


# --------------------------------------------------------------------------- layouts


@dataclass(frozen=True, slots=True)
class _Layout:
    """Offsets from the reference (only those the reader needs)."""

    name: str
    total: int
    header_size: int  # == procs offset: everything before the slots
    slot_size: int
    mem_size: int
    util_size: int
    slot_used: int
    slot_util: int
    slot_status: int
    slot_seqlock: int | None
    version: int | None  # offset of major (minor follows at +4)
    device_num: int
    uuids: int
    limit: int
    proc_num: int
    last_kernel_time: int | None


_V0: Final = _Layout(
    name="v0",
    total=1_197_896,
    header_size=1848,
    slot_size=1168,
    mem_size=40,
    util_size=24,
    slot_used=8,
    slot_util=776,
    slot_status=1160,
    slot_seqlock=None,
    version=None,
    device_num=48,
    uuids=56,
    limit=1592,
    proc_num=1_197_880,
    last_kernel_time=None,
)
_V1: Final = _Layout(
    name="v1",
    total=2_008_952,
    header_size=1856,
    slot_size=1960,
    mem_size=64,
    util_size=48,
    slot_used=8,
    slot_util=1160,
    slot_status=1928,
    slot_seqlock=1936,
    version=4,
    device_num=56,
    uuids=64,
    limit=1600,
    proc_num=2_008_896,
    last_kernel_time=2_008_912,
)

V0_SIZE: Final = _V0.total
V1_SIZE: Final = _V1.total
PRE_V0_SIZES: Final = frozenset({804_680, 804_681})
V281_SIZES: Final = frozenset({2_008_984, 2_008_985})


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


def _slot_struct(lay: _Layout, n: int) -> struct.Struct:
    """One slot -> (ctx0, mod0, data0, total0, ..., sm0..sm[n-1], status[, seqlock]).

    Only the fields the aggregation needs, for the first ``n`` devices, so that
    ``iter_unpack`` over the live slots does all the byte work in C.
    """
    fields: list[tuple[int, str]] = []
    for i in range(n):
        base = lay.slot_used + i * lay.mem_size
        fields += [(base, "Q"), (base + 8, "Q"), (base + 16, "Q"), (base + 32, "Q")]
    fields += [(lay.slot_util + i * lay.util_size + 16, "Q") for i in range(n)]
    fields.append((lay.slot_status, "i"))
    if lay.slot_seqlock is not None:
        fields.append((lay.slot_seqlock, "Q"))
    return struct.Struct(_format(fields, lay.slot_size))


def _header_struct(lay: _Layout) -> struct.Struct:
    """magic[, major, minor], device_num, uuids[16], limit[16]."""
    fields: list[tuple[int, str]] = [(0, "i"), (lay.device_num, "Q")]
    if lay.version is not None:
        fields += [(lay.version, "I"), (lay.version + 4, "I")]
    fields += [(lay.uuids + UUID_LEN * i, f"{UUID_LEN}s") for i in range(MAX_DEVICES)]
    fields += [(lay.limit + 8 * i, "Q") for i in range(MAX_DEVICES)]
    return struct.Struct(_format(fields, lay.header_size))


def _tail_struct(lay: _Layout) -> struct.Struct:
    """proc_num[, last_kernel_time], starting at proc_num."""
    fields: list[tuple[int, str]] = [(0, "i")]
    if lay.last_kernel_time is not None:
        fields.append((lay.last_kernel_time - lay.proc_num, "Q"))
    return struct.Struct(_format(fields))


@dataclass(frozen=True, slots=True)
class _Structs:
    header: struct.Struct
    tail: struct.Struct
    slots: tuple[struct.Struct, ...]  # indexed by the number of devices


_STRUCTS: Final = {
    lay.name: _Structs(
        header=_header_struct(lay),
        tail=_tail_struct(lay),
        slots=tuple(_slot_struct(lay, n) for n in range(MAX_DEVICES + 1)),
    )
    for lay in (_V0, _V1)
}
_SEQ_STRUCT: Final = struct.Struct(_format([(_V1.slot_seqlock or 0, "Q")], _V1.slot_size))
_U64: Final = struct.Struct("<Q")
_MAGIC_STRUCT: Final = struct.Struct("<i")

# --------------------------------------------------------------------------- reading


def _pread(fd: int, path: Path, size: int, offset: int) -> bytes:
    """Exactly ``size`` bytes at ``offset``; a short read means the file shrank under us."""
    data = os.pread(fd, size, offset)
    if len(data) != size:
        raise RegionError(
            "changed", path, f"file shrank while reading ({len(data)} of {size} bytes at {offset})"
        )
    return data


def read_region(path: Path | str) -> RegionUsage:
    """Read and aggregate one region file; raise :class:`RegionError` if it cannot be trusted."""
    path = Path(path)
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
    try:
        fd = os.open(path, flags)
    except FileNotFoundError as exc:
        raise RegionError("vanished", path, "file disappeared") from exc
    except OSError as exc:
        raise RegionError("unreadable", path, f"cannot open: {exc.strerror or exc}") from exc
    try:
        return _read_fd(fd, path)
    except OSError as exc:
        raise RegionError("unreadable", path, f"read failed: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)


def _read_fd(fd: int, path: Path) -> RegionUsage:
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
    if size < _MAGIC_STRUCT.size:
        raise RegionError("too_short", path, f"{size} bytes, no region yet")
    if size < V0_SIZE:
        (magic,) = _MAGIC_STRUCT.unpack(_pread(fd, path, _MAGIC_STRUCT.size, 0))
        if magic != MAGIC:
            raise RegionError("no_magic", path, f"not an initialised region (flag {magic})")
        raise RegionError("too_short", path, f"{size} bytes, shorter than any layout ({V0_SIZE})")
    lay = _V1 if size >= V1_SIZE else _V0

    structs = _STRUCTS[lay.name]
    header = structs.header.unpack(_pread(fd, path, lay.header_size, 0))
    if header[0] != MAGIC:
        raise RegionError("no_magic", path, f"not an initialised region (flag {header[0]})")
    layout: LayoutName = "v0"
    pos = 2
    if lay.version is not None:
        # struct fields are in offset order: magic, major, minor, device_num, uuids, limits
        major, minor, device_num = header[1], header[2], header[3]
        pos = 4
        if major != 1 or minor not in (1, 2):
            raise RegionError(
                "unknown_version", path, f"region version {major}.{minor}, want 1.1 or 1.2"
            )
        layout = "v1.2" if minor == 2 else "v1.1"
    else:
        device_num = header[1]
    n = min(device_num, MAX_DEVICES)
    uuids = header[pos : pos + MAX_DEVICES]
    limits = header[pos + MAX_DEVICES : pos + 2 * MAX_DEVICES]

    tail = structs.tail.unpack(_pread(fd, path, structs.tail.size, lay.proc_num))
    proc_num = min(max(tail[0], 0), MAX_PROCS)
    last_kernel_time = tail[1] if len(tail) > 1 and tail[1] > 0 else None

    slot_struct = structs.slots[n]
    slots = _pread(fd, path, proc_num * lay.slot_size, lay.header_size)
    retries = 0
    if layout == "v1.2":
        rows, retries = _read_slots_locked(fd, path, lay, slot_struct, slots, proc_num)
    else:
        rows = list(slot_struct.iter_unpack(slots))

    status_at = 5 * n
    live = [row for row in rows if row[status_at] != 0]
    sums = [sum(col) for col in zip(*live, strict=True)] if live else [0] * (5 * n)

    devices: list[DeviceUsage] = []
    for i in range(n):
        uuid = _uuid(path, i, uuids[i])
        if not uuid:
            continue
        devices.append(
            DeviceUsage(
                index=i,
                uuid=uuid,
                memory_used=sums[4 * i + 3],
                memory_limit=limits[i],
                context=sums[4 * i],
                module=sums[4 * i + 1],
                buffer=sums[4 * i + 2],
                sm_utilization=float(sums[4 * n + i]),
            )
        )
    return RegionUsage(
        path=path,
        layout=layout,
        devices=tuple(devices),
        last_kernel_time=last_kernel_time,
        processes=len(live),
        retries=retries,
    )


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
    lay: _Layout,
    slot_struct: struct.Struct,
    before: bytes,
    proc_num: int,
) -> tuple[list[tuple[int, ...]], int]:
    """Consistent copies of slots ``0..proc_num-1`` under their v1.2 seqlocks.

    ``before`` was read (in full) before the data copy; a third read after it
    gives the sequences after. Slots that were odd or moved are re-read singly.
    """
    assert lay.slot_seqlock is not None
    slots_len = proc_num * lay.slot_size
    data = _pread(fd, path, slots_len, lay.header_size)
    after = _pread(fd, path, slots_len, lay.header_size)
    rows = list(slot_struct.iter_unpack(data))
    retries = 0
    seq_pairs: Iterator[tuple[tuple[int, ...], tuple[int, ...]]] = zip(
        _SEQ_STRUCT.iter_unpack(before), _SEQ_STRUCT.iter_unpack(after), strict=True
    )
    for s, (seq_before, seq_after) in enumerate(seq_pairs):
        if seq_before[0] % 2 == 0 and seq_before == seq_after:
            continue
        rows[s], tries = _read_slot_locked(fd, path, lay, slot_struct, s)
        retries += tries
    return rows, retries


def _read_slot_locked(
    fd: int, path: Path, lay: _Layout, slot_struct: struct.Struct, s: int
) -> tuple[tuple[int, ...], int]:
    assert lay.slot_seqlock is not None
    base = lay.header_size + s * lay.slot_size
    seq_at = base + lay.slot_seqlock
    for attempt in range(1, MAX_TRIES):
        (seq1,) = _U64.unpack(_pread(fd, path, 8, seq_at))
        if seq1 % 2 == 0:
            raw = _pread(fd, path, lay.slot_size, base)
            (seq2,) = _U64.unpack(_pread(fd, path, 8, seq_at))
            if seq1 == seq2:
                return slot_struct.unpack(raw), attempt
        # A writer holds the slot for microseconds; yield first, then back off a little.
        time.sleep(0 if attempt < 10 else 1e-4)
    raise RegionError(
        "changed", path, f"slot {s} kept changing (seqlock odd or moving) over {MAX_TRIES} reads"
    )


# --------------------------------------------------------------------------- scanning


@dataclass(frozen=True, slots=True)
class Failure:
    """One failed file or folder of a scan; ``key`` is None when the folder name gave none."""

    key: RegionKey | None
    error: RegionError


@dataclass(frozen=True, slots=True)
class Scan:
    """The outcome of one pass over the roots."""

    regions: Mapping[RegionKey, RegionUsage]
    failures: tuple[Failure, ...]
    errors: Mapping[str, int]
    """Failures counted by reason."""
    ignored: int
    """``.cache`` files not read because a newer file of the same key read correctly."""
    stale: int
    """Keys skipped because their newest file is older than ``grace``."""


_POD_UID_MAX = 64
_CONTAINER_MAX = 253
_CLAIM_UID_MAX = 64


def _pod_key(name: str) -> PodKey | None:
    pod_uid, sep, container = name.partition("_")
    if not sep or not pod_uid or not container:
        return None
    if len(pod_uid) > _POD_UID_MAX or len(container) > _CONTAINER_MAX:
        return None
    return ("pod", pod_uid, container)


def _claim_key(name: str) -> ClaimKey | None:
    if not name or len(name) > _CLAIM_UID_MAX:
        return None
    return ("claim", name)


def _os_error(exc: OSError, path: Path, what: str) -> RegionError:
    if exc.errno == errno.ENOENT:
        return RegionError("vanished", path, f"{what} disappeared")
    return RegionError("unreadable", path, f"cannot {what}: {exc.strerror or exc}")


def _subfolders(base: Path, failures: list[Failure]) -> list[tuple[str, Path]]:
    try:
        with os.scandir(base) as it:
            entries = list(it)
    except FileNotFoundError:
        return []
    except OSError as exc:
        failures.append(Failure(None, _os_error(exc, base, "list folder")))
        return []
    out: list[tuple[str, Path]] = []
    for entry in entries:
        try:
            if entry.is_dir():
                out.append((entry.name, Path(entry.path)))
        except OSError:
            continue  # vanished between listing and looking: nothing to report
    return out


def _cache_files(
    folder: Path, key: RegionKey, failures: list[Failure]
) -> list[tuple[float, str, Path]]:
    """(mtime, name, path) of the ``*.cache`` entries in ``folder``."""
    try:
        with os.scandir(folder) as it:
            entries = [e for e in it if e.name.endswith(".cache")]
    except OSError as exc:
        failures.append(Failure(key, _os_error(exc, folder, "list folder")))
        return []
    out: list[tuple[float, str, Path]] = []
    for entry in entries:
        path = Path(entry.path)
        try:
            out.append((entry.stat().st_mtime, entry.name, path))
        except OSError as exc:
            failures.append(Failure(key, _os_error(exc, path, "stat file")))
    return out


def scan(
    roots: Sequence[Path],
    *,
    grace: float | None = None,
    now: float | None = None,
) -> Scan:
    """Read every region under ``<root>/containers/*/`` and ``<root>/claims/*/``.

    ``containers/<podUID>_<container>`` is split on the first ``_`` (a name
    without one, or with an empty side, is a ``bad_folder`` failure);
    ``claims/<claimUID>`` is keyed by the claim UID. With ``grace``, a key whose
    newest ``.cache`` file was last modified more than ``grace`` seconds before
    ``now`` is skipped and counted as stale (leftovers of deleted pods; note an
    idle process may not touch its region for a long time, so keep it generous).
    Any error is confined to its own folder or file and recorded; the scan goes on.
    """
    failures: list[Failure] = []
    candidates: dict[RegionKey, list[tuple[float, str, Path]]] = {}
    for root in roots:
        root = Path(root)
        for name, folder in _subfolders(root / "containers", failures):
            pod = _pod_key(name)
            if pod is None:
                failures.append(
                    Failure(
                        None,
                        RegionError(
                            "bad_folder", folder, "folder name is not <podUID>_<container>"
                        ),
                    )
                )
                continue
            candidates.setdefault(pod, []).extend(_cache_files(folder, pod, failures))
        for name, folder in _subfolders(root / "claims", failures):
            claim = _claim_key(name)
            if claim is None:
                failures.append(
                    Failure(
                        None, RegionError("bad_folder", folder, "folder name is not a claim UID")
                    )
                )
                continue
            candidates.setdefault(claim, []).extend(_cache_files(folder, claim, failures))

    when = time.time() if now is None else now
    regions: dict[RegionKey, RegionUsage] = {}
    ignored = 0
    stale = 0
    for key, files in candidates.items():
        if not files:
            continue
        files.sort(key=lambda f: (f[0], f[1]), reverse=True)
        if grace is not None and when - files[0][0] > grace:
            stale += 1
            continue
        ignored += len(files) - 1
        try:
            regions[key] = read_region(files[0][2])
        except RegionError as exc:
            failures.append(Failure(key, exc))  # never an older file: it belongs to an earlier run
    errors: Counter[str] = Counter(f.error.reason for f in failures)
    return Scan(
        regions=regions,
        failures=tuple(failures),
        errors=dict(errors),
        ignored=ignored,
        stale=stale,
    )
