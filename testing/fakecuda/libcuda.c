/*
 * A fake libcuda.so.1: the CUDA driver API entry points agent/cudadriver.py
 * calls, declared as cuda.h declares them, for one device. It lets the real
 * ctypes wrapper run without a GPU, and it checks what it is handed the way
 * the driver does (a NULL out-pointer, an unknown handle, a call before cuInit
 * or without a current context) plus what only a card would notice later: a
 * 64-bit device address cut to 32 bits, kernel arguments passed by value
 * instead of by pointer, a grid that writes past the allocation.
 *
 * Build:  cc -shared -fPIC -O1 -Wall -Werror -o libcuda.so.1 libcuda.c
 *         (testing.fakecuda.build does this, beside the fake NVML, so that one
 *         LD_LIBRARY_PATH serves both).
 *
 * The device: ordinal 0, whose UUID is card 0's of testing/fakenvml
 * (GPU-11111111-1111-1111-1111-111111111111). It has no SMs: a launch of the
 * spin kernel "runs" cycles / CLOCK_HZ seconds, which cuCtxSynchronize sleeps,
 * as the real call blocks. The one kernel it knows is spin(u64 cycles, u64 out)
 * whose threads each write 8 bytes at out + 8 * (global thread index).
 *
 * Environment:
 *   FAKECUDA_WORKLOAD  a file this process keeps describing itself in, for the
 *                      fake NVML's FAKENVML_WORKLOAD: one line "pid bytes
 *                      launches last_launch_us", bytes being CONTEXT_BYTES
 *                      plus the live allocation; rewritten (write, rename) on
 *                      every change, removed when the primary context is
 *                      released.
 *   FAKECUDA_FAIL      the name of one entry point that then fails as the
 *                      driver would: cuInit with CUDA_ERROR_NO_DEVICE,
 *                      cuMemAlloc_v2 with CUDA_ERROR_OUT_OF_MEMORY.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* ---- cuda.h's types and codes ------------------------------------------------- */

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr; /* CUdeviceptr_v2 on a 64-bit build */
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUuuid_st {
    char bytes[16];
} CUuuid;

_Static_assert(sizeof(CUdeviceptr) == 8, "CUdeviceptr is 64-bit");
_Static_assert(sizeof(CUuuid) == 16, "CUuuid");

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_INVALID_PTX = 218,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_FOUND = 500,
};

/* ---- the device ------------------------------------------------------------------ */

#define MIB (1024ull * 1024ull)
#define CONTEXT_BYTES (300ull * MIB) /* what a context adds to the process's memory */
#define CLOCK_HZ 1000000000ull       /* the SM clock a launch's cycles are counted in */
#define MAX_THREADS_PER_BLOCK 1024u
/* Above 4 GiB, so a wrapper that cuts a CUdeviceptr to 32 bits hands back another one. */
#define ALLOCATION_BASE 0x7f3a00000000ull

static const char UUID[16] = {0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11,
                              0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11};

struct CUctx_st {
    int device;
};
struct CUmod_st {
    char *ptx; /* NULL: not loaded */
};
struct CUfunc_st {
    CUmodule module;
};

static struct CUctx_st CONTEXT;
static struct CUmod_st MODULE; /* one module at a time is all the wrapper needs */
static struct CUfunc_st FUNCTION;

static int initialized;
static unsigned int retained;
static CUcontext current;
static unsigned long long allocated; /* bytes at ALLOCATION_BASE; 0: none */
static unsigned long long launches, last_launch_us, pending_cycles;

static int failing(const char *name) {
    const char *fail = getenv("FAKECUDA_FAIL");
    return fail != NULL && strcmp(fail, name) == 0;
}

static unsigned long long now_us(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (unsigned long long)tv.tv_sec * 1000000ull + (unsigned long long)tv.tv_usec;
}

