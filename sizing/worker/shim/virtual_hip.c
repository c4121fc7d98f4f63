/*
 * A stand-in HIP runtime (libamdhip64.so.6 or .so.7) that reports one virtual AMD GPU.
 *
 * rocBLAS and rocSOLVER compute workspace sizes on the host in size-query mode and return
 * before launching any kernel. This library gives them what they ask of the runtime on the
 * way there (device properties, a default workspace, module loading for Tensile), so the
 * real vendor code answers real size queries on a machine with no GPU. Device memory is
 * host memory; anything that would need a GPU fails with hipErrorNotSupported.
 *
 * The device is described by environment variables, read once (see sizing/worker/virtual_device.py):
 *   HIPMEM_VDEV_NAME, HIPMEM_VDEV_ARCH (full gcnArchName, e.g. gfx90a:sramecc+:xnack-),
 *   HIPMEM_VDEV_MAJOR, HIPMEM_VDEV_MINOR, HIPMEM_VDEV_CUS, HIPMEM_VDEV_MEM_BYTES,
 *   HIPMEM_VDEV_WARP.
 * Built against the real hip_runtime_api.h of the release it stands in for (HIP 6 or 7),
 * so that hipDeviceProp_t has the real layout; the version script of that soname
 * (libamdhip64.so.N.map) gives the symbols the version nodes the vendor libraries import.
 */
#include <hip/hip_runtime_api.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

static hipDeviceProp_t g_prop;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static hipError_t g_last_error = hipSuccess;
static size_t g_allocated_bytes = 0; /* what the libraries hold now, like device memory */
static char g_default_pool_storage[16]; /* its address is the default pool's handle */
static pthread_mutex_t g_alloc_lock = PTHREAD_MUTEX_INITIALIZER;

static long env_long(const char* name, long fallback) {
  const char* text = getenv(name);
  return text && *text ? strtol(text, NULL, 0) : fallback;
}

static void init_device(void) {
  memset(&g_prop, 0, sizeof g_prop);
  const char* name = getenv("HIPMEM_VDEV_NAME");
  const char* arch = getenv("HIPMEM_VDEV_ARCH");
  snprintf(g_prop.name, sizeof g_prop.name, "%s", name ? name : "hipmem virtual device");
  snprintf(g_prop.gcnArchName, sizeof g_prop.gcnArchName, "%s",
           arch ? arch : "gfx90a:sramecc+:xnack-");
  g_prop.major = (int)env_long("HIPMEM_VDEV_MAJOR", 9);
  g_prop.minor = (int)env_long("HIPMEM_VDEV_MINOR", 0);
  g_prop.multiProcessorCount = (int)env_long("HIPMEM_VDEV_CUS", 104);
  g_prop.totalGlobalMem = (size_t)env_long("HIPMEM_VDEV_MEM_BYTES", 64L << 30);
  g_prop.warpSize = (int)env_long("HIPMEM_VDEV_WARP", 64);
  /* Plausible values for the rest: nothing in query mode depends on them. */
  g_prop.maxThreadsPerBlock = 1024;
  g_prop.maxThreadsDim[0] = g_prop.maxThreadsDim[1] = g_prop.maxThreadsDim[2] = 1024;
  g_prop.maxGridSize[0] = g_prop.maxGridSize[1] = g_prop.maxGridSize[2] = 0x7fffffff;
  g_prop.sharedMemPerBlock = 64 * 1024;
  g_prop.maxSharedMemoryPerMultiProcessor = 64 * 1024;
  g_prop.regsPerBlock = 65536;
  g_prop.clockRate = 1700000;
  g_prop.memoryClockRate = 1600000;
  g_prop.memoryBusWidth = 4096;
  g_prop.l2CacheSize = 8 * 1024 * 1024;
  g_prop.maxThreadsPerMultiProcessor = 2048;
  g_prop.totalConstMem = 64 * 1024;
  g_prop.concurrentKernels = 1;
  g_prop.managedMemory = 1;
  g_prop.memPitch = (size_t)-1;
  g_prop.textureAlignment = 256;
  g_prop.pciBusID = 1;
}

