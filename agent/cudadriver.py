"""The few CUDA driver API calls that make a card busy, through ctypes, and the busy loop itself.

Why ctypes on ``libcuda.so.1``: the library ships with the driver, so a GPU
node that runs the agent can run this too; neither the CUDA toolkit nor a
framework (PyTorch, CuPy) is needed, and the agent image stays without them.
The kernel is PTX text, compiled by the driver's JIT when the module loads.

Only :mod:`agent.gpucheck`'s worker process imports this: the agent itself
never touches CUDA. Every signature below is the one ``cuda.h`` declares
(``CUresult`` is an int enum, ``CUdevice`` an int, ``CUdeviceptr`` an unsigned
64-bit integer, contexts, modules, functions and streams opaque pointers); the
versioned names (``cuMemAlloc_v2``, ``cuMemFree_v2``,
``cuDevicePrimaryCtxRelease_v2``, ``cuDeviceGetUuid_v2``) are the symbols that
``cuda.h``'s ``#define`` s bind the plain names to.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

LIBRARY: Final = "libcuda.so.1"

# The kernel: every thread spins on its SM's cycle counter for ``spin_cycles``
# cycles, then writes how many it spun to out[global thread index]. Written
# from what LLVM's NVPTX back end emits for the same kernel (llvmlite 0.50,
# LLVM 22, -mcpu=sm_52 +ptx60), parameters renamed. PTX ISA 6.0 (CUDA 9, drivers
# from R384) and target sm_52 (Maxwell): the driver JIT-compiles it for any
# newer card. %clock64 needs sm_20 and PTX 2.0.
KERNEL: Final = "spin"
PTX: Final = b"""\
.version 6.0
.target sm_52
.address_size 64

