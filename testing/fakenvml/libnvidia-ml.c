/*
 * A fake libnvidia-ml.so.1: the NVML entry points the agent uses, answering
 * for one fixed, described machine, so that the REAL nvidia-ml-py binding
 * (ctypes) can be loaded against it and every struct layout and version
 * suffix it assumes is exercised by C code laid out as NVML's header says.
 *
 * Build:  cc -shared -fPIC -O1 -Wall -Werror -o libnvidia-ml.so.1 libnvidia-ml.c
 *         (testing.fakenvml.build does this); load it by putting its folder
 *         first in LD_LIBRARY_PATH: pynvml does CDLL("libnvidia-ml.so.1").
 *
 * The machine (values live in the tables below; testing/fakenvml/__init__.py
 * repeats them as Python constants and tests/integration/test_nvml_binding.py checks the
 * two agree through the binding):
 *
 *   card 0  GPU-11111111-1111-1111-1111-111111111111  "NVIDIA H200", MIG off.
 *           compute processes 4242 (8 GiB) and 4343 (2 GiB); graphics
 *           process 4242 again (the same process in both lists, as a driver
 *           reports a process with both contexts), gpu/compute instance ids
 *           0xFFFFFFFF (no MIG). Three per-process utilisation samples,
 *           stamped relative to the first nvmlInit (see SAMPLES); energy
 *           123456789 mJ; ECC aggregate corrected 7 / uncorrected 1 (volatile
 *           3 / 0); clocks-event reasons SwPowerCap|HwThermalSlowdown
 *           (0x4|0x40); one XID 79 waiting for the first event set that
 *           registers card 0 for critical XIDs (once per process; after it,
 *           nvmlEventSetWait_v2 blocks for its timeout, as a driver does with
 *           nothing to report, then answers NVML_ERROR_TIMEOUT).
 *   card 1  GPU-22222222-2222-2222-2222-222222222222  "NVIDIA A100-SXM4-80GB",
 *           MIG on with two 3g.40gb instances: MIG device 0 = gpu instance 1 /
 *           compute instance 0, MIG device 1 = gpu instance 2 / compute
 *           instance 0. One compute process, 5151, on MIG device 0 (the
 *           parent handle lists it too, with its instance ids, as NVML's
 *           aggregate view does). Energy, ECC, device and per-process
 *           utilisation: NVML_ERROR_NOT_SUPPORTED (as on a MIG-enabled A100).
 *
 * Struct layouts follow nvml.h and agree with nvidia-ml-py 13.615.71's
 * ctypes definitions; the _Static_asserts pin the sizes and fakenvml_sizeof()
 * lets the test compare each with ctypes.sizeof of the binding's class.
 * Note on the process lists: nvmlDeviceGet{Compute,Graphics}RunningProcesses_v3
 * fill nvmlProcessInfo_t. Only the 535.54-era header (CUDA 12.2 GA) gave that
 * struct a fifth field, usedGpuCcProtectedMemory (32 bytes); later headers and
 * drivers moved that field to nvmlProcessDetail_v1_t and _v3 writes the
 * 24-byte {pid, usedGpuMemory, gpuInstanceId, computeInstanceId}, which is
 * what the binding allocates (c_nvmlProcessInfo_v3_t = c_nvmlProcessInfo_v2_t).
 * The fake writes the 24-byte layout.
 *
 * One test hook, not NVML: with FAKENVML_WORKLOAD naming a file, card 0 also
 * runs the process that file describes ("pid bytes launches last_launch_us",
 * kept by testing/fakecuda's libcuda for agent.gpucheck --cuda) while it
 * exists: one more compute process of that many bytes, one per-process
 * utilisation sample of it (smUtil 100) stamped at its last launch, and 1 J
 * more energy per launch. Without the variable nothing changes.
 *
 * Deliberately NOT exported: nvmlDeviceGetTemperatureV (so the binding raises
 * NVMLError_FunctionNotFound, as with a pre-R565 driver, and a caller must
 * survive it), and everything not listed here. Anything exported but not
 * meaningful for a handle answers NVML_ERROR_NOT_SUPPORTED, as a driver does.
 */

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

/* ---- NVML's types, as nvml.h lays them out -------------------------------- */

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
};

