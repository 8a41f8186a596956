"""``python -m agent.gpucheck --cuda`` end to end, against the fake libcuda and the fake NVML.

Why these fakes: the CUDA worker's ctypes calls run against C entry points
declared as cuda.h declares them (testing/fakecuda), which refuse what the
driver refuses and what a card would fault on (a 64-bit device address cut
short, kernel arguments passed by value, a grid larger than the allocation);
the checking process reads the fake NVML through the real nvidia-ml-py
binding. The two meet in a file: the fake libcuda describes its process there
(PID, memory, launches) and the fake NVML lists that process on card 0 when
pointed at the same file, or does not when pointed elsewhere. Each run is a
child process whose LD_LIBRARY_PATH puts the fakes first.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agent import gpucheck
from agent.cgroups import owner
from agent.gpucheck import CONTEXT_ALLOWANCE, host_pid
from testing import fakecuda, fakenvml

ROOT = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024
CHECKS = {
    "worker",
    "process",
    "attribution",
    "memory",
    "process_utilization",
    "card_utilization",
    "energy",
    "clock_events",
    "xid_registration",
}


@pytest.fixture(scope="session")
def libdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("fakegpu")
    fakenvml.build(folder)
    fakecuda.build(folder)
    return folder


def run_check(libdir: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m agent.gpucheck --cuda ARGS`` with the fakes first in LD_LIBRARY_PATH and ``env`` added."""
    environ = fakenvml.environ(libdir) | env
    for name in (fakecuda.WORKLOAD_ENV, fakecuda.NVML_WORKLOAD_ENV, fakecuda.FAIL_ENV):
        if name not in env:
            environ.pop(name, None)
    return subprocess.run(
        [sys.executable, "-m", "agent.gpucheck", "--cuda", "--cuda-seconds", "0.5", *args],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def report_of(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(done.stdout)
    assert set(report["checks"]) == CHECKS
    return report


def failed(report: dict[str, Any]) -> set[str]:
    return {name for name, check in report["checks"].items() if not check["passed"]}


def test_every_check_passes_when_nvml_lists_the_worker(libdir: Path, tmp_path: Path) -> None:
    workload = tmp_path / "workload"
    done = run_check(
        libdir,
        "--cuda-mib",
        "64",
        FAKECUDA_WORKLOAD=str(workload),
        FAKENVML_WORKLOAD=str(workload),
    )
    assert done.returncode == 0, done.stderr
    assert "gpucheck --cuda:" not in done.stderr
    report = report_of(done)
    assert report["passed"] is True
    assert failed(report) == set()
    checks, worker = report["checks"], report["worker"]

    assert worker["uuid"] == fakecuda.UUID.removeprefix("GPU-")
    assert report["card"] == {"index": 0, "uuid": fakecuda.UUID, "name": fakenvml.NAMES[0]}
    # Same PID namespace: the host's PID is the worker's own.
    assert worker["host_pid"] == worker["pid"] == checks["process"]["pid"]
    assert checks["process"]["device"] == checks["process"]["card"] == fakecuda.UUID
    assert worker["exit_status"] == 0
    assert worker["launches"] == checks["worker"]["launches"] >= 1

    assert worker["allocated"] == 64 * MIB
    assert checks["memory"]["used"] == 64 * MIB + fakecuda.CONTEXT_BYTES
    assert checks["memory"]["context"] == fakecuda.CONTEXT_BYTES

    assert checks["process_utilization"]["sm_max"] == 100.0
    assert checks["card_utilization"]["max"] == fakenvml.UTILIZATION[0]
    # Only the worker's launches move the fake's counter, one joule each.
    joules = checks["energy"]["joules"]
    assert joules >= fakecuda.ENERGY_PER_LAUNCH_J
    assert joules <= worker["launches"] * fakecuda.ENERGY_PER_LAUNCH_J
    assert checks["clock_events"]["reasons"] == ["sw_power_cap", "hw_thermal_slowdown"]
    assert fakecuda.UUID in checks["xid_registration"]["watched"]
    # The watcher was live through the window: the fake's one queued XID was counted.
    assert checks["xid_registration"]["xid_errors"] == {str(fakenvml.XID): 1}

    # The worker shares this process's cgroup, so it belongs to whoever this test does.
    mine = owner(Path("/proc/self/cgroup").read_text())
    expected = None if mine is None else mine._asdict()
    assert checks["attribution"]["owner"] == expected
    usage = checks["attribution"]["usage"]
    assert usage["device"] == fakecuda.UUID
    assert usage["memory_used"] >= checks["memory"]["used"]
    assert usage["energy"] is not None

    # The worker gave the context back: the fake withdraws its workload file then.
    assert not workload.exists()


def test_a_worker_nvml_does_not_list_fails_its_checks(libdir: Path, tmp_path: Path) -> None:
    done = run_check(
        libdir,
        FAKECUDA_WORKLOAD=str(tmp_path / "workload"),
        FAKENVML_WORKLOAD=str(tmp_path / "elsewhere"),
    )
    assert done.returncode == 1
    report = report_of(done)
    assert report["passed"] is False
    assert failed(report) == {
        "process",
        "attribution",
        "memory",
        "process_utilization",
        "energy",
    }
    pid = report["worker"]["pid"]
    reason = f"PID {pid} is not among NVML's processes"
    assert report["checks"]["process"]["reason"] == reason
    assert f"gpucheck --cuda: process failed: {reason}\n" in done.stderr
    assert "the energy counter did not rise" in report["checks"]["energy"]["reason"]


@pytest.mark.parametrize(
    ("fail", "error"),
    [
        ("cuInit", "cuInit: CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)"),
        ("cuMemAlloc_v2", "cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (out of memory)"),
    ],
)
def test_a_worker_that_cannot_start_fails_with_the_drivers_reason(
    libdir: Path, tmp_path: Path, fail: str, error: str
) -> None:
    workload = tmp_path / "workload"
    done = run_check(
        libdir,
        FAKECUDA_FAIL=fail,
        FAKECUDA_WORKLOAD=str(workload),
        FAKENVML_WORKLOAD=str(workload),
    )
    assert done.returncode == 1
    report = report_of(done)
    assert report["worker"]["error"] == error
    assert report["checks"]["worker"] == {"passed": False, "stderr": "", "reason": error}
    assert failed(report) == CHECKS
    assert f"gpucheck --cuda: worker failed: {error}\n" in done.stderr
    assert done.stderr.count("gpucheck --cuda:") == 1
    # What it had taken before the failure (a context) it gave back.
    assert not workload.exists()


def test_host_pid_maps_through_nspid_and_the_pid_namespace(tmp_path: Path) -> None:
    def entry(host: int, nspid: str, namespace: str) -> None:
        (tmp_path / str(host) / "ns").mkdir(parents=True)
        (tmp_path / str(host) / "status").write_text(f"Name:\tx\nNSpid:\t{nspid}\n")
        (tmp_path / str(host) / "ns" / "pid").symlink_to(namespace)

    ours = "/proc/self/ns/pid"
    entry(900, "900\t17", ours)  # our PID 17, seen from the host
    entry(901, "901\t17", str(tmp_path / "gone"))  # PID 17 of another namespace
    entry(17, "17", str(tmp_path / "gone"))  # the host's own PID 17
    entry(902, "902\t18", ours)
    assert host_pid(tmp_path, 17) == 900
    assert host_pid(tmp_path, 18) == 902
    assert host_pid(tmp_path, 19) is None
    assert host_pid(tmp_path / "missing", 17) is None
    # In our own namespace, /proc gives a process its own PID.
    assert host_pid(Path("/proc"), os.getpid()) == os.getpid()


def test_memory_beyond_a_context_or_under_the_allocation_fails() -> None:
    allocated = 256 * MIB
    for used, passed in (
        (allocated + 300 * MIB, True),
        (allocated + CONTEXT_ALLOWANCE, True),
        (allocated + CONTEXT_ALLOWANCE + 1, False),
        (allocated - 1, False),
    ):
        seen = gpucheck._Seen(memory=used)
        assert gpucheck._memory(allocated, seen)["passed"] is passed, used


def test_the_process_check_names_a_foreign_pid_namespace() -> None:
    seen = gpucheck._Seen(others={31337})
    check = gpucheck._process({"pid": 17, "host_pid": 17}, seen)
    assert check["passed"] is False
    assert "PIDs [31337] came onto the card with it" in check["reason"]
    assert "--host-proc" in check["reason"]


@pytest.mark.parametrize("option", ["--cuda-seconds=0", "--cuda-mib=0", "--cuda-mib=-1"])
def test_bounds_must_be_positive(option: str) -> None:
    with pytest.raises(SystemExit) as raised:
        gpucheck.main(argv=["--cuda", option])
    assert raised.value.code == 2
