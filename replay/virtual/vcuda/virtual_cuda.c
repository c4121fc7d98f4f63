/*
 * A stand-in CUDA runtime (libcudart.so.13 or .so.12) with one virtual GPU that hands out
 * address space only, so that PyTorch's own caching allocator (libc10_cuda.so) runs with no
 * GPU: the replay of a memory snapshot through it gives the allocator's own answers.
 *
 * The device (replay/virtual/devices.py sets these for a preset):
 *   HIPMEM_VCUDA_MEMORY_BYTES       device memory, as cudaMemGetInfo/totalGlobalMem report it
 *   HIPMEM_VCUDA_GRANULARITY_BYTES  cuMemGetAllocationGranularity's answer (default 2 MiB)
 *   HIPMEM_VCUDA_NAME               cudaDeviceProp.name
 *   HIPMEM_VCUDA_TRACE=1            every call on stderr (what the allocator asks of a runtime)
 *   HIPMEM_VCUDA_PLACEMENT=up       lowest free address range first (default: highest)
 *   HIPMEM_VCUDA_CONTEXT_BYTES      a recording's: device memory the context keeps from the start
 * or hipmem_vcuda_configure() before the allocator's first call.
 *
 * Memory: device memory is a counter (committed bytes), never host memory. Addresses come
 * from one range reserved with mmap(PROT_NONE, MAP_NORESERVE): nothing is ever committed, so
 * a 288 GiB device costs no RSS, and a stray access by the host faults instead of corrupting
 * anything. Allocations (cudaMalloc, cuMemAddressReserve) take the highest free address range
 * that fits (aligned to the granularity), so successive allocations get decreasing addresses and
 * a freed range is reused, top first. That is how the CUDA driver was seen to place segments:
 * in the snapshots recorded on the H200, later segments mostly lie below earlier ones (all 22
 * of `oom`'s). PyTorch breaks ties between equal-size cached blocks by address, which decides
 * which blocks age and which segments garbage collection frees: with the lowest range first,
 * train-default with garbage_collection_threshold:0.6 reserved 6 MiB more than on the H200;
 * top down, the same bytes. HIPMEM_VCUDA_PLACEMENT=up gives the lowest range first, to measure
 * what placement changes.
 *
 * A request past the device's memory is refused (cudaErrorMemoryAllocation from cudaMalloc,
 * CUDA_ERROR_OUT_OF_MEMORY from cuMemCreate), and PyTorch raises its own out-of-memory error.
 * Streams and events are numbers. Calls a replay never makes (copies, IPC, graphs, memory
 * pools, peers) return cudaErrorNotSupported, whatever their arguments: never a crash.
 *
 * Built on first use by replay/virtual/build.py against the CUDA headers of the PyTorch
 * build it stands in for (so cudaDeviceProp has the real layout), with the version script of
 * that soname (libcudart.so.N.map) giving its symbols the version libc10_cuda.so imports.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define EXPORT __attribute__((visibility("default")))
#define MIB ((size_t)1 << 20)
#define GIB ((size_t)1 << 30)

/* ---- the device ---------------------------------------------------------------------- */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_trace;
static int g_place_up; /* HIPMEM_VCUDA_PLACEMENT=up: the lowest free range first */
static char g_name[256] = "hipmem virtual GPU";
static size_t g_total_bytes = 80 * GIB;
static size_t g_granularity_bytes = 2 * MIB;
static size_t g_committed_bytes;      /* device memory in use: cudaMalloc + cuMemCreate */
static size_t g_committed_peak_bytes;
static unsigned long long g_refusals; /* requests refused for want of device memory */
/* What cudaMalloc was asked for, unrounded: the bytes an RMM resource took from its upstream
   (hipmem_vcuda_requested), exact whatever the device's granularity. */
static unsigned long long g_asked_bytes, g_asked_peak_bytes, g_asked_calls;
static __thread cudaError_t g_last_error = cudaSuccess;

static size_t env_size(const char* name, size_t fallback) {
  const char* text = getenv(name);
  return text && *text ? (size_t)strtoull(text, NULL, 0) : fallback;
}

static void trace(const char* what, const char* detail) {
  if (g_trace) fprintf(stderr, "vcuda: %s %s\n", what, detail ? detail : "");
}

static void arena_init(void);
#ifdef HIPMEM_VCUDA_RECORD
/* A recording plays a real device's attributes (replay/record/csrc/record_runtime.c). */
static int attribute(int which);
static void record_properties(struct cudaDeviceProp* prop);
#endif

