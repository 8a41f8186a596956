"""The REAL nvidia-ml-py binding against our fake ``libnvidia-ml.so.1`` (testing/fakenvml).

Why: the simulator (simulator/nvml.py) stands in for pynvml itself, so it can
only repeat what we believe about the binding. Here the binding's own ctypes
code runs: its symbol names and version suffixes must exist in the library,
and its struct classes must match the C layouts, or the values read back are
wrong. Each check runs in a child process whose LD_LIBRARY_PATH puts the fake
first (pynvml does ``CDLL("libnvidia-ml.so.1")`` once per process).

The binding checks run :func:`probe` once in a child and compare its JSON with
the constants of :mod:`testing.fakenvml`; the agent check runs
``python -m agent.gpucheck`` the same way.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from testing import fakenvml

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def libdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("fakenvml")
    fakenvml.build(folder)
    return folder


def run_python(libdir: Path, *args: str) -> str:
    """stdout of ``python ARGS`` with the fake first in LD_LIBRARY_PATH; its stderr on failure."""
    done = subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=fakenvml.environ(libdir),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"python {' '.join(args)} exited {done.returncode}:\n{done.stderr}"
    return done.stdout


# ---- the probe: runs in the child, through the real binding -----------------------------


def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args)``, or ``{"error": "NVMLError_X"}`` for an NVML error."""
    import pynvml  # type: ignore[import-untyped, unused-ignore]

    try:
        return fn(*args, **kwargs)
    except pynvml.NVMLError as exc:
        return {"error": type(exc).__name__}


def _processes(fn: Any, handle: Any) -> Any:
    found = _call(fn, handle)
    if isinstance(found, dict):
        return found
    return [[p.pid, p.usedGpuMemory, p.gpuInstanceId, p.computeInstanceId] for p in found]


def _samples(handle: Any, stamp: int) -> Any:
    import pynvml

    found = _call(pynvml.nvmlDeviceGetProcessUtilization, handle, stamp)
    if isinstance(found, dict):
        return found
    return [[s.pid, s.timeStamp, s.smUtil, s.memUtil, s.encUtil, s.decUtil] for s in found]


def _memory(handle: Any, **kwargs: Any) -> Any:
    import pynvml

    found = _call(pynvml.nvmlDeviceGetMemoryInfo, handle, **kwargs)
    if isinstance(found, dict):
        return found
    return {name: getattr(found, name) for name, _ in found._fields_}


