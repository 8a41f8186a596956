"""A fake ``libnvidia-ml.so.1`` (``libnvidia-ml.c`` here) that the real nvidia-ml-py loads.

:func:`build` compiles it into a folder, :func:`environ` gives a child process
the environment that makes ``CDLL("libnvidia-ml.so.1")`` find it there. The
constants below describe the machine it answers for; they repeat the C file's
tables so that tests compare against one source (and a test checks the two
agree through the binding).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Final

SOURCE: Final = Path(__file__).with_name("libnvidia-ml.c")
LIBRARY: Final = "libnvidia-ml.so.1"

MIB: Final = 1024**2
GIB: Final = 1024**3
NO_INSTANCE: Final = 0xFFFFFFFF
"""gpuInstanceId / computeInstanceId of a process when MIG is off."""

DRIVER_VERSION: Final = "570.86.15"
CARD_COUNT: Final = 2
MAX_MIG_DEVICES: Final = 7

UUIDS: Final = (
    "GPU-11111111-1111-1111-1111-111111111111",
    "GPU-22222222-2222-2222-2222-222222222222",
)
NAMES: Final = ("NVIDIA H200", "NVIDIA A100-SXM4-80GB")

MEMORY_TOTAL: Final = (143771 * MIB, 81920 * MIB)
MEMORY_RESERVED: Final = (512 * MIB, 512 * MIB)
MEMORY_USED_V2: Final = (10240 * MIB, 6144 * MIB)
"""v2's ``used``; v1's ``used`` adds the reserved memory (nvml.h), so both free the same."""

UTILIZATION: Final = (73, 41)
"""Card 0's (gpu, memory) percent; card 1 (MIG on) answers NOT_SUPPORTED."""
TEMPERATURE_C: Final = (45, 38)
POWER_MW: Final = (350000, 90000)
ENERGY_MJ: Final = 123456789
"""Card 0's total energy in mJ; card 1 answers NOT_SUPPORTED."""
ECC_AGGREGATE: Final = (7, 1)
"""Card 0's (corrected, uncorrected) aggregate counts; card 1 answers NOT_SUPPORTED."""
ECC_VOLATILE: Final = (3, 0)
CLOCKS_EVENT_REASONS: Final = (0x4 | 0x40, 0x1)
"""SwPowerCap | HwThermalSlowdown on card 0, GpuIdle on card 1."""

# pid -> (usedGpuMemory, gpuInstanceId, computeInstanceId)
CARD0_COMPUTE: Final = {
    4242: (8 * GIB, NO_INSTANCE, NO_INSTANCE),
    4343: (2 * GIB, NO_INSTANCE, NO_INSTANCE),
}
CARD0_GRAPHICS: Final = {4242: (8 * GIB, NO_INSTANCE, NO_INSTANCE)}
CARD1_COMPUTE: Final = {5151: (6 * GIB, 1, 0)}

CARD0_SAMPLES: Final = (
    (4242, 600_000, 50),
    (4343, 400_000, 30),
    (4242, 200_000, 60),
)
"""Card 0's per-process utilisation samples, oldest first: (pid, µs before the first
nvmlInit, smUtil). Card 1 and MIG devices answer NOT_SUPPORTED."""
CARD0_SM: Final = {4242: 55.0, 4343: 30.0}
"""The mean smUtil per pid over :data:`CARD0_SAMPLES`."""

MIG_UUIDS: Final = (
    "MIG-33333333-3333-3333-3333-333333333301",
    "MIG-33333333-3333-3333-3333-333333333302",
)
MIG_NAME: Final = "NVIDIA A100-SXM4-80GB MIG 3g.40gb"
MIG_INSTANCES: Final = ((1, 0), (2, 0))
"""(gpuInstanceId, computeInstanceId) of card 1's MIG devices 0 and 1."""
MIG_MEMORY_TOTAL: Final = 40192 * MIB
MIG_MEMORY_USED: Final = (6144 * MIB, 0)
MIG_MULTIPROCESSORS: Final = 42
MIG0_COMPUTE: Final = {5151: (6 * GIB, 1, 0)}

XID_CARD: Final = 0
XID: Final = 79
"""The one critical XID event queued on card 0 (once per process, then TIMEOUT)."""

MISSING_SYMBOL: Final = "nvmlDeviceGetTemperatureV"
"""Deliberately not exported: the binding raises NVMLError_FunctionNotFound for it."""


class CompilerNotFound(RuntimeError):
    """No C compiler to build the fake library with."""


def build(folder: Path) -> Path:
    """Compile the fake into ``folder/libnvidia-ml.so.1`` and return that path.

    Uses ``$CC`` if set, else ``cc``; raises :class:`CompilerNotFound` naming it
    when it is not on PATH, and RuntimeError with the compiler's output when
    the compile fails.
    """
    return compile_library(SOURCE, folder / LIBRARY)


def compile_library(source: Path, out: Path) -> Path:
    """Compile one C file into the shared library ``out`` (its folder made); ``out``.

    Raises as :func:`build` says; :mod:`testing.fakecuda` builds with it too.
    """
    compiler = os.environ.get("CC") or "cc"
    if shutil.which(compiler) is None:
        raise CompilerNotFound(f"C compiler {compiler!r} not found on PATH: set CC or install gcc")
    out.parent.mkdir(parents=True, exist_ok=True)
    command = [compiler, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o", str(out), str(source)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr}")
    return out


def environ(folder: Path) -> dict[str, str]:
    """This process's environment with ``folder`` first in LD_LIBRARY_PATH."""
    env = dict(os.environ)
    previous = env.get("LD_LIBRARY_PATH")
    env["LD_LIBRARY_PATH"] = str(folder) if not previous else f"{folder}{os.pathsep}{previous}"
    return env