.visible .entry spin(
    .param .u64 spin_cycles,
    .param .u64 spin_out
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<5>;
    .reg .b64 %rd<9>;

    ld.param.b64 %rd4, [spin_cycles];
    ld.param.b64 %rd5, [spin_out];
    cvta.to.global.u64 %rd1, %rd5;
    mov.u64 %rd2, %clock64;
spin_loop:
    mov.u64 %rd6, %clock64;
    sub.s64 %rd3, %rd6, %rd2;
    setp.lt.u64 %p1, %rd3, %rd4;
    @%p1 bra spin_loop;
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mad.lo.s32 %r4, %r1, %r2, %r3;
    mul.wide.u32 %rd7, %r4, 8;
    add.s64 %rd8, %rd1, %rd7;
    st.global.b64 [%rd8], %rd3;
    ret;
}
"""

#: Blocks and threads per launch: 256 x 128 threads cover every SM of today's
#: largest cards (an H200 has 132) in one wave, so the card reads fully busy.
GRID: Final = 256
BLOCK: Final = 128
#: Cycles each thread spins per launch: 50M cycles are 25-50 ms at 1-2 GHz,
#: short enough that a stop is seen within a launch, long enough that the
#: launches' own cost is noise.
SPIN_CYCLES: Final = 50_000_000
#: Bytes the kernel writes: one 8-byte count per thread.
WRITTEN: Final = GRID * BLOCK * 8

_Result = ctypes.c_int
_Handle = ctypes.c_void_p
_DevicePtr = ctypes.c_uint64
_Uuid = ctypes.c_ubyte * 16


class CudaError(RuntimeError):
    """A CUDA driver call returned something other than CUDA_SUCCESS."""

    def __init__(self, call: str, code: int, name: str, text: str) -> None:
        """``call`` failed with ``code``, which the driver names ``name`` and explains as ``text``."""
        super().__init__(f"{call}: {name} ({text})")
        self.call = call
        self.code = code


# (name, argtypes) of every entry point used; restype is CUresult for all.
_SIGNATURES: Final[tuple[tuple[str, list[type]], ...]] = (
    ("cuGetErrorName", [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]),
    ("cuGetErrorString", [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]),
    ("cuInit", [ctypes.c_uint]),
    ("cuDeviceGet", [ctypes.POINTER(ctypes.c_int), ctypes.c_int]),
    ("cuDeviceGetUuid_v2", [ctypes.POINTER(_Uuid), ctypes.c_int]),
    ("cuDevicePrimaryCtxRetain", [ctypes.POINTER(_Handle), ctypes.c_int]),
    ("cuDevicePrimaryCtxRelease_v2", [ctypes.c_int]),
    ("cuCtxSetCurrent", [_Handle]),
    ("cuModuleLoadData", [ctypes.POINTER(_Handle), ctypes.c_char_p]),
    ("cuModuleGetFunction", [ctypes.POINTER(_Handle), _Handle, ctypes.c_char_p]),
    ("cuModuleUnload", [_Handle]),
    ("cuMemAlloc_v2", [ctypes.POINTER(_DevicePtr), ctypes.c_size_t]),
    ("cuMemFree_v2", [_DevicePtr]),
    (
        "cuLaunchKernel",
        [_Handle, *[ctypes.c_uint] * 7, _Handle, ctypes.POINTER(_Handle), ctypes.POINTER(_Handle)],
    ),
    ("cuCtxSynchronize", []),
)


class CudaDriver:
    """``libcuda.so.1`` with the signatures of the calls :func:`run` makes; each raises :class:`CudaError`."""

    def __init__(self, library: str = LIBRARY) -> None:
        """Load the library; OSError when it is absent (no driver, or not mounted into the container)."""
        self._lib = ctypes.CDLL(library)
        for name, argtypes in _SIGNATURES:
            try:
                function = getattr(self._lib, name)
            except AttributeError as exc:
                # cuDeviceGetUuid_v2, the newest call used, came with CUDA 11.4.
                raise OSError(f"{library} has no {name}: the driver predates R470") from exc
            function.argtypes = argtypes
            function.restype = _Result

    def _call(self, name: str, *args: object) -> None:
        code = int(getattr(self._lib, name)(*args))
        if code != 0:
            raise CudaError(
                name, code, self._text("cuGetErrorName", code), self._text("cuGetErrorString", code)
            )

    def _text(self, name: str, code: int) -> str:
        """The driver's name or description of ``code``; "unknown" when it has none."""
        text = ctypes.c_char_p()
        if getattr(self._lib, name)(code, ctypes.byref(text)) != 0 or text.value is None:
            return f"unknown CUresult {code}"
        return text.value.decode("utf-8", errors="replace")

    def init(self) -> None:
        """cuInit(0): the first call of any process."""
        self._call("cuInit", 0)

    def device(self, ordinal: int) -> int:
        """The CUdevice of ``ordinal`` (in CUDA's order, which CUDA_VISIBLE_DEVICES shapes)."""
        device = ctypes.c_int()
        self._call("cuDeviceGet", ctypes.byref(device), ordinal)
        return device.value

    def uuid(self, device: int) -> str:
        """The device's UUID as NVML spells it without its prefix (``8-4-4-4-12`` lowercase hex).

        The _v2 call gives a MIG instance's UUID in MIG mode, the card's otherwise.
        """
        raw = _Uuid()
        self._call("cuDeviceGetUuid_v2", ctypes.byref(raw), device)
        text = bytes(raw).hex()
        return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"

    def retain_primary(self, device: int) -> None:
        """Retain the device's primary context (the one the CUDA runtime uses) and make it current."""
        context = _Handle()
        self._call("cuDevicePrimaryCtxRetain", ctypes.byref(context), device)
        try:
            self._call("cuCtxSetCurrent", context)
        except CudaError:
            self.release_primary(device)
            raise

    def release_primary(self, device: int) -> None:
        """Release what :meth:`retain_primary` took."""
        self._call("cuDevicePrimaryCtxRelease_v2", device)

    def load(self, ptx: bytes, kernel: str) -> tuple[int, int]:
        """(module, function): ``ptx`` JIT-compiled into the current context and its ``kernel``."""
        module = _Handle()
        self._call("cuModuleLoadData", ctypes.byref(module), ptx)
        function = _Handle()
        try:
            self._call("cuModuleGetFunction", ctypes.byref(function), module, kernel.encode())
        except CudaError:
            self.unload(module.value or 0)
            raise
        return module.value or 0, function.value or 0

    def unload(self, module: int) -> None:
        """Unload a module :meth:`load` gave."""
        self._call("cuModuleUnload", _Handle(module))

    def alloc(self, size: int) -> int:
        """``size`` bytes of device memory; the 64-bit device address."""
        pointer = _DevicePtr()
        self._call("cuMemAlloc_v2", ctypes.byref(pointer), size)
        return pointer.value

    def free(self, pointer: int) -> None:
        """Free what :meth:`alloc` gave."""
        self._call("cuMemFree_v2", _DevicePtr(pointer))

    def launch_spin(self, function: int, cycles: int, out: int) -> None:
        """Queue one launch of :data:`KERNEL` (``GRID`` x ``BLOCK`` threads) on the default stream.

        kernelParams is an array of pointers, each to one argument's value
        (cuda.h); the values must stay alive until the call returns, which
        copies them.
        """
        values = (ctypes.c_uint64(cycles), ctypes.c_uint64(out))
        params = (_Handle * len(values))(*(ctypes.addressof(v) for v in values))
        self._call(
            "cuLaunchKernel", _Handle(function), GRID, 1, 1, BLOCK, 1, 1, 0, None, params, None
        )

    def synchronize(self) -> None:
        """Block until every launch queued in the current context has finished."""
        self._call("cuCtxSynchronize")


@dataclass(frozen=True, slots=True)
class Ready:
    """What :func:`run` reports once the card is busy: the device's UUID (no prefix) and the bytes held."""

    uuid: str
    allocated: int


def run(
    driver: CudaDriver,
    ordinal: int,
    size: int,
    seconds: float,
    stopped: Callable[[], bool],
    ready: Callable[[Ready], None],
) -> int:
    """Hold ``size`` bytes on device ``ordinal`` and launch the spin kernel back to back; the launches made.

    Stops when ``stopped()`` says so (asked between launches) or after
    ``seconds``, whichever comes first; ``ready`` is called once, after the
    first launch finished. Everything taken is given back before it returns or
    raises, so the process leaves the card as it found it.
    """
    driver.init()
    device = driver.device(ordinal)
    uuid = driver.uuid(device)
    allocated = max(size, WRITTEN)
    driver.retain_primary(device)
    try:
        module, function = driver.load(PTX, KERNEL)
        try:
            out = driver.alloc(allocated)
            try:
                done = Ready(uuid, allocated)
                return _spin(driver, function, out, seconds, stopped, lambda: ready(done))
            finally:
                driver.free(out)
        finally:
            driver.unload(module)
    finally:
        driver.release_primary(device)


def _spin(
    driver: CudaDriver,
    function: int,
    out: int,
    seconds: float,
    stopped: Callable[[], bool],
    started: Callable[[], None],
) -> int:
    deadline = time.monotonic() + seconds
    launches = 0
    while True:
        driver.launch_spin(function, SPIN_CYCLES, out)
        driver.synchronize()
        launches += 1
        if launches == 1:
            started()
        if stopped() or time.monotonic() >= deadline:
            return launches