def probe() -> None:
    """Print, as JSON, what the real binding reads from the library it loaded."""
    import pynvml as n

    out: dict[str, Any] = {"binding": importlib.metadata.version("nvidia-ml-py")}
    before_init = _call(n.nvmlDeviceGetCount)
    n.nvmlInit()
    out["before_init"] = before_init
    lib = n.nvmlLib
    lib.fakenvml_sizeof.restype = ctypes.c_size_t
    lib.fakenvml_sizeof.argtypes = [ctypes.c_char_p]
    classes = {
        "nvmlMemory_t": n.c_nvmlMemory_t,
        "nvmlMemory_v2_t": n.c_nvmlMemory_v2_t,
        "nvmlUtilization_t": n.c_nvmlUtilization_t,
        "nvmlProcessInfo_t": n.c_nvmlProcessInfo_v3_t,
        "nvmlProcessUtilizationSample_t": n.c_nvmlProcessUtilizationSample_t,
        "nvmlEventData_t": n.c_nvmlEventData_t,
        "nvmlDeviceAttributes_t": n.c_nvmlDeviceAttributes,
        "nvmlPciInfo_t": n.nvmlPciInfo_t,
    }
    out["sizes"] = {
        name: [lib.fakenvml_sizeof(name.encode()), ctypes.sizeof(cls)]
        for name, cls in classes.items()
    }
    out["driver"] = n.nvmlSystemGetDriverVersion()
    out["count"] = n.nvmlDeviceGetCount()
    out["bad_index"] = _call(n.nvmlDeviceGetHandleByIndex, 2)
    cards: list[dict[str, Any]] = []
    handles = [n.nvmlDeviceGetHandleByIndex(i) for i in range(out["count"])]
    for handle in handles:
        util = _call(n.nvmlDeviceGetUtilizationRates, handle)
        pci = _call(n.nvmlDeviceGetPciInfo, handle)
        card: dict[str, Any] = {
            "name": n.nvmlDeviceGetName(handle),
            "uuid": n.nvmlDeviceGetUUID(handle),
            "pci_bus_id": pci if isinstance(pci, dict) else pci.busId,
            "memory_v1": _memory(handle),
            "memory_v2": _memory(handle, version=n.nvmlMemory_v2),
            "utilization": util if isinstance(util, dict) else [util.gpu, util.memory],
            "temperature": n.nvmlDeviceGetTemperature(handle, n.NVML_TEMPERATURE_GPU),
            "temperature_v": _call(n.nvmlDeviceGetTemperatureV, handle, n.NVML_TEMPERATURE_GPU),
            "power": n.nvmlDeviceGetPowerUsage(handle),
            "compute": _processes(n.nvmlDeviceGetComputeRunningProcesses, handle),
            "graphics": _processes(n.nvmlDeviceGetGraphicsRunningProcesses, handle),
            "energy": _call(n.nvmlDeviceGetTotalEnergyConsumption, handle),
            "ecc": [
                _call(n.nvmlDeviceGetTotalEccErrors, handle, kind, counter)
                for kind in (
                    n.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                    n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                )
                for counter in (n.NVML_VOLATILE_ECC, n.NVML_AGGREGATE_ECC)
            ],
            "clocks_event_reasons": n.nvmlDeviceGetCurrentClocksEventReasons(handle),
            "clocks_throttle_reasons": n.nvmlDeviceGetCurrentClocksThrottleReasons(handle),
            "mig_mode": n.nvmlDeviceGetMigMode(handle),
            "is_mig": n.nvmlDeviceIsMigDeviceHandle(handle).value,
            "gpu_instance": _call(n.nvmlDeviceGetGpuInstanceId, handle),
            "max_mig": n.nvmlDeviceGetMaxMigDeviceCount(handle),
            "mig_0": _call(n.nvmlDeviceGetMigDeviceHandleByIndex, handle, 0),
        }
        first = _samples(handle, 0)
        card["samples"] = first
        if isinstance(first, list):
            stamps = [s[1] for s in first]
            card["samples_after_oldest"] = _samples(handle, min(stamps))
            card["samples_after_newest"] = _samples(handle, max(stamps))
        if not isinstance(card["mig_0"], dict):
            card["mig_0"] = "handle"
        cards.append(card)
    out["cards"] = cards

    migs: list[dict[str, Any]] = []
    for index in range(n.nvmlDeviceGetMaxMigDeviceCount(handles[1])):
        mig = _call(n.nvmlDeviceGetMigDeviceHandleByIndex, handles[1], index)
        if isinstance(mig, dict):
            migs.append(mig)
            continue
        parent = n.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
        attrs = n.nvmlDeviceGetAttributes(mig)
        migs.append(
            {
                "uuid": n.nvmlDeviceGetUUID(mig),
                "name": n.nvmlDeviceGetName(mig),
                "is_mig": n.nvmlDeviceIsMigDeviceHandle(mig).value,
                "parent_uuid": n.nvmlDeviceGetUUID(parent),
                "instance": [
                    n.nvmlDeviceGetGpuInstanceId(mig),
                    n.nvmlDeviceGetComputeInstanceId(mig),
                ],
                "multiprocessors": attrs.multiprocessorCount,
                "memory_size_mb": attrs.memorySizeMB,
                "memory_v2": _memory(mig, version=n.nvmlMemory_v2),
                "compute": _processes(n.nvmlDeviceGetComputeRunningProcesses, mig),
                "samples": _samples(mig, 0),
                "utilization": _call(n.nvmlDeviceGetUtilizationRates, mig),
            }
        )
    out["migs"] = migs

    events = n.nvmlEventSetCreate()
    n.nvmlDeviceRegisterEvents(handles[0], n.nvmlEventTypeXidCriticalError, events)
    n.nvmlDeviceRegisterEvents(handles[1], n.nvmlEventTypeXidCriticalError, events)
    waited: list[Any] = []
    for timeout_ms in (1000, 1, 1):  # the queued XID comes at once; then each wait times out
        data = _call(n.nvmlEventSetWait_v2, events, timeout_ms)
        if isinstance(data, dict):
            waited.append(data)
        else:
            waited.append(
                {
                    "uuid": n.nvmlDeviceGetUUID(data.device),
                    "type": data.eventType,
                    "xid": data.eventData,
                    "instance": [data.gpuInstanceId, data.computeInstanceId],
                }
            )
    out["events"] = waited
    out["register_other_types"] = _call(n.nvmlDeviceRegisterEvents, handles[0], 0x1, events)
    n.nvmlEventSetFree(events)
    n.nvmlShutdown()
    out["after_shutdown"] = _call(n.nvmlDeviceGetCount)
    print(json.dumps(out))