static void init_device(void) {
  g_trace = getenv("HIPMEM_VCUDA_TRACE") != NULL && *getenv("HIPMEM_VCUDA_TRACE") == '1';
  g_total_bytes = env_size("HIPMEM_VCUDA_MEMORY_BYTES", g_total_bytes);
  g_granularity_bytes = env_size("HIPMEM_VCUDA_GRANULARITY_BYTES", g_granularity_bytes);
  if (g_granularity_bytes == 0 || (g_granularity_bytes & (g_granularity_bytes - 1)))
    g_granularity_bytes = 2 * MIB; /* a power of two, as drivers report */
  const char* placement = getenv("HIPMEM_VCUDA_PLACEMENT");
  g_place_up = placement != NULL && strcmp(placement, "up") == 0;
  const char* name = getenv("HIPMEM_VCUDA_NAME");
  if (name && *name) snprintf(g_name, sizeof g_name, "%s", name);
  arena_init();
#ifdef HIPMEM_VCUDA_RECORD
  /* What a running program's CUDA context keeps of the device before its first allocation
     (measured on the GPU played): never PyTorch's, never free. */
  g_committed_bytes = g_committed_peak_bytes = env_size("HIPMEM_VCUDA_CONTEXT_BYTES", 0);
#endif
}

static void ensure_init(void) { pthread_once(&g_once, init_device); }

static cudaError_t fail_at(const char* where, cudaError_t err) {
  g_last_error = err;
  trace(where, "-> error");
  return err;
}
#define fail(err) fail_at(__func__, (err))

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

/* ---- address space: used ranges sorted by address, highest (or lowest) fit first --------- */

typedef struct {
  uintptr_t start;
  size_t size;
  size_t asked; /* the bytes cudaMalloc was asked for (RANGE_MALLOC) */
  int kind;     /* RANGE_MALLOC or RANGE_RESERVE */
} Range;

enum { RANGE_MALLOC = 1, RANGE_RESERVE = 2 };

static uintptr_t g_arena_start;
static size_t g_arena_bytes;
static Range* g_ranges;
static size_t g_range_count, g_range_room;