#define NVML_STRUCT_VERSION(size, ver) ((unsigned int)(size) | ((unsigned int)(ver) << 24))
#define NO_INSTANCE 0xFFFFFFFFu /* gpu/compute instance id when MIG is off */
#define EVENT_XID_CRITICAL 0x8ull /* nvmlEventTypeXidCriticalError */

typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct nvmlEventSet_st *nvmlEventSet_t;

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
#define nvmlMemory_v2 NVML_STRUCT_VERSION(sizeof(nvmlMemory_v2_t), 2)

typedef struct {
    unsigned int gpu, memory;
} nvmlUtilization_t;

typedef struct { /* what _v3 fills; see the note above */
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

typedef struct {
    unsigned int pid;
    unsigned long long timeStamp; /* CPU timestamp in microseconds */
    unsigned int smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;

typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData; /* the XID for XID events */
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlEventData_t;

typedef struct {
    unsigned int multiprocessorCount, sharedCopyEngineCount, sharedDecoderCount,
        sharedEncoderCount, sharedJpegCount, sharedOfaCount, gpuInstanceSliceCount,
        computeInstanceSliceCount;
    unsigned long long memorySizeMB;
} nvmlDeviceAttributes_t;

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

_Static_assert(sizeof(nvmlMemory_t) == 24, "nvmlMemory_t");
_Static_assert(sizeof(nvmlMemory_v2_t) == 40, "nvmlMemory_v2_t");
_Static_assert(nvmlMemory_v2 == 0x02000028, "nvmlMemory_v2");
_Static_assert(sizeof(nvmlUtilization_t) == 8, "nvmlUtilization_t");
_Static_assert(sizeof(nvmlProcessInfo_t) == 24, "nvmlProcessInfo_t");
_Static_assert(offsetof(nvmlProcessInfo_t, usedGpuMemory) == 8, "usedGpuMemory");
_Static_assert(sizeof(nvmlProcessUtilizationSample_t) == 32, "nvmlProcessUtilizationSample_t");
_Static_assert(sizeof(nvmlEventData_t) == 32, "nvmlEventData_t");
_Static_assert(sizeof(nvmlDeviceAttributes_t) == 40, "nvmlDeviceAttributes_t");
_Static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t");

/* ---- the machine ------------------------------------------------------------ */

#define MIB (1024ull * 1024ull)
#define GIB (1024ull * MIB)
#define MAX_MIG_DEVICES 7

typedef struct {
    unsigned int pid;
    unsigned long long memory;
    unsigned int gpu_instance, compute_instance;
} Process;

typedef struct {
    unsigned int pid;
    unsigned long long before_init_us; /* stamp = first nvmlInit time - this */
    unsigned int sm, mem, enc, dec;
} Sample;

struct nvmlDevice_st {
    const char *uuid, *name;
    int index;           /* nvmlDeviceGetHandleByIndex index; -1 for a MIG device */
    nvmlDevice_t parent; /* the card, for a MIG device */
    unsigned int gpu_instance, compute_instance; /* MIG device only */
    unsigned int mig_mode;                       /* card: current == pending */
    nvmlDevice_t mig[MAX_MIG_DEVICES];           /* card: MIG devices by index */
    unsigned long long mem_total, mem_reserved, mem_used; /* v2 meaning */
    int has_utilization;
    nvmlUtilization_t utilization;
    unsigned int temperature_c, power_mw;
    int has_energy;
    unsigned long long energy_mj;
    int has_ecc;
    unsigned long long ecc[2][2]; /* [errorType corrected/uncorrected][counter volatile/aggregate] */
    unsigned long long clocks_event_reasons;
    const Process *compute;
    unsigned int n_compute;
    const Process *graphics;
    unsigned int n_graphics;
    const Sample *samples; /* NULL: per-process utilisation NOT_SUPPORTED */
    unsigned int n_samples;
    const nvmlDeviceAttributes_t *attributes; /* MIG device only */
    unsigned int pci_bus, pci_device_id;
};

static const char DRIVER_VERSION[] = "570.86.15";

static const Process CARD0_COMPUTE[] = {
    {4242, 8 * GIB, NO_INSTANCE, NO_INSTANCE},
    {4343, 2 * GIB, NO_INSTANCE, NO_INSTANCE},
};
static const Process CARD0_GRAPHICS[] = {
    {4242, 8 * GIB, NO_INSTANCE, NO_INSTANCE},
};
static const Sample CARD0_SAMPLES[] = { /* oldest first; 4242 averages 55, 4343 30 */
    {4242, 600000, 50, 20, 0, 0},
    {4343, 400000, 30, 10, 0, 0},
    {4242, 200000, 60, 22, 0, 0},
};
static const Process CARD1_COMPUTE[] = {{5151, 6 * GIB, 1, 0}};
static const Process MIG0_COMPUTE[] = {{5151, 6 * GIB, 1, 0}};
static const nvmlDeviceAttributes_t MIG_3G40GB = {42, 3, 2, 0, 0, 0, 3, 3, 40192};

static struct nvmlDevice_st CARD0, CARD1, MIG0, MIG1;

static struct nvmlDevice_st CARD0 = {
    .uuid = "GPU-11111111-1111-1111-1111-111111111111",
    .name = "NVIDIA H200",
    .index = 0,
    .mem_total = 143771 * MIB, .mem_reserved = 512 * MIB, .mem_used = 10240 * MIB,
    .has_utilization = 1, .utilization = {73, 41},
    .temperature_c = 45, .power_mw = 350000,
    .has_energy = 1, .energy_mj = 123456789ull,
    .has_ecc = 1, .ecc = {{3, 7}, {0, 1}},
    .clocks_event_reasons = 0x4 | 0x40,
    .compute = CARD0_COMPUTE, .n_compute = 2,
    .graphics = CARD0_GRAPHICS, .n_graphics = 1,
    .samples = CARD0_SAMPLES, .n_samples = 3,
    .pci_bus = 0x18, .pci_device_id = 0x233510DE,
};

static struct nvmlDevice_st CARD1 = {
    .uuid = "GPU-22222222-2222-2222-2222-222222222222",
    .name = "NVIDIA A100-SXM4-80GB",
    .index = 1,
    .mig_mode = 1, .mig = {&MIG0, &MIG1},
    .mem_total = 81920 * MIB, .mem_reserved = 512 * MIB, .mem_used = 6144 * MIB,
    .temperature_c = 38, .power_mw = 90000,
    .clocks_event_reasons = 0x1,
    .compute = CARD1_COMPUTE, .n_compute = 1,
    .pci_bus = 0x3B, .pci_device_id = 0x20B210DE,
};

static struct nvmlDevice_st MIG0 = {
    .uuid = "MIG-33333333-3333-3333-3333-333333333301",
    .name = "NVIDIA A100-SXM4-80GB MIG 3g.40gb",
    .index = -1, .parent = &CARD1, .gpu_instance = 1, .compute_instance = 0,
    .mem_total = 40192 * MIB, .mem_reserved = 0, .mem_used = 6144 * MIB,
    .compute = MIG0_COMPUTE, .n_compute = 1,
    .attributes = &MIG_3G40GB,
};

static struct nvmlDevice_st MIG1 = {
    .uuid = "MIG-33333333-3333-3333-3333-333333333302",
    .name = "NVIDIA A100-SXM4-80GB MIG 3g.40gb",
    .index = -1, .parent = &CARD1, .gpu_instance = 2, .compute_instance = 0,
    .mem_total = 40192 * MIB, .mem_reserved = 0, .mem_used = 0,
    .attributes = &MIG_3G40GB,
};

static nvmlDevice_t const CARDS[] = {&CARD0, &CARD1};
#define N_CARDS 2u
static nvmlDevice_t const ALL[] = {&CARD0, &CARD1, &MIG0, &MIG1};

/* The one XID the driver has to report: card 0, XID 79 (GPU fell off the bus). */
static int xid_pending = 1;
#define XID_DEVICE (&CARD0)
#define XID_VALUE 79ull

/* ---- state ------------------------------------------------------------------ */

static unsigned int init_count;
static unsigned long long init_time_us; /* set once, at the first nvmlInit */

struct nvmlEventSet_st {
    unsigned long long mask[N_CARDS]; /* event types registered per card */
};

#define CHECK_INIT()                              \
    do {                                          \
        if (init_count == 0)                      \
            return NVML_ERROR_UNINITIALIZED;      \
    } while (0)

static int valid(nvmlDevice_t d) {
    for (size_t i = 0; i < sizeof ALL / sizeof ALL[0]; i++)
        if (ALL[i] == d)
            return 1;
    return 0;
}

#define CHECK_DEVICE(d, out)                                  \
    do {                                                      \
        CHECK_INIT();                                         \
        if (!valid(d) || (out) == NULL)                       \
            return NVML_ERROR_INVALID_ARGUMENT;               \
    } while (0)

static int is_mig(nvmlDevice_t d) { return d->parent != NULL; }

static nvmlReturn_t copy_string(const char *s, char *buf, unsigned int length) {
    if (buf == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(s) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, s, strlen(s) + 1);
    return NVML_SUCCESS;
}

/* Not NVML: sizeof of a struct above, by its nvml.h name (0 if unknown), so a
 * test can compare the fake's layouts with the binding's ctypes classes. */
size_t fakenvml_sizeof(const char *name) {
#define SIZE(t) if (strcmp(name, #t) == 0) return sizeof(t)
    SIZE(nvmlMemory_t);
    SIZE(nvmlMemory_v2_t);
    SIZE(nvmlUtilization_t);
    SIZE(nvmlProcessInfo_t);
    SIZE(nvmlProcessUtilizationSample_t);
    SIZE(nvmlEventData_t);
    SIZE(nvmlDeviceAttributes_t);
    SIZE(nvmlPciInfo_t);
#undef SIZE
    return 0;
}

/* The test hook (see the top): the workload on card 0, if any. */
typedef struct {
    unsigned int pid;
    unsigned long long bytes, launches, last_launch_us;
} Workload;

static int workload(nvmlDevice_t d, Workload *w) {
    const char *path = getenv("FAKENVML_WORKLOAD");
    if (d != &CARD0 || path == NULL)
        return 0;
    FILE *file = fopen(path, "r");
    if (file == NULL)
        return 0;
    int read = fscanf(file, "%u %llu %llu %llu", &w->pid, &w->bytes, &w->launches,
                      &w->last_launch_us);
    fclose(file);
    return read == 4;
}

/* ---- init, errors, system ----------------------------------------------------- */

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    if (init_time_us == 0) {
        struct timeval tv;
        gettimeofday(&tv, NULL);
        init_time_us = (unsigned long long)tv.tv_sec * 1000000ull + (unsigned long long)tv.tv_usec;
    }
    init_count++;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void) {
    CHECK_INIT();
    init_count--;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    CHECK_INIT();
    return copy_string(DRIVER_VERSION, version, length);
}

/* ---- devices ------------------------------------------------------------------ */

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    CHECK_INIT();
    if (count == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = N_CARDS;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    CHECK_INIT();
    if (index >= N_CARDS || device == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = CARDS[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *index) {
    CHECK_DEVICE(d, index);
    if (is_mig(d))
        return NVML_ERROR_NOT_SUPPORTED;
    *index = (unsigned int)d->index;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int length) {
    CHECK_DEVICE(d, uuid);
    return copy_string(d->uuid, uuid, length);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int length) {
    CHECK_DEVICE(d, name);
    return copy_string(d->name, name, length);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *pci) {
    CHECK_DEVICE(d, pci);
    nvmlDevice_t card = is_mig(d) ? d->parent : d;
    memset(pci, 0, sizeof *pci);
    pci->domain = 0;
    pci->bus = card->pci_bus;
    pci->device = 0;
    pci->pciDeviceId = card->pci_device_id;
    pci->pciSubSystemId = 0x16A110DE;
    strcpy(pci->busId, card == &CARD0 ? "00000000:18:00.0" : "00000000:3B:00.0");
    strcpy(pci->busIdLegacy, card == &CARD0 ? "0000:18:00.0" : "0000:3B:00.0");
    return NVML_SUCCESS;
}

/* v1: "used" counts the reserved memory too (nvml.h); v2 splits it out. */
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *memory) {
    CHECK_DEVICE(d, memory);
    memory->total = d->mem_total;
    memory->used = d->mem_used + d->mem_reserved;
    memory->free = d->mem_total - memory->used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *memory) {
    CHECK_DEVICE(d, memory);
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    memory->total = d->mem_total;
    memory->reserved = d->mem_reserved;
    memory->used = d->mem_used;
    memory->free = d->mem_total - d->mem_reserved - d->mem_used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *utilization) {
    CHECK_DEVICE(d, utilization);
    if (!d->has_utilization)
        return NVML_ERROR_NOT_SUPPORTED;
    *utilization = d->utilization;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, unsigned int sensor, unsigned int *temp) {
    CHECK_DEVICE(d, temp);
    if (sensor != 0) /* NVML_TEMPERATURE_GPU is the only sensor */
        return NVML_ERROR_INVALID_ARGUMENT;
    if (is_mig(d))
        return NVML_ERROR_NOT_SUPPORTED;
    *temp = d->temperature_c;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *power) {
    CHECK_DEVICE(d, power);
    if (is_mig(d))
        return NVML_ERROR_NOT_SUPPORTED;
    *power = d->power_mw;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t d, unsigned long long *energy) {
    CHECK_DEVICE(d, energy);
    if (!d->has_energy)
        return NVML_ERROR_NOT_SUPPORTED;
    Workload w;
    *energy = d->energy_mj + (workload(d, &w) ? w.launches * 1000ull : 0);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, unsigned int errorType,
                                         unsigned int counterType, unsigned long long *count) {
    CHECK_DEVICE(d, count);
    if (errorType > 1 || counterType > 1)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!d->has_ecc)
        return NVML_ERROR_NOT_SUPPORTED;
    *count = d->ecc[errorType][counterType];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long *reasons) {
    CHECK_DEVICE(d, reasons);
    if (is_mig(d))
        return NVML_ERROR_NOT_SUPPORTED;
    *reasons = d->clocks_event_reasons;
    return NVML_SUCCESS;
}

/* The deprecated name; drivers still export both. */
nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t d, unsigned long long *reasons) {
    return nvmlDeviceGetCurrentClocksEventReasons(d, reasons);
}