static void ensure_init(void) { pthread_once(&g_once, init_device); }

static void note_error(const char* where, hipError_t err);

/* Every error return goes through here: in execute mode it is counted (note_error). */
static hipError_t fail_at(const char* where, hipError_t err) {
  g_last_error = err;
  note_error(where, err);
  return err;
}

#define fail(err) fail_at(__func__, (err)) /* names the HIP function that failed */

/* ---- device and runtime queries ---------------------------------------------------- */

EXPORT hipError_t hipGetDeviceCount(int* count) {
  if (!count) return fail(hipErrorInvalidValue);
  *count = 1;
  return hipSuccess;
}

EXPORT hipError_t hipGetDevice(int* device) {
  if (!device) return fail(hipErrorInvalidValue);
  *device = 0;
  return hipSuccess;
}

EXPORT hipError_t hipSetDevice(int device) {
  return device == 0 ? hipSuccess : fail(hipErrorInvalidDevice);
}

EXPORT hipError_t hipGetDevicePropertiesR0600(hipDeviceProp_t* prop, int device) {
  if (!prop) return fail(hipErrorInvalidValue);
  if (device != 0) return fail(hipErrorInvalidDevice);
  ensure_init();
  *prop = g_prop;
  return hipSuccess;
}

EXPORT hipError_t hipDeviceGetAttribute(int* value, hipDeviceAttribute_t attr, int device) {
  if (!value) return fail(hipErrorInvalidValue);
  if (device != 0) return fail(hipErrorInvalidDevice);
  ensure_init();
  switch (attr) {
    case hipDeviceAttributeMultiprocessorCount: *value = g_prop.multiProcessorCount; break;
    /* hipBLASLt picks its per-CU solution files (CU104_gfx90a) by this one. */
    case hipDeviceAttributePhysicalMultiProcessorCount: *value = g_prop.multiProcessorCount; break;
    case hipDeviceAttributeWarpSize: *value = g_prop.warpSize; break;
    case hipDeviceAttributeComputeCapabilityMajor: *value = g_prop.major; break;
    case hipDeviceAttributeComputeCapabilityMinor: *value = g_prop.minor; break;
    case hipDeviceAttributeMaxThreadsPerBlock: *value = g_prop.maxThreadsPerBlock; break;
    case hipDeviceAttributeMaxSharedMemoryPerBlock: *value = (int)g_prop.sharedMemPerBlock; break;
    case hipDeviceAttributeMemoryPoolsSupported: *value = 1; break;
    case hipDeviceAttributeManagedMemory: *value = 1; break;
    case hipDeviceAttributeConcurrentManagedAccess: *value = 1; break;
    case hipDeviceAttributeL2CacheSize: *value = g_prop.l2CacheSize; break;
    case hipDeviceAttributeClockRate: *value = g_prop.clockRate; break;
    default: *value = 0; break;
  }
  return hipSuccess;
}

EXPORT hipError_t hipRuntimeGetVersion(int* version) {
  if (!version) return fail(hipErrorInvalidValue);
  *version = HIP_VERSION;
  return hipSuccess;
}

EXPORT hipError_t hipDriverGetVersion(int* version) { return hipRuntimeGetVersion(version); }

EXPORT hipError_t hipGetLastError(void) {
  hipError_t err = g_last_error;
  g_last_error = hipSuccess;
  return err;
}

EXPORT hipError_t hipPeekAtLastError(void) { return g_last_error; }

/* HIP 6.0+: rocBLAS 5.x checks launches with this instead of hipPeekAtLastError. */
EXPORT hipError_t hipExtGetLastError(void) { return hipGetLastError(); }