static void arena_init(void) {
  /* 64 TiB of address space, whatever the device's size: expandable segments reserve about the
     device's size per stream and pool, and a device can be resized between replays
     (hipmem_vcuda_configure). Halved until the kernel agrees (ulimit -v). */
  for (size_t want = (size_t)64 << 40; want >= 16 * GIB; want /= 2) {
    void* at = mmap(NULL, want + 2 * GIB, PROT_NONE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (at != MAP_FAILED) {
      g_arena_start = round_up((uintptr_t)at, GIB); /* aligned like a driver's first address */
      g_arena_bytes = want;
      return;
    }
  }
}

/* The lowest gap of `size` bytes aligned to `align`: its address and the index its range takes
   in g_ranges, or 0. The lock is held. */
static uintptr_t lowest_gap(size_t size, size_t align, size_t* index) {
  uintptr_t at = round_up(g_arena_start, align);
  size_t i = 0;
  for (; i < g_range_count; ++i) {
    if (at + size <= g_ranges[i].start) break;
    uintptr_t next = round_up(g_ranges[i].start + g_ranges[i].size, align);
    if (next > at) at = next;
  }
  *index = i;
  return at + size > g_arena_start + g_arena_bytes ? 0 : at;
}

/* The top of the highest gap of `size` bytes aligned to `align`, or 0; as lowest_gap. */
static uintptr_t highest_gap(size_t size, size_t align, size_t* index) {
  uintptr_t limit = g_arena_start + g_arena_bytes;
  for (size_t i = g_range_count + 1; i-- > 0;) {
    uintptr_t floor_at = i ? g_ranges[i - 1].start + g_ranges[i - 1].size : g_arena_start;
    if (i < g_range_count) limit = g_ranges[i].start;
    if (limit >= size) {
      uintptr_t at = (limit - size) / align * align;
      if (at >= round_up(floor_at, align)) {
        *index = i;
        return at;
      }
    }
  }
  return 0;
}

/* The range [at, at + size) as g_ranges[i]: `at`, or 0 with no memory for it. The lock is
   held. */
static uintptr_t arena_insert(size_t i, uintptr_t at, size_t size, int kind) {
  if (g_range_count == g_range_room) {
    size_t room = g_range_room ? 2 * g_range_room : 256;
    Range* grown = realloc(g_ranges, room * sizeof *grown);
    if (!grown) return 0;
    g_ranges = grown;
    g_range_room = room;
  }
  memmove(g_ranges + i + 1, g_ranges + i, (g_range_count - i) * sizeof *g_ranges);
  g_ranges[i] = (Range){at, size, 0, kind};
  ++g_range_count;
  return at;
}

/* A range of `size` bytes aligned to `align` (0 when none is free), placed as the device's
   placement says. The lock is held. */
static uintptr_t arena_take(size_t size, size_t align, int kind) {
  size_t i = 0;
  uintptr_t at = g_place_up ? lowest_gap(size, align, &i) : highest_gap(size, align, &i);
  return at ? arena_insert(i, at, size, kind) : 0;
}

/* The index of the first range starting at or above `start`. The lock is held. */
static size_t arena_above(uintptr_t start) {
  size_t lo = 0, hi = g_range_count;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (g_ranges[mid].start < start) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* The index of the range starting at `start`, or -1. The lock is held. */
static long arena_find(uintptr_t start) {
  size_t i = arena_above(start);
  return i < g_range_count && g_ranges[i].start == start ? (long)i : -1;
}

static void arena_drop(size_t index) {
  memmove(g_ranges + index, g_ranges + index + 1,
          (g_range_count - index - 1) * sizeof *g_ranges);
  --g_range_count;
}

/* The range [at, at + size) if no live range overlaps it (and takes it), else 0. The lock is
   held. */
static uintptr_t arena_take_at(uintptr_t at, size_t size, int kind) {
  if (at < g_arena_start || at + size > g_arena_start + g_arena_bytes) return 0;
  size_t i = arena_above(at);
  if (i > 0 && g_ranges[i - 1].start + g_ranges[i - 1].size > at) return 0;
  if (i < g_range_count && at + size > g_ranges[i].start) return 0;
  return arena_insert(i, at, size, kind);
}

/* ---- the recorded placement ------------------------------------------------------------
   PyTorch breaks ties between equal-size cached blocks by address, and the CUDA driver places
   segments in an order of its own (not top down: in an FSDP2 snapshot recorded on the H200,
   20 MiB segments alternate above and below the first). A replay of a snapshot knows where
   the driver put each segment: the plan is the recording's cudaMalloc and cudaFree calls in
   order, (size, offset) and (0, offset), offsets in the recorded order of addresses
   (replay/virtual/placement.py). While the calls are the recorded ones, each cudaMalloc takes
   its recorded place; the first that is not (another size, a place taken, a free the
   recording did not make) ends the plan: the run has gone its own way, and later segments are
   placed top down. */
static unsigned long long* g_plan; /* (size, offset) pairs; size 0: a free */
static size_t g_plan_count, g_plan_next;

/* The plan's place for a cudaMalloc of `size` bytes (`bytes` rounded), or 0 when the plan is
   over. The lock is held. */
static uintptr_t plan_take(size_t size, size_t bytes) {
  if (g_plan_next >= g_plan_count) return 0;
  unsigned long long const* step = g_plan + 2 * g_plan_next;
  uintptr_t at = step[0] == size && size != 0
                     ? arena_take_at(g_arena_start + step[1], bytes, RANGE_MALLOC)
                     : 0;
  g_plan_next = at ? g_plan_next + 1 : g_plan_count;
  return at;
}

/* A cudaFree of `at`: the plan's next step, or the end of the plan. The lock is held. */
static void plan_free(uintptr_t at) {
  if (g_plan_next >= g_plan_count) return;
  unsigned long long const* step = g_plan + 2 * g_plan_next;
  int recorded = step[0] == 0 && g_arena_start + step[1] == at;
  g_plan_next = recorded ? g_plan_next + 1 : g_plan_count;
}

/* Device memory: 1 when `bytes` more fit on the device (and takes them). The lock is held. */
static int commit(size_t bytes) {
  if (bytes > g_total_bytes - g_committed_bytes) {
    ++g_refusals;
    return 0;
  }
  g_committed_bytes += bytes;
  if (g_committed_bytes > g_committed_peak_bytes) g_committed_peak_bytes = g_committed_bytes;
  return 1;
}

/* ---- hipmem's own entry points (not CUDA's) ----------------------------------------------- */

typedef struct {
  unsigned long long total_bytes;
  unsigned long long granularity_bytes;
  unsigned long long committed_bytes;
  unsigned long long committed_peak_bytes;
  unsigned long long refusals;
  unsigned long long ranges; /* live address ranges (cudaMalloc + cuMemAddressReserve) */
  unsigned long long arena_bytes;
} HipmemVcudaState;

/* Set the device before the allocator runs; 0 keeps a value. Returns 0, or -1 while memory
   is in use (a device does not change size under a running program). */
EXPORT int hipmem_vcuda_configure(unsigned long long total_bytes,
                                  unsigned long long granularity_bytes) {
  ensure_init();
  pthread_mutex_lock(&g_lock);
  int busy = g_committed_bytes != 0;
  if (!busy) {
    if (total_bytes) g_total_bytes = total_bytes;
    if (granularity_bytes && !(granularity_bytes & (granularity_bytes - 1)))
      g_granularity_bytes = granularity_bytes;
    g_committed_peak_bytes = 0;
    g_refusals = 0;
    g_asked_peak_bytes = g_asked_calls = 0;
  }
  pthread_mutex_unlock(&g_lock);
  return busy ? -1 : 0;
}

/* Where the coming cudaMalloc calls go (the recorded placement above): `count` pairs of
   (size, offset), copied. Returns 0, or -1 while memory is in use or with no memory for it. */
EXPORT int hipmem_vcuda_place(const unsigned long long* pairs, unsigned long long count) {
  ensure_init();
  pthread_mutex_lock(&g_lock);
  int bad = g_committed_bytes != 0;
  unsigned long long* plan = NULL;
  if (!bad && count) {
    plan = malloc(2 * count * sizeof *plan);
    bad = plan == NULL;
    if (plan) memcpy(plan, pairs, 2 * count * sizeof *plan);
  }
  if (!bad) {
    free(g_plan);
    g_plan = plan;
    g_plan_count = count;
    g_plan_next = 0;
  }
  pthread_mutex_unlock(&g_lock);
  return bad ? -1 : 0;
}

EXPORT void hipmem_vcuda_state(HipmemVcudaState* out) {
  ensure_init();
  pthread_mutex_lock(&g_lock);
  *out = (HipmemVcudaState){g_total_bytes, g_granularity_bytes, g_committed_bytes,
                            g_committed_peak_bytes, g_refusals, g_range_count, g_arena_bytes};
  pthread_mutex_unlock(&g_lock);
}

/* The bytes cudaMalloc was asked for and not yet freed, their peak and the calls granted since
   the last hipmem_vcuda_configure. */
EXPORT void hipmem_vcuda_requested(unsigned long long* current_bytes,
                                   unsigned long long* peak_bytes, unsigned long long* calls) {
  pthread_mutex_lock(&g_lock);
  if (current_bytes) *current_bytes = g_asked_bytes;
  if (peak_bytes) *peak_bytes = g_asked_peak_bytes;
  if (calls) *calls = g_asked_calls;
  pthread_mutex_unlock(&g_lock);
}

/* ---- device queries -------------------------------------------------------------------- */

EXPORT cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return fail(cudaErrorInvalidValue);
  *count = 1;
  return cudaSuccess;
}

EXPORT cudaError_t cudaGetDevice(int* device) {
  if (!device) return fail(cudaErrorInvalidValue);
  *device = 0;
  return cudaSuccess;
}

EXPORT cudaError_t cudaSetDevice(int device) {
  return device == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice);
}