@pytest.fixture(scope="session")
def seen(libdir: Path) -> dict[str, Any]:
    code = f"import sys; sys.path[:0] = [{str(HERE)!r}, {str(ROOT)!r}]; import test_nvml_binding as t; t.probe()"
    found: dict[str, Any] = json.loads(run_python(libdir, "-c", code))
    return found


# ---- binding checks ----------------------------------------------------------------------

NOT_SUPPORTED = {"error": "NVMLError_NotSupported"}
NOT_FOUND = {"error": "NVMLError_NotFound"}


def test_the_child_loaded_our_library(seen: dict[str, Any]) -> None:
    assert seen["driver"] == fakenvml.DRIVER_VERSION


def test_struct_layouts_match_the_binding(seen: dict[str, Any]) -> None:
    for name, (ours, binding) in seen["sizes"].items():
        assert ours == binding, f"{name}: C sizeof {ours}, binding's ctypes sizeof {binding}"
    # _v3's struct has no usedGpuCcProtectedMemory in this binding (and in current nvml.h)
    assert seen["sizes"]["nvmlProcessInfo_t"] == [24, 24]


def test_init_count_and_shutdown(seen: dict[str, Any]) -> None:
    assert seen["before_init"] == {"error": "NVMLError_Uninitialized"}
    assert seen["count"] == fakenvml.CARD_COUNT
    assert seen["bad_index"] == {"error": "NVMLError_InvalidArgument"}
    assert seen["after_shutdown"] == {"error": "NVMLError_Uninitialized"}


def test_names_and_uuids(seen: dict[str, Any]) -> None:
    cards = seen["cards"]
    assert [c["name"] for c in cards] == list(fakenvml.NAMES)
    assert [c["uuid"] for c in cards] == list(fakenvml.UUIDS)
    for uuid in [*fakenvml.UUIDS, *fakenvml.MIG_UUIDS]:
        assert len(uuid) == 40
        assert len(uuid.split("-", 1)[1]) == 36
    assert [c["pci_bus_id"] for c in cards] == ["00000000:18:00.0", "00000000:3B:00.0"]


def test_memory_v1_and_v2(seen: dict[str, Any]) -> None:
    for i, card in enumerate(seen["cards"]):
        total, reserved, used = (
            fakenvml.MEMORY_TOTAL[i],
            fakenvml.MEMORY_RESERVED[i],
            fakenvml.MEMORY_USED_V2[i],
        )
        assert card["memory_v1"] == {
            "total": total,
            "free": total - reserved - used,
            "used": used + reserved,
        }
        assert card["memory_v2"] == {
            "version": 0x02000028,
            "total": total,
            "reserved": reserved,
            "free": total - reserved - used,
            "used": used,
        }


def test_device_readings(seen: dict[str, Any]) -> None:
    card0, card1 = seen["cards"]
    assert card0["utilization"] == list(fakenvml.UTILIZATION)
    assert card1["utilization"] == NOT_SUPPORTED
    assert [c["temperature"] for c in seen["cards"]] == list(fakenvml.TEMPERATURE_C)
    assert [c["power"] for c in seen["cards"]] == list(fakenvml.POWER_MW)


