"""A fake ``libcuda.so.1`` (``libcuda.c`` here) that :mod:`agent.cudadriver` loads through ctypes.

:func:`build` compiles it into a folder, usually the one that holds the fake
NVML (:func:`testing.fakenvml.build`), so that :func:`testing.fakenvml.environ`
makes a child find both. With :data:`WORKLOAD_ENV` set for the CUDA process and
:data:`NVML_WORKLOAD_ENV` set to the same file for the NVML reader, card 0 of
the fake NVML lists the CUDA process, its memory and utilisation, and its
energy rises with every launch. The constants repeat the C file's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from testing import fakenvml

SOURCE: Final = Path(__file__).with_name("libcuda.c")
LIBRARY: Final = "libcuda.so.1"

WORKLOAD_ENV: Final = "FAKECUDA_WORKLOAD"
"""The file the fake libcuda describes its process in: "pid bytes launches last_launch_us"."""
NVML_WORKLOAD_ENV: Final = "FAKENVML_WORKLOAD"
"""The file the fake NVML reads card 0's extra process from."""
FAIL_ENV: Final = "FAKECUDA_FAIL"
"""The entry point to fail: ``cuInit`` (CUDA_ERROR_NO_DEVICE) or ``cuMemAlloc_v2`` (out of memory)."""

CONTEXT_BYTES: Final = 300 * fakenvml.MIB
"""What the primary context adds to the process's memory, on top of its allocation."""
UUID: Final = fakenvml.UUIDS[0]
"""Device 0 is card 0 of the fake NVML."""
ENERGY_PER_LAUNCH_J: Final = 1.0
"""What the fake NVML adds to card 0's energy per launch of the workload."""


def build(folder: Path) -> Path:
    """Compile the fake into ``folder/libcuda.so.1`` and return that path (raises as fakenvml's build)."""
    return fakenvml.compile_library(SOURCE, folder / LIBRARY)