/* CUDA 12's header maps this name to cudaGetDeviceProperties_v2, the symbol its builds import. */
EXPORT cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* prop, int device) {
  if (!prop) return fail(cudaErrorInvalidValue);
  if (device != 0) return fail(cudaErrorInvalidDevice);
  ensure_init();
  trace(__func__, "");
  memset(prop, 0, sizeof *prop);
  snprintf(prop->name, sizeof prop->name, "%s", g_name);
  prop->totalGlobalMem = g_total_bytes;
  prop->major = 9;  /* a Hopper-class device: no answer of the allocator depends on it */
  prop->minor = 0;
  prop->multiProcessorCount = 132;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 0x7fffffff;
  prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
  prop->sharedMemPerBlock = 48 * 1024;
  prop->regsPerBlock = 65536;
  prop->totalConstMem = 64 * 1024;
  prop->l2CacheSize = 50 * 1024 * 1024;
  prop->memoryBusWidth = 5120;
  prop->textureAlignment = 512;
  prop->memPitch = (size_t)-1 >> 1;
  prop->concurrentKernels = 1;
  prop->unifiedAddressing = 1;
  prop->managedMemory = 1;
  prop->pciBusID = 1;
#ifdef HIPMEM_VCUDA_RECORD
  record_properties(prop);
#endif
  return cudaSuccess;
}

EXPORT cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  if (least) *least = 0;  /* the range an H100 reports */
  if (greatest) *greatest = -5;
  return cudaSuccess;
}

EXPORT cudaError_t cudaDriverGetVersion(int* version) {
  if (!version) return fail(cudaErrorInvalidValue);
  *version = CUDART_VERSION;
  return cudaSuccess;
}