def test_a_missing_symbol_raises_function_not_found(seen: dict[str, Any]) -> None:
    for card in seen["cards"]:
        assert card["temperature_v"] == {"error": "NVMLError_FunctionNotFound"}


def test_process_lists_read_back_field_by_field(seen: dict[str, Any]) -> None:
    card0, card1 = seen["cards"]

    def listed(table: dict[int, tuple[int, int, int]]) -> list[list[int]]:
        return [[pid, *fields] for pid, fields in table.items()]

    assert card0["compute"] == listed(fakenvml.CARD0_COMPUTE)
    assert card0["graphics"] == listed(fakenvml.CARD0_GRAPHICS)
    assert card1["compute"] == listed(fakenvml.CARD1_COMPUTE)
    assert card1["graphics"] == []


def test_process_utilisation_twice(seen: dict[str, Any]) -> None:
    card0, card1 = seen["cards"]
    samples = card0["samples"]
    assert [[s[0], s[2]] for s in samples] == [[pid, sm] for pid, _, sm in fakenvml.CARD0_SAMPLES]
    stamps = [s[1] for s in samples]
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    ages = [age for _, age, _ in fakenvml.CARD0_SAMPLES]
    assert gaps == [a - b for a, b in itertools.pairwise(ages)]
    assert card0["samples_after_oldest"] == samples[1:]
    assert card0["samples_after_newest"] == NOT_FOUND
    assert card1["samples"] == NOT_SUPPORTED


def test_energy_ecc_and_clock_events(seen: dict[str, Any]) -> None:
    card0, card1 = seen["cards"]
    assert card0["energy"] == fakenvml.ENERGY_MJ
    assert card1["energy"] == NOT_SUPPORTED
    corrected_volatile, corrected_aggregate, uncorrected_volatile, uncorrected_aggregate = card0[
        "ecc"
    ]
    assert (corrected_aggregate, uncorrected_aggregate) == fakenvml.ECC_AGGREGATE
    assert (corrected_volatile, uncorrected_volatile) == fakenvml.ECC_VOLATILE
    assert card1["ecc"] == [NOT_SUPPORTED] * 4
    for i, card in enumerate(seen["cards"]):
        assert card["clocks_event_reasons"] == fakenvml.CLOCKS_EVENT_REASONS[i]
        assert card["clocks_throttle_reasons"] == fakenvml.CLOCKS_EVENT_REASONS[i]


def test_mig(seen: dict[str, Any]) -> None:
    card0, card1 = seen["cards"]
    assert card0["mig_mode"] == [0, 0]
    assert card1["mig_mode"] == [1, 1]
    assert [card0["is_mig"], card1["is_mig"]] == [0, 0]
    assert card0["gpu_instance"] == NOT_SUPPORTED
    assert card0["mig_0"] == NOT_FOUND
    assert card1["mig_0"] == "handle"
    assert card1["max_mig"] == fakenvml.MAX_MIG_DEVICES
    migs = seen["migs"]
    assert migs[2:] == [NOT_FOUND] * (fakenvml.MAX_MIG_DEVICES - 2)
    for i, mig in enumerate(migs[:2]):
        assert mig["uuid"] == fakenvml.MIG_UUIDS[i]
        assert mig["name"] == fakenvml.MIG_NAME
        assert mig["is_mig"] == 1
        assert mig["parent_uuid"] == fakenvml.UUIDS[1]
        assert mig["instance"] == list(fakenvml.MIG_INSTANCES[i])
        assert mig["multiprocessors"] == fakenvml.MIG_MULTIPROCESSORS
        assert mig["memory_size_mb"] * fakenvml.MIB == fakenvml.MIG_MEMORY_TOTAL
        assert mig["memory_v2"]["total"] == fakenvml.MIG_MEMORY_TOTAL
        assert mig["memory_v2"]["used"] == fakenvml.MIG_MEMORY_USED[i]
        assert mig["samples"] == NOT_SUPPORTED
        assert mig["utilization"] == NOT_SUPPORTED
    assert migs[0]["compute"] == [[pid, *f] for pid, f in fakenvml.MIG0_COMPUTE.items()]
    assert migs[1]["compute"] == []