/* ---- processes ------------------------------------------------------------------ */

/* The two-call protocol: a short (or NULL) buffer gets INSUFFICIENT_SIZE and the
 * count; a big enough one is filled and *count set to the entries written. */
static nvmlReturn_t list_processes(const Process *list, unsigned int n, unsigned int *count,
                                   nvmlProcessInfo_t *infos) {
    if (count == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (*count < n || (infos == NULL && n > 0)) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned int i = 0; i < n; i++) {
        infos[i].pid = list[i].pid;
        infos[i].usedGpuMemory = list[i].memory;
        infos[i].gpuInstanceId = list[i].gpu_instance;
        infos[i].computeInstanceId = list[i].compute_instance;
    }
    *count = n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count,
                                                     nvmlProcessInfo_t *infos) {
    CHECK_DEVICE(d, count);
    Workload w;
    if (!workload(d, &w))
        return list_processes(d->compute, d->n_compute, count, infos);
    Process with[sizeof CARD0_COMPUTE / sizeof *CARD0_COMPUTE + 1];
    memcpy(with, d->compute, d->n_compute * sizeof *with);
    with[d->n_compute] = (Process){w.pid, w.bytes, NO_INSTANCE, NO_INSTANCE};
    return list_processes(with, d->n_compute + 1, count, infos);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t d, unsigned int *count,
                                                      nvmlProcessInfo_t *infos) {
    CHECK_DEVICE(d, count);
    return list_processes(d->graphics, d->n_graphics, count, infos);
}