EXPORT const char* hipGetErrorName(hipError_t err) {
  switch (err) {
    case hipSuccess: return "hipSuccess";
    case hipErrorInvalidValue: return "hipErrorInvalidValue";
    case hipErrorOutOfMemory: return "hipErrorOutOfMemory";
    case hipErrorInvalidDevice: return "hipErrorInvalidDevice";
    case hipErrorNotSupported: return "hipErrorNotSupported";
    default: return "hipErrorUnknown";
  }
}

EXPORT const char* hipGetErrorString(hipError_t err) { return hipGetErrorName(err); }

/* ---- memory: host memory stands in for device memory ------------------------------- */

static hipError_t host_alloc(void** ptr, size_t size) {
  if (!ptr) return fail(hipErrorInvalidValue);
  ensure_init();
  pthread_mutex_lock(&g_alloc_lock);
  int over = size > g_prop.totalGlobalMem - g_allocated_bytes;
  if (!over) g_allocated_bytes += size;
  pthread_mutex_unlock(&g_alloc_lock);
  if (over) return fail(hipErrorOutOfMemory);
  /* Keep a header with the size so that frees can be counted. */
  size_t* block = NULL;
  if (posix_memalign((void**)&block, 256, size + 256) != 0) {
    pthread_mutex_lock(&g_alloc_lock);
    g_allocated_bytes -= size;
    pthread_mutex_unlock(&g_alloc_lock);
    return fail(hipErrorOutOfMemory);
  }
  block[0] = size;
  *ptr = (char*)block + 256;
  return hipSuccess;
}

static hipError_t host_free(void* ptr) {
  if (!ptr) return hipSuccess;
  size_t* block = (size_t*)((char*)ptr - 256);
  pthread_mutex_lock(&g_alloc_lock);
  g_allocated_bytes -= block[0];
  pthread_mutex_unlock(&g_alloc_lock);
  free(block);
  return hipSuccess;
}

EXPORT hipError_t hipMalloc(void** ptr, size_t size) { return host_alloc(ptr, size); }
EXPORT hipError_t hipFree(void* ptr) { return host_free(ptr); }
EXPORT hipError_t hipHostMalloc(void** ptr, size_t size, unsigned int flags) {
  (void)flags;
  return host_alloc(ptr, size);
}
EXPORT hipError_t hipHostFree(void* ptr) { return host_free(ptr); }
/* Stream-ordered memory: served at once from host memory. The pool's "reserved" and "used"
   figures are the bytes its allocations hold, so a replay's statistics stay meaningful. */
static size_t g_pool_bytes = 0;

static size_t block_size(void* ptr) { return ((size_t*)((char*)ptr - 256))[0]; }

EXPORT hipError_t hipMallocAsync(void** ptr, size_t size, hipStream_t stream) {
  (void)stream;
  hipError_t err = host_alloc(ptr, size);
  if (err == hipSuccess) {
    pthread_mutex_lock(&g_alloc_lock);
    g_pool_bytes += size;
    pthread_mutex_unlock(&g_alloc_lock);
  }
  return err;
}
EXPORT hipError_t hipFreeAsync(void* ptr, hipStream_t stream) {
  (void)stream;
  if (ptr) {
    pthread_mutex_lock(&g_alloc_lock);
    g_pool_bytes -= block_size(ptr);
    pthread_mutex_unlock(&g_alloc_lock);
  }
  return host_free(ptr);
}
EXPORT hipError_t hipMallocFromPoolAsync(void** ptr, size_t size, hipMemPool_t pool,
                                         hipStream_t stream) {
  (void)pool;
  return hipMallocAsync(ptr, size, stream);
}
EXPORT hipError_t hipMemPoolCreate(hipMemPool_t* pool, const hipMemPoolProps* props) {
  (void)props;
  if (!pool) return fail(hipErrorInvalidValue);
  *pool = (hipMemPool_t)malloc(16);
  return *pool ? hipSuccess : fail(hipErrorOutOfMemory);
}
EXPORT hipError_t hipMemPoolDestroy(hipMemPool_t pool) {
  if (pool != (hipMemPool_t)&g_default_pool_storage) free(pool);
  return hipSuccess;
}
EXPORT hipError_t hipMemPoolSetAttribute(hipMemPool_t pool, hipMemPoolAttr attr, void* value) {
  (void)pool, (void)attr;
  return value ? hipSuccess : fail(hipErrorInvalidValue);
}
EXPORT hipError_t hipMemPoolGetAttribute(hipMemPool_t pool, hipMemPoolAttr attr, void* value) {
  (void)pool;
  if (!value) return fail(hipErrorInvalidValue);
  pthread_mutex_lock(&g_alloc_lock);
  uint64_t bytes = g_pool_bytes;
  pthread_mutex_unlock(&g_alloc_lock);
  switch (attr) {
    case hipMemPoolAttrReservedMemCurrent:
    case hipMemPoolAttrReservedMemHigh:
    case hipMemPoolAttrUsedMemCurrent:
    case hipMemPoolAttrUsedMemHigh:
      *(uint64_t*)value = bytes;
      break;
    default:
      *(uint64_t*)value = 0;
      break;
  }
  return hipSuccess;
}