/* Rewrite FAKECUDA_WORKLOAD whole (a reader never sees half a line). */
static void publish(void) {
    const char *path = getenv("FAKECUDA_WORKLOAD");
    if (path == NULL)
        return;
    char temporary[4096];
    snprintf(temporary, sizeof temporary, "%s.%d", path, (int)getpid());
    FILE *file = fopen(temporary, "w");
    if (file == NULL)
        return;
    fprintf(file, "%d %llu %llu %llu\n", (int)getpid(), CONTEXT_BYTES + allocated, launches,
            last_launch_us);
    fclose(file);
    rename(temporary, path);
}

static void withdraw(void) {
    const char *path = getenv("FAKECUDA_WORKLOAD");
    if (path != NULL)
        unlink(path);
}

#define NEEDS_INIT()                               \
    do {                                           \
        if (!initialized)                          \
            return CUDA_ERROR_NOT_INITIALIZED;     \
    } while (0)

#define NEEDS_CONTEXT()                            \
    do {                                           \
        NEEDS_INIT();                              \
        if (current == NULL)                       \
            return CUDA_ERROR_INVALID_CONTEXT;     \
    } while (0)

/* ---- errors ------------------------------------------------------------------------ */

static const char *name_of(CUresult error, int description) {
    switch (error) {
    case CUDA_SUCCESS: return description ? "no error" : "CUDA_SUCCESS";
    case CUDA_ERROR_INVALID_VALUE: return description ? "invalid argument" : "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_OUT_OF_MEMORY: return description ? "out of memory" : "CUDA_ERROR_OUT_OF_MEMORY";
    case CUDA_ERROR_NOT_INITIALIZED: return description ? "initialization error" : "CUDA_ERROR_NOT_INITIALIZED";
    case CUDA_ERROR_NO_DEVICE: return description ? "no CUDA-capable device is detected" : "CUDA_ERROR_NO_DEVICE";
    case CUDA_ERROR_INVALID_DEVICE: return description ? "invalid device ordinal" : "CUDA_ERROR_INVALID_DEVICE";
    case CUDA_ERROR_INVALID_CONTEXT: return description ? "invalid device context" : "CUDA_ERROR_INVALID_CONTEXT";
    case CUDA_ERROR_INVALID_PTX: return description ? "a PTX JIT compilation failed" : "CUDA_ERROR_INVALID_PTX";
    case CUDA_ERROR_INVALID_HANDLE: return description ? "invalid resource handle" : "CUDA_ERROR_INVALID_HANDLE";
    case CUDA_ERROR_NOT_FOUND: return description ? "named symbol not found" : "CUDA_ERROR_NOT_FOUND";
    default: return NULL;
    }
}