/* Samples newer than lastSeenTimeStamp; NOT_FOUND when there are none. A NULL
 * buffer (or a short one) gets INSUFFICIENT_SIZE and the count. */
nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t d,
                                             nvmlProcessUtilizationSample_t *utilization,
                                             unsigned int *processSamplesCount,
                                             unsigned long long lastSeenTimeStamp) {
    CHECK_DEVICE(d, processSamplesCount);
    if (d->samples == NULL)
        return NVML_ERROR_NOT_SUPPORTED;
    Workload w;
    int busy = workload(d, &w) && w.launches > 0 && w.last_launch_us > lastSeenTimeStamp;
    unsigned int newer = (unsigned int)busy;
    for (unsigned int i = 0; i < d->n_samples; i++)
        if (init_time_us - d->samples[i].before_init_us > lastSeenTimeStamp)
            newer++;
    if (newer == 0) {
        *processSamplesCount = 0;
        return NVML_ERROR_NOT_FOUND;
    }
    if (utilization == NULL || *processSamplesCount < newer) {
        *processSamplesCount = newer;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    unsigned int k = 0;
    for (unsigned int i = 0; i < d->n_samples; i++) {
        const Sample *s = &d->samples[i];
        unsigned long long stamp = init_time_us - s->before_init_us;
        if (stamp <= lastSeenTimeStamp)
            continue;
        utilization[k].pid = s->pid;
        utilization[k].timeStamp = stamp;
        utilization[k].smUtil = s->sm;
        utilization[k].memUtil = s->mem;
        utilization[k].encUtil = s->enc;
        utilization[k].decUtil = s->dec;
        k++;
    }
    if (busy)
        utilization[k++] = (nvmlProcessUtilizationSample_t){w.pid, w.last_launch_us, 100, 0, 0, 0};
    *processSamplesCount = k;
    return NVML_SUCCESS;
}

/* ---- MIG -------------------------------------------------------------------------- */

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int *current, unsigned int *pending) {
    CHECK_DEVICE(d, current);
    if (pending == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (is_mig(d))
        return NVML_ERROR_NOT_SUPPORTED;
    *current = *pending = d->mig_mode;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t d, unsigned int *isMigDevice) {
    CHECK_DEVICE(d, isMigDevice);
    *isMigDevice = (unsigned int)is_mig(d);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned int *count) {
    CHECK_DEVICE(d, count);
    if (is_mig(d))
        return NVML_ERROR_NOT_SUPPORTED;
    *count = MAX_MIG_DEVICES; /* both boards can hold seven */
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d, unsigned int index,
                                                 nvmlDevice_t *migDevice) {
    CHECK_DEVICE(d, migDevice);
    if (is_mig(d))
        return NVML_ERROR_NOT_SUPPORTED;
    if (index >= MAX_MIG_DEVICES)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!d->mig_mode || d->mig[index] == NULL)
        return NVML_ERROR_NOT_FOUND;
    *migDevice = d->mig[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t d, nvmlDevice_t *device) {
    CHECK_DEVICE(d, device);
    if (!is_mig(d))
        return NVML_ERROR_NOT_SUPPORTED;
    *device = d->parent;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t d, unsigned int *id) {
    CHECK_DEVICE(d, id);
    if (!is_mig(d))
        return NVML_ERROR_NOT_SUPPORTED;
    *id = d->gpu_instance;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t d, unsigned int *id) {
    CHECK_DEVICE(d, id);
    if (!is_mig(d))
        return NVML_ERROR_NOT_SUPPORTED;
    *id = d->compute_instance;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t d, nvmlDeviceAttributes_t *attributes) {
    CHECK_DEVICE(d, attributes);
    if (d->attributes == NULL)
        return NVML_ERROR_NOT_SUPPORTED;
    *attributes = *d->attributes;
    return NVML_SUCCESS;
}

/* ---- events ------------------------------------------------------------------------ */

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    CHECK_INIT();
    if (set == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *set = calloc(1, sizeof **set);
    return *set == NULL ? NVML_ERROR_UNKNOWN : NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t d, unsigned long long *eventTypes) {
    CHECK_DEVICE(d, eventTypes);
    if (is_mig(d))
        return NVML_ERROR_NOT_SUPPORTED;
    *eventTypes = EVENT_XID_CRITICAL;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long eventTypes,
                                      nvmlEventSet_t set) {
    CHECK_DEVICE(d, set);
    if (is_mig(d) || (eventTypes & ~EVENT_XID_CRITICAL) != 0)
        return NVML_ERROR_NOT_SUPPORTED;
    set->mask[d->index] |= eventTypes;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    CHECK_INIT();
    if (set == NULL || data == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (xid_pending && (set->mask[XID_DEVICE->index] & EVENT_XID_CRITICAL)) {
        xid_pending = 0;
        data->device = XID_DEVICE;
        data->eventType = EVENT_XID_CRITICAL;
        data->eventData = XID_VALUE;
        data->gpuInstanceId = NO_INSTANCE;
        data->computeInstanceId = NO_INSTANCE;
        return NVML_SUCCESS;
    }
    /* Nothing else will happen: block for the timeout, as the driver does, so a
     * caller's wait loop is paced as on a real node instead of spinning. */
    struct timespec left = {timeoutms / 1000, (long)(timeoutms % 1000) * 1000000L};
    while (nanosleep(&left, &left) != 0)
        ;
    return NVML_ERROR_TIMEOUT;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    CHECK_INIT();
    if (set == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    free(set);
    return NVML_SUCCESS;
}