EXPORT cudaError_t cudaRuntimeGetVersion(int* version) { return cudaDriverGetVersion(version); }

EXPORT cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }

EXPORT cudaError_t cudaGetLastError(void) {
  cudaError_t err = g_last_error;
  g_last_error = cudaSuccess;
  return err;
}

EXPORT cudaError_t cudaPeekAtLastError(void) { return g_last_error; }

EXPORT const char* cudaGetErrorName(cudaError_t err) {
  switch (err) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    default: return "cudaErrorUnknown";
  }
}

EXPORT const char* cudaGetErrorString(cudaError_t err) {
  switch (err) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNotSupported: return "operation not supported (hipmem's virtual GPU)";
    default: return "unknown error";
  }
}

/* ---- device memory ----------------------------------------------------------------------- */

EXPORT cudaError_t cudaMalloc(void** ptr, size_t size) {
  if (!ptr) return fail(cudaErrorInvalidValue);
  ensure_init();
  *ptr = NULL;
  if (size == 0) return cudaSuccess;
  size_t bytes = round_up(size, g_granularity_bytes);
  pthread_mutex_lock(&g_lock);
  uintptr_t at = 0;
  if (commit(bytes)) {
    at = plan_take(size, bytes);
    if (!at) at = arena_take(bytes, g_granularity_bytes, RANGE_MALLOC);
    if (!at) g_committed_bytes -= bytes;
  }
  if (at) {
    g_ranges[arena_find(at)].asked = size;
    g_asked_bytes += size;
    if (g_asked_bytes > g_asked_peak_bytes) g_asked_peak_bytes = g_asked_bytes;
    ++g_asked_calls;
  }
  pthread_mutex_unlock(&g_lock);
  if (g_trace) fprintf(stderr, "vcuda: cudaMalloc %zu -> %#lx\n", size, (unsigned long)at);
  if (!at) return fail(cudaErrorMemoryAllocation);
  *ptr = (void*)at;
  return cudaSuccess;
}

EXPORT cudaError_t cudaFree(void* ptr) {
  if (!ptr) return cudaSuccess;
  pthread_mutex_lock(&g_lock);
  long index = arena_find((uintptr_t)ptr);
  int ok = index >= 0 && g_ranges[index].kind == RANGE_MALLOC;
  if (ok) {
    plan_free((uintptr_t)ptr);
    g_committed_bytes -= g_ranges[index].size;
    g_asked_bytes -= g_ranges[index].asked;
    arena_drop((size_t)index);
  }
  pthread_mutex_unlock(&g_lock);
  if (g_trace) fprintf(stderr, "vcuda: cudaFree %p%s\n", ptr, ok ? "" : " (not allocated)");
  return ok ? cudaSuccess : fail(cudaErrorInvalidValue);
}

EXPORT cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  ensure_init();
  pthread_mutex_lock(&g_lock);
  if (free_bytes) *free_bytes = g_total_bytes - g_committed_bytes;
  if (total_bytes) *total_bytes = g_total_bytes;
  pthread_mutex_unlock(&g_lock);
  return cudaSuccess;
}

/* ---- streams and events: numbers, always complete --------------------------------------- */

static uintptr_t g_next_handle = 0x10000;

static void* new_handle(void) {
  return (void*)__atomic_add_fetch(&g_next_handle, 0x10, __ATOMIC_RELAXED);
}

EXPORT cudaError_t cudaStreamCreateWithPriority(cudaStream_t* stream, unsigned flags, int prio) {
  (void)flags;
  (void)prio;
  if (!stream) return fail(cudaErrorInvalidValue);
  *stream = (cudaStream_t)new_handle();
  trace(__func__, "");
  return cudaSuccess;
}

EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  return cudaStreamCreateWithPriority(stream, flags, 0);
}

EXPORT cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return cudaStreamCreateWithPriority(stream, 0, 0);
}

EXPORT cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  (void)stream;
  return cudaSuccess;
}

EXPORT cudaError_t cudaStreamQuery(cudaStream_t stream) {
  (void)stream;
  return cudaSuccess;
}

EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  (void)stream;
  return cudaSuccess;
}

EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags) {
  (void)stream;
  (void)event;
  (void)flags;
  return cudaSuccess;
}

EXPORT cudaError_t cudaStreamIsCapturing(cudaStream_t stream,
                                         enum cudaStreamCaptureStatus* status) {
  (void)stream;
  if (!status) return fail(cudaErrorInvalidValue);
  *status = cudaStreamCaptureStatusNone;
  return cudaSuccess;
}