/* Managed memory: host memory is already visible to the host, so advice and prefetch are
   accepted and change nothing. */
EXPORT hipError_t hipMallocManaged(void** ptr, size_t size, unsigned int flags) {
  (void)flags;
  return host_alloc(ptr, size);
}
EXPORT hipError_t hipMemAdvise(const void* ptr, size_t count, hipMemoryAdvise advice,
                               int device) {
  (void)count, (void)advice, (void)device;
  return ptr ? hipSuccess : fail(hipErrorInvalidValue);
}
EXPORT hipError_t hipMemPrefetchAsync(const void* ptr, size_t count, int device,
                                      hipStream_t stream) {
  (void)count, (void)device, (void)stream;
  return ptr ? hipSuccess : fail(hipErrorInvalidValue);
}

EXPORT hipError_t hipMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  ensure_init();
  pthread_mutex_lock(&g_alloc_lock);
  if (free_bytes) *free_bytes = g_prop.totalGlobalMem - g_allocated_bytes;
  pthread_mutex_unlock(&g_alloc_lock);
  if (total_bytes) *total_bytes = g_prop.totalGlobalMem;
  return hipSuccess;
}

EXPORT hipError_t hipDeviceGetDefaultMemPool(hipMemPool_t* pool, int device) {
  if (!pool || device != 0) return fail(hipErrorInvalidValue);
  *pool = (hipMemPool_t)&g_default_pool_storage;
  return hipSuccess;
}

EXPORT hipError_t hipMemPoolTrimTo(hipMemPool_t pool, size_t min_bytes_to_hold) {
  (void)pool;
  (void)min_bytes_to_hold;
  return hipSuccess;
}

EXPORT hipError_t hipMemcpy(void* dst, const void* src, size_t bytes, hipMemcpyKind kind) {
  (void)kind;
  if (bytes && (!dst || !src)) return fail(hipErrorInvalidValue);
  memmove(dst, src, bytes);
  return hipSuccess;
}

EXPORT hipError_t hipMemcpyAsync(void* dst, const void* src, size_t bytes, hipMemcpyKind kind,
                                 hipStream_t stream) {
  (void)stream;
  return hipMemcpy(dst, src, bytes, kind);
}

EXPORT hipError_t hipMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch,
                              size_t width, size_t height, hipMemcpyKind kind) {
  (void)kind;
  if (height && width && (!dst || !src)) return fail(hipErrorInvalidValue);
  for (size_t row = 0; row < height; ++row)
    memmove((char*)dst + row * dpitch, (const char*)src + row * spitch, width);
  return hipSuccess;
}

EXPORT hipError_t hipMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch,
                                   size_t width, size_t height, hipMemcpyKind kind,
                                   hipStream_t stream) {
  (void)stream;
  return hipMemcpy2D(dst, dpitch, src, spitch, width, height, kind);
}

EXPORT hipError_t hipMemsetAsync(void* dst, int value, size_t bytes, hipStream_t stream) {
  (void)stream;
  if (bytes && !dst) return fail(hipErrorInvalidValue);
  memset(dst, value, bytes);
  return hipSuccess;
}