/* An unknown code: *pStr = NULL and CUDA_ERROR_INVALID_VALUE, as the driver answers. */
CUresult cuGetErrorName(CUresult error, const char **pStr) {
    if (pStr == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *pStr = name_of(error, 0);
    return *pStr == NULL ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult error, const char **pStr) {
    if (pStr == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *pStr = name_of(error, 1);
    return *pStr == NULL ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

/* ---- init, device, context ------------------------------------------------------------ */

CUresult cuInit(unsigned int Flags) {
    if (failing("cuInit"))
        return CUDA_ERROR_NO_DEVICE;
    if (Flags != 0) /* cuda.h: "Flags parameter should be 0" */
        return CUDA_ERROR_INVALID_VALUE;
    initialized = 1;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    NEEDS_INIT();
    if (device == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (ordinal != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    *device = 0;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev) {
    NEEDS_INIT();
    if (uuid == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    memcpy(uuid->bytes, UUID, sizeof UUID);
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
    NEEDS_INIT();
    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    retained++;
    *pctx = &CONTEXT;
    publish();
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
    NEEDS_INIT();
    if (dev != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    if (retained == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (--retained == 0) {
        current = NULL;
        withdraw();
    }
    return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
    NEEDS_INIT();
    if (ctx != NULL && (ctx != &CONTEXT || retained == 0))
        return CUDA_ERROR_INVALID_CONTEXT;
    current = ctx;
    return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize(void) {
    NEEDS_CONTEXT();
    unsigned long long ns = pending_cycles * (1000000000ull / CLOCK_HZ);
    struct timespec left = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    while (nanosleep(&left, &left) != 0)
        ;
    pending_cycles = 0;
    return CUDA_SUCCESS;
}

/* ---- modules ------------------------------------------------------------------------------ */

/* What the JIT would refuse first: not PTX text, or PTX for another address size. */
static int looks_like_ptx(const char *text) {
    while (*text == ' ' || *text == '\t' || *text == '\n')
        text++;
    return strncmp(text, ".version ", 9) == 0 && strstr(text, "\n.target sm_") != NULL &&
           strstr(text, "\n.address_size 64\n") != NULL;
}

CUresult cuModuleLoadData(CUmodule *module, const void *image) {
    NEEDS_CONTEXT();
    if (module == NULL || image == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (MODULE.ptx != NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (!looks_like_ptx(image))
        return CUDA_ERROR_INVALID_PTX;
    MODULE.ptx = strdup(image);
    *module = &MODULE;
    return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
    NEEDS_CONTEXT();
    if (hfunc == NULL || name == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (hmod != &MODULE || MODULE.ptx == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    char entry[256];
    snprintf(entry, sizeof entry, ".visible .entry %s(", name);
    if (strstr(MODULE.ptx, entry) == NULL)
        return CUDA_ERROR_NOT_FOUND;
    FUNCTION.module = hmod;
    *hfunc = &FUNCTION;
    return CUDA_SUCCESS;
}

CUresult cuModuleUnload(CUmodule hmod) {
    NEEDS_CONTEXT();
    if (hmod != &MODULE || MODULE.ptx == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    free(MODULE.ptx);
    MODULE.ptx = NULL;
    FUNCTION.module = NULL;
    return CUDA_SUCCESS;
}

/* ---- memory ----------------------------------------------------------------------------------- */

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
    NEEDS_CONTEXT();
    if (dptr == NULL || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (failing("cuMemAlloc_v2") || allocated != 0) /* one allocation at a time */
        return CUDA_ERROR_OUT_OF_MEMORY;
    allocated = bytesize;
    *dptr = ALLOCATION_BASE;
    publish();
    return CUDA_SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr dptr) {
    NEEDS_CONTEXT();
    if (allocated == 0 || dptr != ALLOCATION_BASE)
        return CUDA_ERROR_INVALID_VALUE;
    allocated = 0;
    publish();
    return CUDA_SUCCESS;
}

/* ---- launches ----------------------------------------------------------------------------------- */

/* spin(u64 cycles, u64 out): kernelParams[i] points at argument i's value (cuda.h). */
CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                        unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                        unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                        void **kernelParams, void **extra) {
    NEEDS_CONTEXT();
    if (f != &FUNCTION || FUNCTION.module == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (hStream != NULL) /* the default stream is all the wrapper uses */
        return CUDA_ERROR_INVALID_HANDLE;
    unsigned long long threads_per_block = (unsigned long long)blockDimX * blockDimY * blockDimZ;
    unsigned long long blocks = (unsigned long long)gridDimX * gridDimY * gridDimZ;
    if (blocks == 0 || threads_per_block == 0 || threads_per_block > MAX_THREADS_PER_BLOCK ||
        sharedMemBytes != 0 || kernelParams == NULL || extra != NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (kernelParams[0] == NULL || kernelParams[1] == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned long long cycles = *(const unsigned long long *)kernelParams[0];
    unsigned long long out = *(const unsigned long long *)kernelParams[1];
    unsigned long long written = blocks * threads_per_block * 8ull;
    /* On a card these would fault at the next synchronize (an illegal address). */
    if (cycles == 0 || allocated == 0 || out != ALLOCATION_BASE || written > allocated)
        return CUDA_ERROR_INVALID_VALUE;
    pending_cycles += cycles;
    launches++;
    last_launch_us = now_us();
    publish();
    return CUDA_SUCCESS;
}
