"""HAMi-core region reader (agent.hamicore) and its test writer (simulator.regions).

The region writer is checked against the reference numbers directly (byte offsets,
total sizes), so the reader is not just checked against a mirror of itself.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent import hamicore
from agent.hamicore import DeviceUsage, RegionError, read_region
from agent.region_scan import scan
from core.payload import Device
from simulator import regions
from simulator.regions import ProcSlot, RegionSpec, bad_file, open_for_update, pack, write_region

GiB = 1 << 30
MiB = 1 << 20
V0_FILE = 1_197_897
V1_FILE = 2_008_953


def u64(data: bytes, at: int) -> int:
    value: int = struct.unpack_from("<Q", data, at)[0]
    return value


def i32(data: bytes, at: int) -> int:
    value: int = struct.unpack_from("<i", data, at)[0]
    return value


def mem(context: int, module: int, data: int) -> regions.MemTuple:
    return (context, module, data, 0, context + module + data)


def sample_spec(layout: regions.Layout) -> RegionSpec:
    """3 devices, 5 slots: one exited, one beyond proc_num, one swapped."""
    return RegionSpec(
        layout=layout,
        uuids=["GPU-aaaaaaaa-0000-1111-2222-333333333333", "GPU-b", "GPU-c"],
        limits=[4 * GiB, 8 * GiB, 2 * GiB],
        sm_limits=[50, 100, 30],
        procs=[
            ProcSlot(
                pid=10,
                used=[mem(1 * MiB, 2 * MiB, 100 * MiB), mem(1, 2, 3)],
                device_util=[(0, 0, 40), (0, 0, 5)],
            ),
            ProcSlot(pid=11, used=[mem(3 * MiB, 0, 50 * MiB)], device_util=[(0, 0, 70)], status=2),
            ProcSlot(pid=12, used=[mem(9 * GiB, 9, 9)], device_util=[(0, 0, 99)], status=0),
            ProcSlot(
                pid=13,
                used=[mem(0, 0, 0), mem(0, 0, 0), mem(7, 8, 9)],
                device_util=[(0, 0, 0), (0, 0, 0), (1, 2, 3)],
            ),
            ProcSlot(pid=14, used=[mem(5 * GiB, 5, 5)], device_util=[(0, 0, 88)]),
        ],
        proc_num=4,
        last_kernel_time=1_700_000_000,
        utilization_switch=1,
    )


# --------------------------------------------------------------------------- the region writer vs the reference


@pytest.mark.parametrize(
    ("layout", "size"), [("v0", V0_FILE), ("v1.1", V1_FILE), ("v1.2", V1_FILE)]
)
def test_packed_sizes_are_the_reference_totals_plus_one(layout: regions.Layout, size: int) -> None:
    assert len(pack(RegionSpec(layout=layout))) == size


def test_packer_offset_tables_add_up() -> None:
    for off in (regions.V0, regions.V1):
        assert off.procs + regions.MAX_PROCS * off.slot_size == off.proc_num
        assert off.slot_used + 16 * off.mem_size + 16 * 8 == off.slot_util
        assert off.slot_util + 16 * off.util_size == off.slot_status
    assert regions.V1.last_kernel_time == regions.V1.proc_num + 16
    assert regions.V1.total == 2_008_912 + 8 + 32  # last_kernel_time, then sem_postinit
    assert regions.V0.total == regions.V0.priority + 4


def test_v1_bytes_sit_at_reference_offsets() -> None:
    spec = RegionSpec(
        layout="v1.2",
        uuids=["GPU-first", "GPU-second"],
        limits=[0x1122334455667788, 7],
        sm_limits=[0x0102030405060708],
        procs=[
            ProcSlot(
                pid=4242,
                hostpid=777,
                used=[mem(1, 2, 3), (11, 12, 13, 14, 15)],
                device_util=[(0, 0, 0), (0, 0, 0), (21, 22, 23)],
                status=2,
                seqlock=6,
            ),
            ProcSlot(pid=5151),
        ],
        last_kernel_time=1_700_000_123,
        utilization_switch=1,
        priority=3,
    )
    data = pack(spec)
    assert i32(data, 0) == 19920718
    assert struct.unpack_from("<II", data, 4) == (1, 2)
    assert u64(data, 56) == 2  # device_num
    assert data[64 : 64 + 10] == b"GPU-first\0"
    assert data[64 + 96 : 64 + 96 + 11] == b"GPU-second\0"
    assert u64(data, 1600) == 0x1122334455667788  # limit[0]
    assert u64(data, 1608) == 7  # limit[1]
    assert u64(data, 1728) == 0x0102030405060708  # sm_limit[0]
    slot0 = 1856
    assert i32(data, slot0) == 4242
    assert i32(data, slot0 + 4) == 777
    assert u64(data, slot0 + 8 + 64 + 0) == 11  # used[1].context_size
    assert u64(data, slot0 + 8 + 64 + 16) == 13  # used[1].data_size
    assert u64(data, slot0 + 8 + 64 + 32) == 15  # used[1].total
    assert u64(data, slot0 + 1160 + 2 * 48 + 16) == 23  # device_util[2].sm_util
    assert i32(data, slot0 + 1928) == 2  # status
    assert u64(data, slot0 + 1936) == 6  # seqlock
    assert i32(data, 1856 + 1960) == 5151  # slot 1 pid
    assert i32(data, 2008896) == 2  # proc_num
    assert i32(data, 2008900) == 1  # utilization_switch
    assert i32(data, 2008908) == 3  # priority
    assert u64(data, 2008912) == 1_700_000_123  # last_kernel_time


def test_v0_bytes_sit_at_reference_offsets() -> None:
    spec = RegionSpec(
        layout="v0",
        uuids=["GPU-zero"],
        limits=[0x1122334455667788],
        sm_limits=[60],
        procs=[
            ProcSlot(
                pid=9,
                hostpid=8,
                used=[mem(0, 0, 0), (1, 2, 3, 4, 5)],
                device_util=[(0, 0, 0), (0, 0, 0), (6, 7, 8)],
            )
        ],
        utilization_switch=1,
    )
    data = pack(spec)
    assert i32(data, 0) == 19920718
    assert u64(data, 48) == 1  # device_num
    assert data[56 : 56 + 9] == b"GPU-zero\0"
    assert u64(data, 1592) == 0x1122334455667788  # limit[0]
    assert u64(data, 1720) == 60  # sm_limit[0]
    slot0 = 1848
    assert (i32(data, slot0), i32(data, slot0 + 4)) == (9, 8)
    assert u64(data, slot0 + 8 + 40 + 32) == 5  # used[1].total
    assert u64(data, slot0 + 776 + 2 * 24 + 16) == 8  # device_util[2].sm_util
    assert i32(data, slot0 + 1160) == 1  # status
    assert i32(data, 1197880) == 1  # proc_num
    assert i32(data, 1197884) == 1  # utilization_switch


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("layout", ["v0", "v1.1", "v1.2"])
def test_round_trip_sums_live_slots_below_proc_num(tmp_path: Path, layout: regions.Layout) -> None:
    path = tmp_path / "r.cache"
    write_region(path, sample_spec(layout))
    region = read_region(path)
    assert region.layout == layout
    assert region.processes == 3  # slots 0, 1, 3; slot 2 exited; slot 4 beyond proc_num
    assert region.last_kernel_time == (None if layout == "v0" else 1_700_000_000)
    assert region.devices == (
        DeviceUsage(
            index=0,
            uuid="GPU-aaaaaaaa-0000-1111-2222-333333333333",
            memory_used=(103 + 53) * MiB,
            memory_limit=4 * GiB,
            context=4 * MiB,
            module=2 * MiB,
            buffer=150 * MiB,
            sm_utilization=110.0,
        ),
        DeviceUsage(
            index=1,
            uuid="GPU-b",
            memory_used=6,
            memory_limit=8 * GiB,
            context=1,
            module=2,
            buffer=3,
            sm_utilization=5.0,
        ),
        DeviceUsage(
            index=2,
            uuid="GPU-c",
            memory_used=24,
            memory_limit=2 * GiB,
            context=7,
            module=8,
            buffer=9,
            sm_utilization=3.0,
        ),
    )
    for device in region.devices:  # maps 1:1 onto the push payload
        Device(**dataclasses.asdict(device))


def test_proc_num_is_clamped(tmp_path: Path) -> None:
    procs = [ProcSlot(pid=0, status=0)] * 1023 + [ProcSlot(pid=99, used=[mem(1, 1, 1)])]
    path = tmp_path / "r.cache"
    write_region(path, RegionSpec(uuids=["GPU-a"], limits=[GiB], procs=procs, proc_num=5000))
    region = read_region(path)
    assert (region.processes, region.devices[0].memory_used) == (1, 3)

    write_region(path, RegionSpec(uuids=["GPU-a"], limits=[GiB], procs=procs, proc_num=-3))
    region = read_region(path)
    assert (region.processes, region.devices[0].memory_used) == (0, 0)
    assert region.devices[0].memory_limit == GiB


def test_device_num_is_clamped_and_empty_uuids_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "r.cache"
    uuids = [f"GPU-{i}" for i in range(16)]
    write_region(path, RegionSpec(uuids=uuids, device_num=1 << 40))
    assert [d.index for d in read_region(path).devices] == list(range(16))

    write_region(path, RegionSpec(uuids=["GPU-a", "", "GPU-c"], limits=[1, 2, 3]))
    region = read_region(path)
    assert [(d.index, d.uuid, d.memory_limit) for d in region.devices] == [
        (0, "GPU-a", 1),
        (2, "GPU-c", 3),
    ]

    write_region(path, RegionSpec(uuids=["GPU-a"], device_num=0))
    assert read_region(path).devices == ()


def test_uuid_is_read_whole_up_to_nul_or_96_bytes(tmp_path: Path) -> None:
    path = tmp_path / "r.cache"
    long = "MIG-" + "x" * 92
    write_region(path, RegionSpec(uuids=[long, "GPU-" + "y" * 60]))
    assert [d.uuid for d in read_region(path).devices] == [long, "GPU-" + "y" * 60]


def test_unprintable_uuid_is_refused_not_reported(tmp_path: Path) -> None:
    path = tmp_path / "r.cache"
    write_region(
        path, RegionSpec(uuids=["GPU-a", "GPU-b"], extra={regions.V1.uuids + 96: b"\x01\xfe\x00"})
    )
    with pytest.raises(RegionError) as info:
        read_region(path)
    assert info.value.reason == "bad_uuid"


def test_v1_truncated_into_the_v0_range_never_yields_a_device(tmp_path: Path) -> None:
    """Size alone says v0; the reader must still not report garbage devices."""
    path = tmp_path / "r.cache"
    data = pack(sample_spec("v1.2"))
    path.write_bytes(data[:1_500_000])
    assert read_region(path).devices == ()  # v0 device_num falls in v1's (zeroed) sem
    # the same with a non-zero word where v0 keeps device_num (inside v1's sem)
    path.write_bytes(data[:48] + struct.pack("<Q", 2) + data[56:1_500_000])
    with pytest.raises(RegionError) as info:
        read_region(path)
    assert info.value.reason == "bad_uuid"


def test_reader_opens_read_only_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "r.cache"
    write_region(path, sample_spec("v1.2"))
    os.utime(path, (1_000_000, 1_000_000))
    before = path.read_bytes()
    flags_seen: list[int] = []
    real_open = os.open

    def recording_open(file: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        flags_seen.append(flags)
        return real_open(file, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", recording_open)
    read_region(path)
    monkeypatch.undo()
    assert flags_seen
    assert all(flags & os.O_ACCMODE == os.O_RDONLY for flags in flags_seen)
    assert path.read_bytes() == before
    assert path.stat().st_mtime == 1_000_000


# --------------------------------------------------------------------------- refused files


def _bad(kind: regions.BadKind) -> Callable[[], bytes]:
    return lambda: bad_file(kind, sample_spec("v1.2"))


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        pytest.param(_bad("pre_v0"), "pre_v0", id="pre-v0"),
        pytest.param(_bad("v281"), "v281_layout", id="v2.8.1"),
        pytest.param(lambda: bad_file("v281")[:-1], "v281_layout", id="v2.8.1-without-extra-byte"),
        pytest.param(_bad("no_magic"), "no_magic", id="no-magic"),
        pytest.param(_bad("truncated"), "too_short", id="truncated-half"),
        pytest.param(_bad("unknown_version"), "unknown_version", id="major-2"),
        pytest.param(lambda: pack(RegionSpec(version=(1, 3))), "unknown_version", id="minor-3"),
        pytest.param(lambda: pack(RegionSpec(version=(1, 0))), "unknown_version", id="minor-0"),
        pytest.param(lambda: b"", "too_short", id="empty"),
        pytest.param(lambda: b"\x4e\xf7", "too_short", id="two-bytes"),
        pytest.param(lambda: os.urandom(4096), "no_magic", id="small-garbage"),
        pytest.param(lambda: b"\xff" * V1_FILE, "no_magic", id="garbage-v1-size"),
        pytest.param(lambda: bytes(V0_FILE), "no_magic", id="zeros-v0-size"),
    ],
)
def test_bad_files_are_refused_with_reason_and_name(
    tmp_path: Path, make: Callable[[], bytes], reason: str
) -> None:
    path = tmp_path / "c0ffee.cache"
    path.write_bytes(make())
    with pytest.raises(RegionError) as info:
        read_region(path)
    assert info.value.reason == reason
    assert "c0ffee.cache" in str(info.value)
    assert info.value.path == path


def test_known_bad_sizes_are_refused_before_the_magic(tmp_path: Path) -> None:
    path = tmp_path / "x.cache"
    path.write_bytes(bytes(804_681))
    with pytest.raises(RegionError, match="pre-v0") as info:
        read_region(path)
    assert info.value.reason == "pre_v0"


def test_file_shrinking_while_read_is_changed_not_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "r.cache"
    write_region(path, sample_spec("v1.2"))
    real_pread = os.pread

    def shrink_then_pread(fd: int, size: int, offset: int) -> bytes:
        os.truncate(path, 100)
        return real_pread(fd, size, offset)

    monkeypatch.setattr(os, "pread", shrink_then_pread)
    with pytest.raises(RegionError) as info:
        read_region(path)
    assert info.value.reason == "changed"


def test_fifo_and_directory_are_unreadable_without_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.cache"
    os.mkfifo(fifo)
    folder = tmp_path / "dir.cache"
    folder.mkdir()
    for path in (fifo, folder):
        with pytest.raises(RegionError) as info:
            read_region(path)
        assert info.value.reason == "unreadable"


def test_missing_file_is_vanished(tmp_path: Path) -> None:
    with pytest.raises(RegionError) as info:
        read_region(tmp_path / "gone.cache")
    assert info.value.reason == "vanished"


# --------------------------------------------------------------------------- the v1.2 seqlock


def _two_slot_region(path: Path) -> None:
    write_region(
        path,
        RegionSpec(
            layout="v1.2",
            uuids=["GPU-a", "GPU-b"],
            limits=[GiB, GiB],
            procs=[
                ProcSlot(pid=1, used=[mem(1, 1, 1)] * 2),
                ProcSlot(pid=2, used=[mem(5, 6, 7)] * 2),
            ],
        ),
    )


def test_reads_are_consistent_while_a_writer_updates_under_the_seqlock(tmp_path: Path) -> None:
    path = tmp_path / "r.cache"
    _two_slot_region(path)
    stop = threading.Event()
    updates = 0

    def writer() -> None:
        nonlocal updates
        with open_for_update(path) as region:
            k = 0
            while not stop.is_set():
                k += 1
                values = mem(k, 2 * k + 1, 3 * k + 7)
                # pause: yield mid-write, with the slot odd, so a reader can meet it torn
                region.update_slot(0, used=[values, values], pause=lambda: time.sleep(0))
                updates += 1
                time.sleep(0.0002)  # a writer's pace: the reader must meet writes, not only one

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    reads = retries = 0
    deadline = time.monotonic() + 0.8
    try:
        while time.monotonic() < deadline:
            region = read_region(path)
            reads += 1
            retries += region.retries
            for device in region.devices:
                assert device.context + device.module + device.buffer == device.memory_used, device
    finally:
        stop.set()
        thread.join(5)
    assert updates > 50
    assert reads > 100
    assert retries > 0, (
        "the reader never met a write in progress: the test did not exercise the lock"
    )


def test_a_slot_held_odd_briefly_is_retried_to_the_finished_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "r.cache"
    _two_slot_region(path)
    result: list[hamicore.RegionUsage | BaseException] = []
    retrying = threading.Event()
    reread = hamicore._read_slot_locked

    def noted(*args: Any) -> tuple[tuple[int, ...], int]:
        retrying.set()  # the reader found the slot odd and re-reads it alone
        return reread(*args)

    monkeypatch.setattr(hamicore, "_read_slot_locked", noted)

    def reader() -> None:
        try:
            result.append(read_region(path))
        except BaseException as exc:
            result.append(exc)

    with open_for_update(path) as region:
        with region.locked(0):
            region.update_slot(
                0, used=[(100, 0, 0, 0, 0)], lock=False
            )  # torn: total not yet written
            thread = threading.Thread(target=reader)
            thread.start()
            assert retrying.wait(5), "the reader met the odd slot"
            region.update_slot(0, used=[mem(100, 200, 300)], lock=False)
        thread.join(5)
    (got,) = result
    assert isinstance(got, hamicore.RegionUsage), got
    assert got.retries > 0
    assert got.devices[0].memory_used == 600 + 18
    assert got.devices[0].context == 100 + 5


def test_a_slot_left_odd_forever_makes_the_region_changed(tmp_path: Path) -> None:
    path = tmp_path / "r.cache"
    _two_slot_region(path)
    with open_for_update(path) as region:
        region.set_seqlock(1, 7)
    with pytest.raises(RegionError) as info:  # returning at all shows the retries are bounded
        read_region(path)
    assert info.value.reason == "changed"
    assert "slot 1" in str(info.value)


def test_v11_ignores_the_seqlock_field(tmp_path: Path) -> None:
    path = tmp_path / "r.cache"
    write_region(
        path,
        RegionSpec(
            layout="v1.1", uuids=["GPU-a"], procs=[ProcSlot(pid=1, used=[mem(1, 2, 3)], seqlock=3)]
        ),
    )
    assert read_region(path).devices[0].memory_used == 6


def test_open_for_update_writes_what_the_reader_reads(tmp_path: Path) -> None:
    path = tmp_path / "r.cache"
    write_region(path, sample_spec("v0"))
    with open_for_update(path) as region:
        assert region.layout == "v0"
        region.update_slot(2, used=[mem(1, 1, 1)], status=1)
        region.set_proc_num(3)
    assert read_region(path).processes == 3
    write_region(path, sample_spec("v1.2"))
    with open_for_update(path) as region:
        assert region.layout == "v1.2"
        region.set_last_kernel_time(42)
        region.update_slot(0, status=0)
        assert region.seqlock_value(0) == 2
    got = read_region(path)
    assert (got.last_kernel_time, got.processes) == (42, 2)


# --------------------------------------------------------------------------- scanning


def _region(folder: Path, name: str, spec: RegionSpec, mtime: float | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    write_region(path, spec)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def _one(uuid: str, used: int) -> RegionSpec:
    return RegionSpec(uuids=[uuid], limits=[GiB], procs=[ProcSlot(pid=1, used=[mem(0, 0, used)])])


def test_scan_keys_pods_and_claims_across_roots(tmp_path: Path) -> None:
    base = tmp_path / "vgpu"
    volcano = base / "vgpu"
    _region(base / "containers" / "pod-1_main", "a.cache", _one("GPU-1", 1))
    (base / "containers" / "pod-1_main" / "libvgpu.so").write_bytes(b"")
    _region(base / "containers" / "pod-1_side_car_x", "b.cache", _one("GPU-2", 2))
    _region(base / "claims" / "claim-9", "c.cache", _one("GPU-3", 3))
    _region(volcano / "containers" / "pod-2_trainer", "d.cache", _one("GPU-4", 4))
    (base / "containers" / "pod-3_idle").mkdir()  # no process yet: no region, no error
    (base / "containers" / "stray-file").write_bytes(b"")

    result = scan([base, volcano, tmp_path / "absent"])
    used = {key: r.devices[0].memory_used for key, r in result.regions.items()}
    assert used == {
        ("pod", "pod-1", "main"): 1,
        ("pod", "pod-1", "side_car_x"): 2,
        ("claim", "claim-9"): 3,
        ("pod", "pod-2", "trainer"): 4,
    }
    assert (result.failures, result.errors, result.ignored, result.stale) == ((), {}, 0, 0)


def test_scan_bad_folder_names_are_errors_not_crashes(tmp_path: Path) -> None:
    _region(tmp_path / "containers" / "nounderscore", "a.cache", _one("GPU-1", 1))
    _region(tmp_path / "containers" / "_nopod", "a.cache", _one("GPU-1", 1))
    _region(tmp_path / "containers" / "pod-1_ok", "a.cache", _one("GPU-1", 1))
    result = scan([tmp_path])
    assert list(result.regions) == [("pod", "pod-1", "ok")]
    assert result.errors == {"bad_folder": 2}
    assert all(f.key is None for f in result.failures)


def test_scan_takes_the_newest_file_only_and_never_sums(tmp_path: Path) -> None:
    folder = tmp_path / "containers" / "pod-1_main"
    now = time.time()
    _region(folder, "old.cache", _one("GPU-1", 10), mtime=now - 300)
    _region(folder, "older.cache", _one("GPU-1", 20), mtime=now - 600)
    _region(folder, "new.cache", _one("GPU-1", 30), mtime=now - 5)
    result = scan([tmp_path])
    (region,) = result.regions.values()
    assert region.devices[0].memory_used == 30
    assert region.path.name == "new.cache"
    assert (result.ignored, result.errors) == (2, {})

    (folder / "newest.cache").write_bytes(bytes(V1_FILE))  # just created, not initialised yet
    result = scan([tmp_path])
    assert result.regions == {}, "an older file is an earlier run's: never reported instead"
    assert (result.ignored, result.errors) == (3, {"no_magic": 1})
    assert result.failures[0].key == ("pod", "pod-1", "main")


def test_scan_same_key_under_two_roots_is_one_region(tmp_path: Path) -> None:
    now = time.time()
    _region(
        tmp_path / "a" / "containers" / "pod-1_main", "x.cache", _one("GPU-1", 1), mtime=now - 50
    )
    _region(tmp_path / "b" / "containers" / "pod-1_main", "y.cache", _one("GPU-1", 2), mtime=now)
    result = scan([tmp_path / "a", tmp_path / "b"])
    assert [r.devices[0].memory_used for r in result.regions.values()] == [2]
    assert result.ignored == 1


def test_scan_grace_skips_folders_nobody_touched(tmp_path: Path) -> None:
    now = 2_000_000_000.0
    _region(tmp_path / "containers" / "pod-old_main", "a.cache", _one("GPU-1", 1), mtime=now - 3600)
    _region(tmp_path / "containers" / "pod-new_main", "a.cache", _one("GPU-1", 1), mtime=now - 10)
    result = scan([tmp_path], grace=600, now=now)
    assert list(result.regions) == [("pod", "pod-new", "main")]
    assert result.stale == 1
    assert len(scan([tmp_path], now=now).regions) == 2


def test_scan_file_vanishing_before_read_is_an_error_of_that_region(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doomed = _region(tmp_path / "containers" / "pod-1_main", "a.cache", _one("GPU-1", 1))
    _region(tmp_path / "containers" / "pod-2_main", "a.cache", _one("GPU-2", 2))
    real_read = hamicore.read_region

    def delete_then_read(
        path: Path | str, judge: hamicore.SlotJudge | None = None
    ) -> hamicore.RegionUsage:
        if Path(path) == doomed:
            doomed.unlink()
        return real_read(path, judge)

    monkeypatch.setattr(hamicore, "read_region", delete_then_read)
    result = scan([tmp_path])
    assert list(result.regions) == [("pod", "pod-2", "main")]
    assert result.errors == {"vanished": 1}
    assert result.failures[0].key == ("pod", "pod-1", "main")
    assert "a.cache" in str(result.failures[0].error)


@pytest.mark.parametrize(
    ("error", "reason"), [(errno.ENOENT, "vanished"), (errno.EACCES, "unreadable")]
)
def test_scan_folder_vanishing_or_unlistable_is_an_error_of_that_region(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: int, reason: str
) -> None:
    bad = tmp_path / "containers" / "pod-1_main"
    _region(bad, "a.cache", _one("GPU-1", 1))
    _region(tmp_path / "containers" / "pod-2_main", "a.cache", _one("GPU-2", 2))
    real_scandir = os.scandir

    def failing_scandir(path: Any) -> Any:
        if Path(path) == bad:
            raise OSError(error, os.strerror(error), str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", failing_scandir)
    result = scan([tmp_path])
    assert list(result.regions) == [("pod", "pod-2", "main")]
    assert result.errors == {reason: 1}


def test_scan_permission_denied_file_is_an_error_of_that_region(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    denied = _region(tmp_path / "containers" / "pod-1_main", "a.cache", _one("GPU-1", 1))
    _region(tmp_path / "claims" / "claim-1", "a.cache", _one("GPU-2", 2))
    if os.geteuid() == 0:  # root reads a mode-000 file anyway: simulate the refusal
        real_open = os.open

        def refusing_open(file: Any, flags: int, *args: Any, **kwargs: Any) -> int:
            if Path(file) == denied:
                raise PermissionError(errno.EACCES, "Permission denied", str(file))
            return real_open(file, flags, *args, **kwargs)

        monkeypatch.setattr(os, "open", refusing_open)
    else:
        denied.chmod(0)
    try:
        result = scan([tmp_path])
    finally:
        denied.chmod(0o644)
    assert list(result.regions) == [("claim", "claim-1")]
    assert result.errors == {"unreadable": 1}
    assert "Permission denied" in str(result.failures[0].error)


def test_scan_counts_bad_regions_and_goes_on(tmp_path: Path) -> None:
    containers = tmp_path / "containers"
    for name, data in [
        ("p1_a", bad_file("pre_v0")),
        ("p2_a", bad_file("v281")),
        ("p3_a", b"garbage" * 100),
        ("p4_a", pack(sample_spec("v1.2"))[:1000]),
    ]:
        (containers / name).mkdir(parents=True)
        (containers / name / "x.cache").write_bytes(data)
    (containers / "p5_a").mkdir()
    (containers / "p5_a" / "dir.cache").mkdir()
    _region(containers / "p6_a", "ok.cache", sample_spec("v0"))
    result = scan([tmp_path])
    assert list(result.regions) == [("pod", "p6", "a")]
    assert result.errors == {
        "pre_v0": 1,
        "v281_layout": 1,
        "no_magic": 1,
        "too_short": 1,
        "unreadable": 1,
    }