EXPORT cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode* mode) {
  (void)mode; /* no capture ever runs: the mode asked for changes nothing */
  return cudaSuccess;
}

EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  (void)flags;
  if (!event) return fail(cudaErrorInvalidValue);
  *event = (cudaEvent_t)new_handle();
  return cudaSuccess;
}

EXPORT cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, 0); }

EXPORT cudaError_t cudaEventDestroy(cudaEvent_t event) {
  (void)event;
  return cudaSuccess;
}

EXPORT cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  (void)event;
  (void)stream;
  return cudaSuccess;
}

EXPORT cudaError_t cudaEventQuery(cudaEvent_t event) {
  (void)event;
  return cudaSuccess; /* no work is ever pending */
}

EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  (void)event;
  return cudaSuccess;
}

/* Every span between two events measures the same: kernels take no time here, and timing code
   divides by what it measured (Triton's do_bench, in torch.compile's benchmarks), so a span is
   1 ms, never 0. A choice made by timing is then the first of its candidates. */
#define EVENT_SPAN_MS 1.0f

EXPORT cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  (void)start;
  (void)end;
  if (!ms) return fail(cudaErrorInvalidValue);
  *ms = EVENT_SPAN_MS;
  return cudaSuccess;
}

/* ---- the driver API of expandable segments (cuMem*), reached by entry point ---------------- */

typedef struct {
  size_t size;
  int live;
} Handle;

static Handle* g_handles;          /* index = handle - 1 */
static size_t g_handle_count, g_handle_room;
static size_t* g_free_handles;     /* released indices, reused */
static size_t g_free_count, g_free_room;

static CUresult drv_fail(const char* where, CUresult err) {
  trace(where, "-> driver error");
  return err;
}

static CUresult vcu_GetErrorString(CUresult err, const char** text) {
  if (!text) return CUDA_ERROR_INVALID_VALUE;
  switch (err) {
    case CUDA_SUCCESS: *text = "no error"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *text = "out of memory"; break;
    case CUDA_ERROR_INVALID_VALUE: *text = "invalid argument"; break;
    case CUDA_ERROR_NOT_SUPPORTED: *text = "operation not supported (hipmem's virtual GPU)"; break;
    default: *text = "unknown error"; break;
  }
  return CUDA_SUCCESS;
}

static CUresult vcu_DeviceGet(CUdevice* device, int ordinal) {
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
  *device = 0;
  return CUDA_SUCCESS;
}

static CUresult vcu_DeviceGetAttribute(int* value, CUdevice_attribute which, CUdevice dev) {
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
#ifdef HIPMEM_VCUDA_RECORD
  *value = attribute((int)which);
#else
  /* Virtual memory management is what expandable segments need; no sharing of handles. */
  *value = which == CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED ? 1 : 0;
#endif
  if (g_trace) fprintf(stderr, "vcuda: cuDeviceGetAttribute %d -> %d\n", (int)which, *value);
  return CUDA_SUCCESS;
}

static CUresult vcu_MemGetAllocationGranularity(size_t* granularity,
                                                const CUmemAllocationProp* prop,
                                                CUmemAllocationGranularity_flags option) {
  (void)prop;
  (void)option;
  if (!granularity) return CUDA_ERROR_INVALID_VALUE;
  ensure_init();
  *granularity = g_granularity_bytes;
  return CUDA_SUCCESS;
}