EXPORT hipError_t hipPointerGetAttributes(hipPointerAttribute_t* attributes, const void* ptr) {
  (void)attributes;
  (void)ptr;
  return fail(hipErrorNotSupported);
}

/* ---- streams and events: everything is already complete ---------------------------- */

EXPORT hipError_t hipStreamCreateWithFlags(hipStream_t* stream, unsigned int flags) {
  (void)flags;
  if (!stream) return fail(hipErrorInvalidValue);
  *stream = (hipStream_t)malloc(16); /* a distinct handle per stream */
  return *stream ? hipSuccess : fail(hipErrorOutOfMemory);
}
EXPORT hipError_t hipStreamCreate(hipStream_t* stream) { return hipStreamCreateWithFlags(stream, 0); }
EXPORT hipError_t hipStreamDestroy(hipStream_t stream) {
  free(stream);
  return hipSuccess;
}
EXPORT hipError_t hipStreamSynchronize(hipStream_t stream) {
  (void)stream;
  return hipSuccess;
}
EXPORT hipError_t hipStreamQuery(hipStream_t stream) {
  (void)stream;
  return hipSuccess;
}
EXPORT hipError_t hipDeviceSynchronize(void) { return hipSuccess; }
EXPORT hipError_t hipStreamIsCapturing(hipStream_t stream, hipStreamCaptureStatus* status) {
  (void)stream;
  if (!status) return fail(hipErrorInvalidValue);
  *status = hipStreamCaptureStatusNone;
  return hipSuccess;
}
EXPORT int hipGetStreamDeviceId(hipStream_t stream) {
  (void)stream;
  return 0;
}
EXPORT hipError_t hipEventRecord(hipEvent_t event, hipStream_t stream) {
  (void)event;
  (void)stream;
  return hipSuccess;
}
/* rocSOLVER 3.32 creates events (for its timing logs); none is ever waited on here. */
static char g_event_storage;
EXPORT hipError_t hipEventCreate(hipEvent_t* event) {
  if (!event) return fail(hipErrorInvalidValue);
  *event = (hipEvent_t)&g_event_storage;
  return hipSuccess;
}
EXPORT hipError_t hipEventDestroy(hipEvent_t event) {
  (void)event;
  return hipSuccess;
}
EXPORT hipError_t hipEventElapsedTime(float* ms, hipEvent_t start, hipEvent_t stop) {
  (void)start;
  (void)stop;
  if (!ms) return fail(hipErrorInvalidValue);
  *ms = 0.0f;
  return hipSuccess;
}

/* ---- code objects and launches ------------------------------------------------------
 *
 * Query mode: code objects register and load as no-ops and nothing can be launched.
 * Execute mode (hipmemExecuteBegin ... hipmemExecuteEnd, used by hipmem's minimum search,
 * sizing/minimum.py): launches succeed and do nothing, and each one is recorded by kernel
 * name, so that the kernels a call launches with one workspace can be compared with those
 * it launches with another. Every HIP error in execute mode is counted: an inner failure
 * (a kernel not found, a bad argument) must make the answer "unknown", never a size.
 */

static int g_dummy_handle;
static int g_execute = 0;
static unsigned long g_launches = 0;
static unsigned long g_errors = 0;
static char g_first_error[256];
static char* g_kernels = NULL; /* launched kernel names, one per line, in order */
static size_t g_kernels_len = 0, g_kernels_cap = 0;

/* Host stub -> device kernel name, filled by __hipRegisterFunction (tens of thousands). */
#define STUB_SLOTS (1u << 17)
static const void* g_stub_keys[STUB_SLOTS];
static const char* g_stub_names[STUB_SLOTS];