def test_one_xid_then_timeout(seen: dict[str, Any]) -> None:
    xid, *after = seen["events"]
    assert xid == {
        "uuid": fakenvml.UUIDS[fakenvml.XID_CARD],
        "type": 0x8,
        "xid": fakenvml.XID,
        "instance": [fakenvml.NO_INSTANCE, fakenvml.NO_INSTANCE],
    }
    assert after == [{"error": "NVMLError_Timeout"}] * 2
    assert seen["register_other_types"] == NOT_SUPPORTED


# ---- the agent, end to end through the binding ----------------------------------------


@pytest.fixture(scope="session")
def gpucheck(libdir: Path) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(
        run_python(libdir, "-m", "agent.gpucheck", "--events-seconds", "0.5")
    )
    return report


def test_gpucheck_reads_both_cards(gpucheck: dict[str, Any]) -> None:
    cards = gpucheck["cards"]
    assert [(c["index"], c["uuid"], c["name"]) for c in cards] == [
        (i, fakenvml.UUIDS[i], fakenvml.NAMES[i]) for i in range(fakenvml.CARD_COUNT)
    ]
    assert gpucheck["driver_version"] == fakenvml.DRIVER_VERSION
    # nvmlDeviceGetTemperatureV is missing from the library: the legacy call still answers
    assert [c["temperature"] for c in cards] == [float(t) for t in fakenvml.TEMPERATURE_C]
    assert cards[0]["memory_total"] == fakenvml.MEMORY_TOTAL[0]
    # Every call the agent made found its symbol and read its struct: the only
    # failures are what card 1 (MIG on) really lacks.
    assert gpucheck["last_error"], "card 1 answers NOT_SUPPORTED for some readings"
    for key, text in gpucheck["last_error"].items():
        assert text.startswith("NVMLError_NotSupported"), f"{key}: {text}"


def test_gpucheck_energy_ecc_and_clock_events(gpucheck: dict[str, Any]) -> None:
    assert gpucheck["energy_j"] == {"0": fakenvml.ENERGY_MJ / 1000, "1": None}
    assert gpucheck["energy_j"]["0"] == 123456.789
    corrected, uncorrected = fakenvml.ECC_AGGREGATE
    assert gpucheck["ecc"] == {
        "0": {"corrected": corrected, "uncorrected": uncorrected},
        "1": {"corrected": None, "uncorrected": None},
    }
    assert gpucheck["clock_events"]["0"]["bitmask"] == fakenvml.CLOCKS_EVENT_REASONS[0]


def test_gpucheck_processes(gpucheck: dict[str, Any]) -> None:
    card0, card1 = fakenvml.UUIDS
    mig0 = fakenvml.MIG_UUIDS[0]
    found = sorted(
        (p["device"], p["card"], p["pid"], p["memory"], p["sm"]) for p in gpucheck["processes"]
    )
    expected = [
        (card0, card0, pid, memory, fakenvml.CARD0_SM[pid])
        for pid, (memory, _, _) in fakenvml.CARD0_COMPUTE.items()
    ] + [(mig0, card1, pid, memory, None) for pid, (memory, _, _) in fakenvml.MIG0_COMPUTE.items()]
    # 4242 is in both of card 0's lists and is one process; MIG instances have no sm
    assert found == sorted(expected)


def test_gpucheck_mig_instances(gpucheck: dict[str, Any]) -> None:
    assert gpucheck["mig"]["0"] == []
    found = [
        (m["uuid"], m["gpu_instance_id"], m["compute_instance_id"], m["profile"], m["memory_total"])
        for m in gpucheck["mig"]["1"]
    ]
    assert found == [
        (uuid, gi, ci, "3g.40gb", fakenvml.MIG_MEMORY_TOTAL)
        for uuid, (gi, ci) in zip(fakenvml.MIG_UUIDS, fakenvml.MIG_INSTANCES, strict=True)
    ]


def test_gpucheck_counts_the_xid_once(gpucheck: dict[str, Any]) -> None:
    events = gpucheck["events"]
    assert events["reason"] is None
    assert events["xid_errors"] == {fakenvml.UUIDS[fakenvml.XID_CARD]: {str(fakenvml.XID): 1}}