static CUresult vcu_MemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment,
                                      CUdeviceptr addr, unsigned long long flags) {
  (void)addr; /* a hint, which a driver may ignore */
  (void)flags;
  if (!ptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  ensure_init();
  size_t align = alignment > g_granularity_bytes ? alignment : g_granularity_bytes;
  pthread_mutex_lock(&g_lock);
  uintptr_t at = arena_take(round_up(size, g_granularity_bytes), align, RANGE_RESERVE);
  pthread_mutex_unlock(&g_lock);
  if (g_trace) fprintf(stderr, "vcuda: cuMemAddressReserve %zu -> %#lx\n", size, (unsigned long)at);
  if (!at) return drv_fail(__func__, CUDA_ERROR_OUT_OF_MEMORY);
  *ptr = (CUdeviceptr)at;
  return CUDA_SUCCESS;
}

static CUresult vcu_MemAddressFree(CUdeviceptr ptr, size_t size) {
  (void)size;
  pthread_mutex_lock(&g_lock);
  long index = arena_find((uintptr_t)ptr);
  int ok = index >= 0 && g_ranges[index].kind == RANGE_RESERVE;
  if (ok) arena_drop((size_t)index);
  pthread_mutex_unlock(&g_lock);
  return ok ? CUDA_SUCCESS : drv_fail(__func__, CUDA_ERROR_INVALID_VALUE);
}

static CUresult vcu_MemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                              const CUmemAllocationProp* prop, unsigned long long flags) {
  (void)prop;
  (void)flags;
  if (!handle || size == 0) return CUDA_ERROR_INVALID_VALUE;
  ensure_init();
  if (size % g_granularity_bytes) return drv_fail(__func__, CUDA_ERROR_INVALID_VALUE);
  CUresult result = CUDA_SUCCESS;
  pthread_mutex_lock(&g_lock);
  if (!commit(size)) {
    result = CUDA_ERROR_OUT_OF_MEMORY;
  } else if (g_free_count) {
    size_t index = g_free_handles[--g_free_count];
    g_handles[index] = (Handle){size, 1};
    *handle = index + 1;
  } else {
    if (g_handle_count == g_handle_room) {
      size_t room = g_handle_room ? 2 * g_handle_room : 1024;
      Handle* grown = realloc(g_handles, room * sizeof *grown);
      if (!grown) {
        g_committed_bytes -= size;
        pthread_mutex_unlock(&g_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
      }
      g_handles = grown;
      g_handle_room = room;
    }
    g_handles[g_handle_count] = (Handle){size, 1};
    *handle = ++g_handle_count;
  }
  pthread_mutex_unlock(&g_lock);
  if (g_trace) fprintf(stderr, "vcuda: cuMemCreate %zu -> %d\n", size, (int)result);
  return result;
}

static CUresult vcu_MemRelease(CUmemGenericAllocationHandle handle) {
  CUresult result = CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&g_lock);
  if (handle >= 1 && handle <= g_handle_count && g_handles[handle - 1].live) {
    if (g_free_count == g_free_room) {
      size_t room = g_free_room ? 2 * g_free_room : 1024;
      size_t* grown = realloc(g_free_handles, room * sizeof *grown);
      if (grown) {
        g_free_handles = grown;
        g_free_room = room;
      }
    }
    g_committed_bytes -= g_handles[handle - 1].size;
    g_handles[handle - 1].live = 0;
    if (g_free_count < g_free_room) g_free_handles[g_free_count++] = handle - 1;
    result = CUDA_SUCCESS;
  }
  pthread_mutex_unlock(&g_lock);
  return result == CUDA_SUCCESS ? result : drv_fail(__func__, result);
}

static CUresult vcu_MemMap(CUdeviceptr ptr, size_t size, size_t offset,
                           CUmemGenericAllocationHandle handle, unsigned long long flags) {
  (void)ptr;
  (void)size;
  (void)offset;
  (void)handle;
  (void)flags;
  return CUDA_SUCCESS; /* the address range and the memory are both accounted already */
}

static CUresult vcu_MemUnmap(CUdeviceptr ptr, size_t size) {
  (void)ptr;
  (void)size;
  return CUDA_SUCCESS;
}

static CUresult vcu_MemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                                 size_t count) {
  (void)ptr;
  (void)size;
  (void)desc;
  (void)count;
  return CUDA_SUCCESS;
}

/* Every other driver function PyTorch looks up: present (its lookup asserts on a null) but
   not supported. The x86-64 C calling convention lets a function ignore its arguments. */
static CUresult vcu_NotSupported(void) { return drv_fail("driver call", CUDA_ERROR_NOT_SUPPORTED); }

typedef struct {
  const char* name;
  void* function;
} Entry;

static const Entry g_driver[] = {
    {"cuGetErrorString", (void*)vcu_GetErrorString},
    {"cuDeviceGet", (void*)vcu_DeviceGet},
    {"cuDeviceGetAttribute", (void*)vcu_DeviceGetAttribute},
    {"cuMemGetAllocationGranularity", (void*)vcu_MemGetAllocationGranularity},
    {"cuMemAddressReserve", (void*)vcu_MemAddressReserve},
    {"cuMemAddressFree", (void*)vcu_MemAddressFree},
    {"cuMemCreate", (void*)vcu_MemCreate},
    {"cuMemRelease", (void*)vcu_MemRelease},
    {"cuMemMap", (void*)vcu_MemMap},
    {"cuMemUnmap", (void*)vcu_MemUnmap},
    {"cuMemSetAccess", (void*)vcu_MemSetAccess},
    {"cuMemExportToShareableHandle", (void*)vcu_NotSupported},
    {"cuMemImportFromShareableHandle", (void*)vcu_NotSupported},
    {"cuMemRetainAllocationHandle", (void*)vcu_NotSupported},
    {"cuMemGetAllocationPropertiesFromHandle", (void*)vcu_NotSupported},
    /* Required by PyTorch 2.12 on (its driver API table must be complete), never called by
       a replay: refused if it ever is. */
    {"cuMemGetAddressRange", (void*)vcu_NotSupported},
    {"cuMemsetD32Async", (void*)vcu_NotSupported},
    {"cuStreamWriteValue32", (void*)vcu_NotSupported},
};