static size_t stub_slot(const void* key) {
  size_t slot = (((uintptr_t)key) >> 4) * 0x9E3779B97F4A7C15ull >> 47;
  for (size_t probe = 0; probe < STUB_SLOTS; ++probe) {
    size_t at = (slot + probe) & (STUB_SLOTS - 1);
    if (g_stub_keys[at] == key || g_stub_keys[at] == NULL) return at;
  }
  return STUB_SLOTS;
}

static void note_error(const char* where, hipError_t err) {
  if (!g_execute) return;
  if (g_errors++ == 0) snprintf(g_first_error, sizeof g_first_error, "%s: %s", where,
                                hipGetErrorName(err));
}

static void record_launch(const char* name) {
  if (!g_execute) return;
  ++g_launches;
  size_t need = strlen(name) + 1;
  if (g_kernels_len + need + 1 > g_kernels_cap) {
    size_t cap = (g_kernels_cap ? g_kernels_cap * 2 : 4096) + need;
    char* grown = realloc(g_kernels, cap);
    if (!grown) return;
    g_kernels = grown, g_kernels_cap = cap;
  }
  memcpy(g_kernels + g_kernels_len, name, need - 1);
  g_kernels_len += need;
  g_kernels[g_kernels_len - 1] = '\n';
  g_kernels[g_kernels_len] = '\0';
}

/* hipmem's own entry points (not HIP API): start and end one executed call. */
EXPORT void hipmemExecuteBegin(void) {
  g_execute = 1;
  g_launches = g_errors = 0;
  g_first_error[0] = '\0';
  g_kernels_len = 0;
  if (g_kernels) g_kernels[0] = '\0';
}
/* Ends execute mode; returns the launch count, fills the error count, the first error and
   the launched kernels (names, one per line; truncated to kernels_size). */
EXPORT unsigned long hipmemExecuteEnd(unsigned long* errors, char* first_error,
                                      size_t first_error_size, char* kernels,
                                      size_t kernels_size) {
  g_execute = 0;
  if (errors) *errors = g_errors;
  if (first_error && first_error_size) snprintf(first_error, first_error_size, "%s", g_first_error);
  if (kernels && kernels_size) snprintf(kernels, kernels_size, "%s", g_kernels ? g_kernels : "");
  return g_launches;
}

EXPORT void** __hipRegisterFatBinary(const void* data) {
  (void)data;
  return (void**)&g_dummy_handle;
}
EXPORT void __hipUnregisterFatBinary(void** modules) { (void)modules; }
EXPORT void __hipRegisterFunction(void** modules, const void* host_function,
                                  char* device_function, const char* device_name,
                                  unsigned int thread_limit, void* tid, void* bid,
                                  dim3* block_dim, dim3* grid_dim, int* w_size) {
  (void)modules, (void)device_function;
  (void)thread_limit, (void)tid, (void)bid, (void)block_dim, (void)grid_dim, (void)w_size;
  size_t at = stub_slot(host_function);
  if (at < STUB_SLOTS) g_stub_keys[at] = host_function, g_stub_names[at] = device_name;
}
EXPORT hipError_t __hipPushCallConfiguration(dim3 grid, dim3 block, size_t shared_bytes,
                                             hipStream_t stream) {
  (void)grid, (void)block, (void)shared_bytes, (void)stream;
  return hipSuccess;
}
EXPORT hipError_t __hipPopCallConfiguration(dim3* grid, dim3* block, size_t* shared_bytes,
                                            hipStream_t* stream) {
  (void)grid, (void)block, (void)shared_bytes, (void)stream;
  return hipSuccess;
}
EXPORT hipError_t hipModuleLoadData(hipModule_t* module, const void* image) {
  (void)image;
  if (!module) return fail(hipErrorInvalidValue);
  *module = (hipModule_t)&g_dummy_handle;
  return hipSuccess;
}
EXPORT hipError_t hipModuleUnload(hipModule_t module) {
  (void)module;
  return hipSuccess;
}

/* A function handle carries its kernel's name (after a magic word), so launches through
   it can be recorded. Handles live as long as the process: Tensile caches them. */