static cudaError_t entry_point(const char* symbol, void** function,
                               enum cudaDriverEntryPointQueryResult* status) {
  if (!symbol || !function) return fail(cudaErrorInvalidValue);
  *function = NULL;
  for (size_t i = 0; i < sizeof g_driver / sizeof *g_driver; ++i) {
    if (strcmp(symbol, g_driver[i].name) == 0) *function = g_driver[i].function;
  }
  trace("driver entry point", symbol);
  /* What the driver says of a symbol it lacks: the optional ones (green contexts, multicast)
     stay null, which PyTorch checks before use. */
  if (status) *status = *function ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;
}

/* The driver functions by name, for the stand-in libcuda.so.1 (virtual_libcuda.c) that
   PyTorch up to 2.7 opens with dlopen instead of asking the runtime. */
EXPORT void* hipmem_vcuda_driver_function(const char* symbol) {
  void* function = NULL;
  entry_point(symbol, &function, NULL);
  return function;
}

EXPORT cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** function,
                                                    unsigned int version,
                                                    unsigned long long flags,
                                                    enum cudaDriverEntryPointQueryResult* status) {
  (void)version;
  (void)flags;
  return entry_point(symbol, function, status);
}

EXPORT cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** function,
                                           unsigned long long flags,
                                           enum cudaDriverEntryPointQueryResult* status) {
  (void)flags;
  return entry_point(symbol, function, status);
}

/* ---- what a replay never calls: present, and refused ------------------------------------ */

static cudaError_t not_supported(const char* name) { return fail_at(name, cudaErrorNotSupported); }

/* Defined under the CUDA names with asm labels, so one definition serves the CUDA 12 and 13
   headers, whose prototypes of these functions differ. */
#define NOT_SUPPORTED(name)                                                 \
  EXPORT cudaError_t vcuda_stub_##name(void) __asm__(#name);                \
  cudaError_t vcuda_stub_##name(void) { return not_supported(#name); }

NOT_SUPPORTED(cudaDeviceEnablePeerAccess)
NOT_SUPPORTED(cudaDeviceGetDefaultMemPool)
NOT_SUPPORTED(cudaMallocAsync)
NOT_SUPPORTED(cudaFreeAsync)
NOT_SUPPORTED(cudaMemPoolGetAttribute)
NOT_SUPPORTED(cudaMemPoolSetAttribute)
NOT_SUPPORTED(cudaMemPoolSetAccess)
NOT_SUPPORTED(cudaMemPoolTrimTo)
NOT_SUPPORTED(cudaMemcpyPeerAsync)
NOT_SUPPORTED(cudaIpcGetMemHandle)
NOT_SUPPORTED(cudaIpcOpenMemHandle)
NOT_SUPPORTED(cudaIpcCloseMemHandle)
NOT_SUPPORTED(cudaGraphAddEmptyNode)
NOT_SUPPORTED(cudaGraphNodeGetDependencies)
NOT_SUPPORTED(cudaGraphNodeGetType)
NOT_SUPPORTED(cudaStreamUpdateCaptureDependencies)

/* What a recording (replay/record/csrc/record_runtime.c) answers instead. */
#ifndef HIPMEM_VCUDA_RECORD
NOT_SUPPORTED(cudaDeviceCanAccessPeer)
NOT_SUPPORTED(cudaMemcpy)
NOT_SUPPORTED(cudaMemcpyAsync)
NOT_SUPPORTED(cudaPointerGetAttributes)
NOT_SUPPORTED(cudaHostAlloc)
NOT_SUPPORTED(cudaFreeHost)
NOT_SUPPORTED(cudaHostRegister)
NOT_SUPPORTED(cudaHostUnregister)
NOT_SUPPORTED(cudaLaunchKernel)
NOT_SUPPORTED(cudaStreamGetCaptureInfo)
NOT_SUPPORTED(cudaStreamGetCaptureInfo_v2)
NOT_SUPPORTED(cudaStreamGetCaptureInfo_v3)
#endif