#define FUNCTION_MAGIC 0x68697066756e6331ull /* "hipfunc1" */
struct named_function {
  uint64_t magic;
  char name[];
};

EXPORT hipError_t hipModuleGetFunction(hipFunction_t* function, hipModule_t module,
                                       const char* name) {
  (void)module;
  if (!function || !name) {
    return fail_at("hipModuleGetFunction", hipErrorInvalidValue);
  }
  size_t length = strlen(name);
  struct named_function* handle = malloc(sizeof *handle + length + 1);
  if (!handle) return fail(hipErrorOutOfMemory);
  handle->magic = FUNCTION_MAGIC;
  memcpy(handle->name, name, length + 1);
  *function = (hipFunction_t)handle;
  return hipSuccess;
}
EXPORT hipError_t hipModuleOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks,
                                                                     hipFunction_t f,
                                                                     int block_size,
                                                                     size_t shared_bytes) {
  (void)f, (void)block_size, (void)shared_bytes;
  if (blocks) *blocks = 1;
  return hipSuccess;
}
EXPORT hipError_t hipLaunchKernel(const void* function, dim3 grid, dim3 block, void** args,
                                  size_t shared_bytes, hipStream_t stream) {
  (void)grid, (void)block, (void)args, (void)shared_bytes, (void)stream;
  if (!g_execute) return fail(hipErrorNotSupported);
  size_t at = stub_slot(function);
  const char* name = at < STUB_SLOTS && g_stub_keys[at] == function ? g_stub_names[at] : NULL;
  if (!name) {
    return fail_at("hipLaunchKernel (unregistered kernel)", hipErrorInvalidDeviceFunction);
  }
  record_launch(name);
  return hipSuccess;
}

static hipError_t launch_named(const char* where, hipFunction_t f) {
  if (!g_execute) return fail(hipErrorNotSupported);
  const struct named_function* handle = (const struct named_function*)f;
  if (!handle || handle->magic != FUNCTION_MAGIC) {
    return fail_at(where, hipErrorInvalidResourceHandle);
  }
  record_launch(handle->name);
  return hipSuccess;
}

EXPORT hipError_t hipExtModuleLaunchKernel(hipFunction_t f, uint32_t gx, uint32_t gy,
                                           uint32_t gz, uint32_t bx, uint32_t by, uint32_t bz,
                                           size_t shared_bytes, hipStream_t stream,
                                           void** params, void** extra, hipEvent_t start,
                                           hipEvent_t stop, uint32_t flags) {
  (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shared_bytes;
  (void)stream, (void)params, (void)extra, (void)start, (void)stop, (void)flags;
  return launch_named("hipExtModuleLaunchKernel", f);
}

EXPORT hipError_t hipModuleLaunchKernel(hipFunction_t f, unsigned int gx, unsigned int gy,
                                        unsigned int gz, unsigned int bx, unsigned int by,
                                        unsigned int bz, unsigned int shared_bytes,
                                        hipStream_t stream, void** params, void** extra) {
  (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shared_bytes;
  (void)stream, (void)params, (void)extra;
  return launch_named("hipModuleLaunchKernel", f);
}

/* ---- hipBLASLt (hipblasLtCreate, hipblasLtMatmulAlgoGetHeuristic) ------------------ */

/* hipblasLtCreate clears its own 25 MiB buffer. */
EXPORT hipError_t hipMemset(void* dst, int value, size_t bytes) {
  return hipMemsetAsync(dst, value, bytes, NULL);
}

/* hipblasLtCreate loads hipblaslt/library/Kernels.so-000-<arch>.hsaco by path: a missing
   file is the real runtime's error, so a tree without it fails as it would on a GPU. */
EXPORT hipError_t hipModuleLoad(hipModule_t* module, const char* path) {
  if (!module || !path) return fail(hipErrorInvalidValue);
  FILE* file = fopen(path, "rb");
  if (!file) return fail(hipErrorFileNotFound);
  fclose(file);
  *module = (hipModule_t)&g_dummy_handle;
  return hipSuccess;
}
