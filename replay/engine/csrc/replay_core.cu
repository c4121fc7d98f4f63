// The native hot loop of `hipmem replay`.
//
// Python (replay/engine/program.py) turns a log into a "program": one op per replayed event, each
// allocate owning a slot and each free naming the slot of its allocate, so this loop needs no
// hash map. This file builds the resource stack the spec asks for, replays the program in the
// log's global order (one OS thread per logged thread, or one thread), times each allocator
// call, records failures, and ALWAYS returns every byte it took before it returns.
//
// Built twice from this one source (replay/engine/native.py):
//   HIPMEM_WITH_RMM defined: nvcc against RMM's headers and librmm (cuda backend);
//   otherwise:             a plain C++ compiler, host memory only (CI, no GPU).
// Everything crosses the C ABI as plain structs and arrays; no exception escapes it.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#ifdef HIPMEM_WITH_RMM
#include <cuda_runtime_api.h>
#include <rmm/error.hpp>
#include <rmm/logger.hpp>
#include <rmm/mr/arena_memory_resource.hpp>
#include <rmm/mr/binning_memory_resource.hpp>
#include <rmm/mr/cuda_async_memory_resource.hpp>
#include <rmm/mr/cuda_memory_resource.hpp>
#include <rmm/mr/fixed_size_memory_resource.hpp>
#include <rmm/mr/limiting_resource_adaptor.hpp>
#include <rmm/mr/managed_memory_resource.hpp>
#include <rmm/mr/pinned_host_memory_resource.hpp>
#include <rmm/mr/pool_memory_resource.hpp>
#include <cuda/memory_resource>
#include <cuda/stream>
#endif

extern "C" {

// The ABI of everything below, checked by replay/engine/native.py before any call: bump it whenever a
// struct, a field or an enum value changes, so a stale build or a hand edit on one side is
// refused in one line instead of corrupting memory.
#define HM_ABI_VERSION 3

struct hm_abi {
  int32_t version;
  int32_t config_bytes;
  int32_t program_bytes;
  int32_t outputs_bytes;
  int32_t result_bytes;
};

// Resource kinds; the numbers are shared with replay/engine/native.py (KIND_CODES).
enum hm_kind : int32_t {
  HM_HOST = 0, HM_DEVICE = 1, HM_MANAGED = 2, HM_ASYNC = 3, HM_POOL = 4,
  HM_ARENA = 5, HM_BINNING = 6, HM_FIXED = 7, HM_PINNED = 8,
  HM_NULL = 9,  // no allocator: a fresh address per allocate, frees nothing (machinery cost)
};

// Where peak reserved bytes came from (replay/engine/report.py: RESERVED_SOURCES).
enum hm_reserved_source : int32_t {
  HM_RESERVED_COUNTED = 0,      // bytes the resource took from its upstream (exact)
  HM_RESERVED_POOL_ATTR = 1,    // CUDA memory pool attribute ReservedMemHigh (exact)
  HM_RESERVED_DEVICE_FREE = 2,  // drop in device free memory, sampled
};

enum hm_status : int32_t { HM_OK = 0, HM_STOPPED = 1, HM_CANCELLED = 2, HM_ERROR = 3 };

// advise bits for managed memory
enum : int32_t { HM_ADVISE_PREFERRED = 1, HM_ADVISE_READ_MOSTLY = 2, HM_ADVISE_ACCESSED_BY = 4 };

struct hm_config {
  int32_t kind;
  int32_t upstream;  // kind of the upstream of pool/arena/binning/fixed
  int64_t initial_bytes;            // pool (or binning's pool) initial size; async initial; -1 none
  int64_t maximum_bytes;            // pool maximum; -1 none
  int64_t arena_bytes;              // arena size; -1 RMM default
  int64_t block_bytes;              // fixed block size
  int64_t prealloc_blocks;          // fixed blocks to preallocate
  int64_t release_threshold_bytes;  // async; -1 none
  int64_t limit_bytes;              // limiting adaptor on top; -1 none
  int32_t min_exp;                  // binning bins 2^min_exp .. 2^max_exp
  int32_t max_exp;
  int32_t prefetch;                 // managed: prefetch each allocation to the device
  int32_t advise_mask;              // managed: HM_ADVISE_* bits
  int32_t async_default_pool;       // async: use the device's default pool
  int32_t device;
  int32_t threaded;                 // one OS thread per logged thread
  int32_t stop_on_failure;
  int32_t repeats;                  // passes on one stack timed as a whole; the best is the wall
  int32_t time_calls;               // time each allocator call
};

struct hm_program {
  int64_t n_ops;
  const int8_t* op;          // 0 allocate, 1 free
  const int32_t* slot;       // allocate: its slot; free: the slot of its allocate
  const int64_t* size;       // bytes
  const int32_t* stream;     // index into stream_ids
  const int32_t* thread;     // index of the logged thread (0..n_threads-1)
  int32_t n_slots;
  int32_t n_streams;
  int32_t n_threads;
  int32_t pad_;
  const uint64_t* stream_ids;  // logged stream ids; 0 is the default stream
  int64_t peak_op;             // op after which the log's requested bytes peak (-1 none)
  int64_t sample_every;        // sample reserved bytes every this many ops (0: never)
};

struct hm_outputs {
  int64_t* latency_ns;  // [n_ops]; -1 where the op did not call the allocator
  int64_t* failure_op;  // [failure_capacity]
  int64_t* failure_live_bytes;
  int64_t* failure_reserved_bytes;
  int64_t failure_capacity;
  int64_t* sample_op;  // [sample_capacity]
  int64_t* sample_reserved_bytes;
  int64_t* sample_live_bytes;
  int64_t sample_capacity;
  volatile int32_t* cancel;  // the caller sets *cancel != 0 to stop early (Ctrl-C)
  int64_t* pass_wall_ns;         // [pass_capacity]: each pass's wall time, as best_wall_ns
  int64_t* pass_upstream_calls;  // [pass_capacity]: allocations from upstream in each pass
                                 // (a pool's growth); -1 where the stack cannot count them
  int64_t pass_capacity;
};

struct hm_result {
  int64_t best_wall_ns;
  int64_t ops_done;  // ops of the last repeat that ran
  int64_t n_failures;
  int64_t n_samples;
  int64_t peak_reserved_bytes;   // -1 when unknown
  int64_t unreturned_bytes;      // device free memory not back after teardown (cuda); 0 on host
  int64_t held_at_end_bytes;     // bytes the log never freed, returned by the replay at the end
  int64_t setup_ns;              // from the call to the first pass's start (building the stack)
  int64_t n_passes;              // passes that ran (entries written to pass_wall_ns)
  int64_t timed_pass_wall_ns;    // the pass that timed each call, when it ran apart; else -1
  int32_t reserved_source;
  int32_t status;
  char message[512];
};

int hm_replay(const hm_config* config, const hm_program* program, hm_outputs* out,
              hm_result* result);
const char* hm_build_info();
void hm_abi_info(hm_abi* out);
}

namespace {

using Clock = std::chrono::steady_clock;

inline uint64_t ticks() noexcept
{
#if defined(__x86_64__)
  return __rdtsc();  // ~7 ns a read, against ~20 ns for clock_gettime: the loop stays the floor's
#else
  return static_cast<uint64_t>(Clock::now().time_since_epoch().count());
#endif
}

inline void cpu_relax() noexcept
{
#if defined(__x86_64__)
  _mm_pause();
#endif
}

void set_message(hm_result* result, std::string const& text)
{
  std::snprintf(result->message, sizeof(result->message), "%s", text.c_str());
}

// Peak and current of a byte count that several threads may move.
struct ByteCounter {
  std::atomic<int64_t> current{0};
  std::atomic<int64_t> peak{0};
  std::atomic<int64_t> calls{0};  // upstream allocations (counting_resource): a pool's growth
  void add(int64_t bytes) noexcept
  {
    int64_t now  = current.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    int64_t seen = peak.load(std::memory_order_relaxed);
    while (now > seen && !peak.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {}
  }
  void sub(int64_t bytes) noexcept { current.fetch_sub(bytes, std::memory_order_relaxed); }
};

struct Failure {};  // an allocation the resource refused (out of memory / over a limit)

// The null resource's addresses: distinct, aligned, never dereferenced. Each replay thread
// hands them out from a range of its own (thread_local), so that an allocate writes nothing
// another thread reads: with one shared counter, every hand-off between replay threads also
// moved that counter's cache line, and the null resource is there to measure the replay
// machinery alone. Ranges come from one process-wide counter, so no two ever overlap.
class NullAddresses {
 public:
  void* next(size_t bytes) noexcept
  {
    thread_local uintptr_t next_address = 0;
    thread_local uintptr_t range_end    = 0;
    size_t const step = bytes == 0 ? 256 : (bytes + 255) & ~size_t{255};
    if (range_end - next_address < step) {
      uintptr_t const range_bytes = std::max<uintptr_t>(kRangeBytes, step);
      next_address = kBase + ranges_claimed_.fetch_add(range_bytes, std::memory_order_relaxed);
      range_end    = next_address + range_bytes;
    }
    void* const ptr = reinterpret_cast<void*>(next_address);
    next_address += step;
    return ptr;
  }

 private:
  static constexpr uintptr_t kBase       = uintptr_t{1} << 44;
  static constexpr uintptr_t kRangeBytes = uintptr_t{1} << 40;
  static inline std::atomic<uintptr_t> ranges_claimed_{0};
};

// ---------------------------------------------------------------------------------------------
// Resource stacks. Each offers allocate(bytes, stream index) / deallocate(...) and reserved().
// ---------------------------------------------------------------------------------------------

// Plain host memory: what CI replays through. A limit is enforced here since RMM is absent.
class HostStack {
 public:
  explicit HostStack(hm_config const& config)
    : limit_{config.limit_bytes}, null_{config.kind == HM_NULL}
  {
  }
  void* allocate(size_t bytes, int32_t)
  {
    if (null_) { return null_addresses_.next(bytes); }
    if (limit_ >= 0 && counter_.current.load(std::memory_order_relaxed) +
                           static_cast<int64_t>(bytes) > limit_) {
      throw Failure{};
    }
    void* ptr = std::malloc(bytes == 0 ? 1 : bytes);
    if (ptr == nullptr) { throw Failure{}; }
    counter_.add(static_cast<int64_t>(bytes));
    return ptr;
  }
  void deallocate(void* ptr, size_t bytes, int32_t) noexcept
  {
    if (null_) { return; }
    std::free(ptr);
    counter_.sub(static_cast<int64_t>(bytes));
  }
  int64_t reserved_now() const noexcept { return counter_.current.load(); }
  int64_t reserved_peak() const noexcept { return counter_.peak.load(); }
  void reset_peak() noexcept { counter_.peak.store(counter_.current.load()); }
  int32_t reserved_source() const noexcept { return HM_RESERVED_COUNTED; }
  int64_t upstream_calls() const noexcept { return -1; }  // every allocate is a malloc
  void synchronize() noexcept {}

 private:
  int64_t limit_;
  bool null_;
  NullAddresses null_addresses_;
  ByteCounter counter_;
};

#ifdef HIPMEM_WITH_RMM

using any_device_mr = cuda::mr::any_resource<cuda::mr::device_accessible>;

void check_cuda(cudaError_t status, char const* what)
{
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(status) + " (" +
                             cudaGetErrorString(status) + ")");
  }
}

// Counts what a resource takes from its upstream: "reserved" in the resource's own terms.
class counting_resource {
 public:
  counting_resource(any_device_mr upstream, ByteCounter* counter)
    : upstream_{std::move(upstream)}, counter_{counter}
  {
  }
  void* allocate(cuda::stream_ref stream, std::size_t bytes, std::size_t alignment)
  {
    void* ptr = upstream_.allocate(stream, bytes, alignment);
    counter_->calls.fetch_add(1, std::memory_order_relaxed);
    counter_->add(static_cast<int64_t>(bytes));
    return ptr;
  }
  void deallocate(cuda::stream_ref stream, void* ptr, std::size_t bytes,
                  std::size_t alignment) noexcept
  {
    upstream_.deallocate(stream, ptr, bytes, alignment);
    counter_->sub(static_cast<int64_t>(bytes));
  }
  void* allocate_sync(std::size_t bytes, std::size_t alignment)
  {
    void* ptr = upstream_.allocate_sync(bytes, alignment);
    counter_->calls.fetch_add(1, std::memory_order_relaxed);
    counter_->add(static_cast<int64_t>(bytes));
    return ptr;
  }
  void deallocate_sync(void* ptr, std::size_t bytes, std::size_t alignment) noexcept
  {
    upstream_.deallocate_sync(ptr, bytes, alignment);
    counter_->sub(static_cast<int64_t>(bytes));
  }
  bool operator==(counting_resource const& other) const noexcept
  {
    return counter_ == other.counter_;
  }
  bool operator!=(counting_resource const& other) const noexcept { return !(*this == other); }
  friend void get_property(counting_resource const&, cuda::mr::device_accessible) noexcept {}

 private:
  any_device_mr upstream_;
  ByteCounter* counter_;
};

// No allocator at all, behind the same type-erased call as every other resource: what a
// replay costs with it is the replay machinery's own cost per event.
class null_resource {
 public:
  explicit null_resource(NullAddresses* addresses) : addresses_{addresses} {}
  void* allocate(cuda::stream_ref, std::size_t bytes, std::size_t)
  {
    return addresses_->next(bytes);
  }
  void deallocate(cuda::stream_ref, void*, std::size_t, std::size_t) noexcept {}
  void* allocate_sync(std::size_t bytes, std::size_t) { return addresses_->next(bytes); }
  void deallocate_sync(void*, std::size_t, std::size_t) noexcept {}
  bool operator==(null_resource const& other) const noexcept
  {
    return addresses_ == other.addresses_;
  }
  bool operator!=(null_resource const& other) const noexcept { return !(*this == other); }
  friend void get_property(null_resource const&, cuda::mr::device_accessible) noexcept {}

 private:
  NullAddresses* addresses_;  // the stack's: outlives the resource
};

// cudaMallocAsync on the device's default pool (RMM's async resource always makes a new pool).
class default_pool_resource {
 public:
  void* allocate(cuda::stream_ref stream, std::size_t bytes, std::size_t)
  {
    void* ptr = nullptr;
    if (cudaMallocAsync(&ptr, bytes, stream.get()) != cudaSuccess) {
      (void)cudaGetLastError();
      throw rmm::out_of_memory("cudaMallocAsync failed");
    }
    return ptr;
  }
  void deallocate(cuda::stream_ref stream, void* ptr, std::size_t, std::size_t) noexcept
  {
    (void)cudaFreeAsync(ptr, stream.get());
  }
  void* allocate_sync(std::size_t bytes, std::size_t alignment)
  {
    void* ptr = allocate(cuda::stream_ref{cudaStream_t{nullptr}}, bytes, alignment);
    (void)cudaStreamSynchronize(nullptr);
    return ptr;
  }
  void deallocate_sync(void* ptr, std::size_t bytes, std::size_t alignment) noexcept
  {
    deallocate(cuda::stream_ref{cudaStream_t{nullptr}}, ptr, bytes, alignment);
    (void)cudaStreamSynchronize(nullptr);
  }
  bool operator==(default_pool_resource const&) const noexcept { return true; }
  bool operator!=(default_pool_resource const&) const noexcept { return false; }
  friend void get_property(default_pool_resource const&, cuda::mr::device_accessible) noexcept {}
};

// Managed memory with the advice and prefetch a user asked for, applied inside allocate so
// that their cost is part of the allocation latency, as it would be in production.
class advised_managed_resource {
 public:
  advised_managed_resource(int32_t device, int32_t advise_mask, bool prefetch)
    : device_{device}, advise_mask_{advise_mask}, prefetch_{prefetch}
  {
  }
  void* allocate(cuda::stream_ref stream, std::size_t bytes, std::size_t alignment)
  {
    void* ptr = managed_.allocate(stream, bytes, alignment);
    if (ptr != nullptr && bytes > 0) {
      cudaMemLocation location{cudaMemLocationTypeDevice, device_};
      if (advise_mask_ & HM_ADVISE_PREFERRED) {
        (void)cudaMemAdvise(ptr, bytes, cudaMemAdviseSetPreferredLocation, location);
      }
      if (advise_mask_ & HM_ADVISE_READ_MOSTLY) {
        (void)cudaMemAdvise(ptr, bytes, cudaMemAdviseSetReadMostly, location);
      }
      if (advise_mask_ & HM_ADVISE_ACCESSED_BY) {
        (void)cudaMemAdvise(ptr, bytes, cudaMemAdviseSetAccessedBy, location);
      }
      if (prefetch_) { (void)cudaMemPrefetchAsync(ptr, bytes, location, 0, stream.get()); }
    }
    return ptr;
  }
  void deallocate(cuda::stream_ref stream, void* ptr, std::size_t bytes,
                  std::size_t alignment) noexcept
  {
    managed_.deallocate(stream, ptr, bytes, alignment);
  }
  void* allocate_sync(std::size_t bytes, std::size_t alignment)
  {
    return allocate(cuda::stream_ref{cudaStream_t{nullptr}}, bytes, alignment);
  }
  void deallocate_sync(void* ptr, std::size_t bytes, std::size_t alignment) noexcept
  {
    managed_.deallocate_sync(ptr, bytes, alignment);
  }
  bool operator==(advised_managed_resource const& other) const noexcept
  {
    return advise_mask_ == other.advise_mask_ && prefetch_ == other.prefetch_;
  }
  bool operator!=(advised_managed_resource const& o) const noexcept { return !(*this == o); }
  friend void get_property(advised_managed_resource const&, cuda::mr::device_accessible) noexcept
  {
  }

 private:
  rmm::mr::managed_memory_resource managed_;
  int32_t device_;
  int32_t advise_mask_;
  bool prefetch_;
};

std::optional<std::size_t> optional_bytes(int64_t value)
{
  if (value < 0) { return std::nullopt; }
  return static_cast<std::size_t>(value);
}

// The resource stack of a spec, on real streams, with the means to read what it reserved.
class RmmStack {
 public:
  explicit RmmStack(hm_config const& config)
  {
    // A fixed-size resource serves nothing larger than its block: refuse those as RMM would
    // (it raises a logic error, which here would end the replay instead of recording it).
    if (config.kind == HM_FIXED) { largest_bytes_ = static_cast<size_t>(config.block_bytes); }
    top_.emplace(build(config));
  }

  void* allocate(size_t bytes, int32_t stream)
  {
    if (bytes > largest_bytes_) { throw Failure{}; }
    return top_->allocate(streams_[stream], bytes, rmm::CUDA_ALLOCATION_ALIGNMENT);
  }
  void deallocate(void* ptr, size_t bytes, int32_t stream) noexcept
  {
    top_->deallocate(streams_[stream], ptr, bytes, rmm::CUDA_ALLOCATION_ALIGNMENT);
  }

  int32_t reserved_source() const noexcept { return source_; }
  // What the stack took from its upstream so far, in calls; -1 where nothing counts them (the
  // driver's pools, plain cudaMalloc).
  int64_t upstream_calls() const noexcept
  {
    return source_ == HM_RESERVED_COUNTED ? counter_.calls.load() : -1;
  }

  int64_t reserved_now() noexcept
  {
    switch (source_) {
      case HM_RESERVED_COUNTED: return counter_.current.load();
      case HM_RESERVED_POOL_ATTR: return pool_attribute(cudaMemPoolAttrReservedMemCurrent);
      default: {
        std::size_t free_bytes = 0, total_bytes = 0;
        if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) { return -1; }
        return static_cast<int64_t>(baseline_free_) - static_cast<int64_t>(free_bytes);
      }
    }
  }
  int64_t reserved_peak() noexcept
  {
    switch (source_) {
      case HM_RESERVED_COUNTED: return counter_.peak.load();
      case HM_RESERVED_POOL_ATTR: return pool_attribute(cudaMemPoolAttrReservedMemHigh);
      default: return -1;  // the caller keeps the maximum of its samples
    }
  }
  void reset_peak() noexcept
  {
    if (source_ == HM_RESERVED_COUNTED) { counter_.peak.store(counter_.current.load()); }
    if (source_ == HM_RESERVED_POOL_ATTR) {
      cuuint64_t zero = 0;  // writing 0 resets the high-water mark
      (void)cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReservedMemHigh, &zero);
    }
  }
  void synchronize() { check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

  void set_streams(std::vector<cudaStream_t> const& streams)
  {
    streams_.clear();
    for (auto s : streams) { streams_.emplace_back(s); }
  }
  void set_baseline_free(std::size_t free_bytes) { baseline_free_ = free_bytes; }

  ~RmmStack()
  {
    top_.reset();  // releases pools to their upstream before the counters go away
    if (restore_threshold_) {
      (void)cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &saved_threshold_);
    }
  }

 private:
  any_device_mr leaf(int32_t kind, hm_config const& config)
  {
    switch (kind) {
      case HM_DEVICE: return rmm::mr::cuda_memory_resource{};
      case HM_MANAGED:
        if (config.advise_mask != 0 || config.prefetch != 0) {
          return advised_managed_resource{config.device, config.advise_mask, config.prefetch != 0};
        }
        return rmm::mr::managed_memory_resource{};
      case HM_PINNED: return rmm::mr::pinned_host_memory_resource{};
      case HM_ASYNC: {
        if (config.async_default_pool != 0) {
          check_cuda(cudaDeviceGetDefaultMemPool(&pool_, config.device),
                     "cudaDeviceGetDefaultMemPool");
          if (config.release_threshold_bytes >= 0) {
            check_cuda(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReleaseThreshold,
                                               &saved_threshold_),
                       "cudaMemPoolGetAttribute");
            cuuint64_t threshold = static_cast<cuuint64_t>(config.release_threshold_bytes);
            check_cuda(
              cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &threshold),
              "cudaMemPoolSetAttribute");
            restore_threshold_ = true;
          }
          return default_pool_resource{};
        }
        rmm::mr::cuda_async_memory_resource async{optional_bytes(config.initial_bytes),
                                                  optional_bytes(config.release_threshold_bytes)};
        pool_ = async.pool_handle();
        return async;
      }
      default: throw std::invalid_argument("not a leaf resource kind: " + std::to_string(kind));
    }
  }

  // The upstream of a pooling resource, wrapped so that what it hands out is counted.
  any_device_mr counted(any_device_mr upstream)
  {
    source_ = HM_RESERVED_COUNTED;
    return counting_resource{std::move(upstream), &counter_};
  }

  any_device_mr build_core(hm_config const& config)
  {
    switch (config.kind) {
      case HM_DEVICE: source_ = HM_RESERVED_DEVICE_FREE; return leaf(HM_DEVICE, config);
      case HM_PINNED: return counted(leaf(HM_PINNED, config));
      case HM_MANAGED:
        // Managed pages land on the device only when touched: count what was handed out.
        return counted(leaf(HM_MANAGED, config));
      case HM_ASYNC: source_ = HM_RESERVED_POOL_ATTR; return leaf(HM_ASYNC, config);
      case HM_NULL: source_ = HM_RESERVED_COUNTED; return null_resource{&null_addresses_};
      case HM_POOL:
        return rmm::mr::pool_memory_resource{counted(leaf(config.upstream, config)),
                                             static_cast<std::size_t>(config.initial_bytes),
                                             optional_bytes(config.maximum_bytes)};
      case HM_ARENA:
        return rmm::mr::arena_memory_resource{counted(leaf(config.upstream, config)),
                                              optional_bytes(config.arena_bytes)};
      case HM_FIXED:
        return rmm::mr::fixed_size_memory_resource{
          counted(leaf(config.upstream, config)), static_cast<std::size_t>(config.block_bytes),
          static_cast<std::size_t>(config.prealloc_blocks)};
      case HM_BINNING: {
        any_device_mr upstream = counted(leaf(config.upstream == HM_POOL ? HM_DEVICE
                                                                         : config.upstream,
                                              config));
        if (config.upstream == HM_POOL) {
          upstream = rmm::mr::pool_memory_resource{std::move(upstream),
                                                   static_cast<std::size_t>(config.initial_bytes),
                                                   optional_bytes(config.maximum_bytes)};
        }
        return rmm::mr::binning_memory_resource{std::move(upstream),
                                                static_cast<int8_t>(config.min_exp),
                                                static_cast<int8_t>(config.max_exp)};
      }
      default: throw std::invalid_argument("unknown resource kind " + std::to_string(config.kind));
    }
  }

  any_device_mr build(hm_config const& config)
  {
    any_device_mr core = build_core(config);
    if (config.limit_bytes < 0) { return core; }
    return rmm::mr::limiting_resource_adaptor{std::move(core),
                                              static_cast<std::size_t>(config.limit_bytes)};
  }

  int64_t pool_attribute(cudaMemPoolAttr attribute) noexcept
  {
    cuuint64_t value = 0;
    if (cudaMemPoolGetAttribute(pool_, attribute, &value) != cudaSuccess) { return -1; }
    return static_cast<int64_t>(value);
  }

  ByteCounter counter_;  // declared before top_: outlives the stack that points at it
  NullAddresses null_addresses_;  // likewise, for the null resource
  cudaMemPool_t pool_ = nullptr;
  cuuint64_t saved_threshold_ = 0;
  bool restore_threshold_ = false;
  int32_t source_ = HM_RESERVED_DEVICE_FREE;
  std::size_t baseline_free_ = 0;
  std::size_t largest_bytes_ = SIZE_MAX;
  std::vector<cuda::stream_ref> streams_;
  std::optional<any_device_mr> top_;
};

using Stack = RmmStack;

// Real streams for the logged ones: 0 is the default stream, every other id its own stream.
class Streams {
 public:
  explicit Streams(hm_program const& program)
  {
    for (int32_t i = 0; i < program.n_streams; ++i) {
      cudaStream_t stream = nullptr;
      if (program.stream_ids[i] != 0) {
        check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
        created_.push_back(stream);
      }
      handles_.push_back(stream);
    }
  }
  ~Streams()
  {
    for (auto stream : created_) {
      (void)cudaStreamSynchronize(stream);
      (void)cudaStreamDestroy(stream);
    }
  }
  std::vector<cudaStream_t> const& handles() const { return handles_; }

 private:
  std::vector<cudaStream_t> handles_;
  std::vector<cudaStream_t> created_;
};

std::size_t device_free_bytes()
{
  std::size_t free_bytes = 0, total_bytes = 0;
  check_cuda(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  return free_bytes;
}

#else
using Stack = HostStack;
#endif

// ---------------------------------------------------------------------------------------------
// The replay itself.
// ---------------------------------------------------------------------------------------------

bool is_refusal(std::exception_ptr const& error)
{
  try {
    std::rethrow_exception(error);
  } catch (Failure const&) {
    return true;
  } catch (std::bad_alloc const&) {  // rmm::out_of_memory and rmm::bad_alloc derive from it
    return true;
  } catch (...) {
    return false;
  }
}

class Replay {
 public:
  Replay(hm_config const& config, hm_program const& program, hm_outputs& out, Stack& stack)
    : config_{config}, program_{program}, out_{out}, stack_{stack},
      slots_(static_cast<size_t>(program.n_slots) +
             kSlotsPerLine * static_cast<size_t>(std::max(1, program.n_threads))),
      tallies_(static_cast<size_t>(std::max(1, program.n_threads))),
      turns_(static_cast<size_t>(std::max(1, program.n_threads)))
  {
  }

  // One pass over the program; returns HM_OK, HM_STOPPED, HM_CANCELLED or HM_ERROR.
  int32_t run(bool record)
  {
    record_ = record;
    timed_  = record && config_.time_calls != 0;  // later passes are timed as a whole only
    std::fill(slots_.begin(), slots_.end(), Slot{});
    std::fill(tallies_.begin(), tallies_.end(), Tally{});
    held_at_end_bytes_ = 0;
    ended_             = false;
    status_.store(HM_OK);
    if (config_.threaded != 0 && program_.n_threads > 1) {
      run_threads();
    } else {
      mark_start();
      run_range_single();
    }
    if (record_) { flush_window(); }  // the last window, also of a pass that stopped
    return status_.load();
  }

  // When the last op of the pass returned, if it ran: with replay threads, the time they
  // then take to exit and be joined is not replay time (as their start-up is not).
  bool ended() const { return ended_; }
  Clock::time_point end_time() const { return end_time_; }

  // When the timed part of the last pass began: after the worker threads were started and
  // bound to the device, so that thread start-up is not counted as replay time.
  Clock::time_point start_time() const { return start_time_; }
  uint64_t start_ticks() const { return start_ticks_; }

  // Return every byte still held: logged allocations never freed, and everything after a stop.
  void release_all() noexcept
  {
    for (Slot& slot : slots_) {
      if (slot.bytes >= 0) {
        if (slot.ptr != nullptr) {
          stack_.deallocate(slot.ptr, static_cast<size_t>(slot.bytes), slot.stream);
        }
        held_at_end_bytes_ += slot.bytes;
        slot = Slot{};
      }
    }
    for (Tally& tally : tallies_) { tally.live_bytes = 0; }
  }

  int64_t ops_done() const
  {
    int64_t sum = 0;
    for (Tally const& tally : tallies_) { sum += tally.ops_done; }
    return sum;
  }
  int64_t failures() const { return n_failures_; }
  int64_t samples() const { return n_samples_; }
  int64_t sampled_peak() const { return sampled_peak_; }
  int64_t held_at_end_bytes() const { return held_at_end_bytes_; }
  int64_t sampling_ticks() const { return sampling_ticks_; }
  std::string const& error() const { return error_; }

 private:
  static constexpr int64_t kNotStarted = -2;  // a turn before the workers may begin
  static constexpr size_t kLineBytes    = 64;

  // What a slot holds between its allocate and its free. One struct, so that an event whose
  // slot another thread touched last pulls one cache line, not one per field.
  struct alignas(32) Slot {
    void* ptr      = nullptr;
    int64_t bytes  = -1;  // -1: not held (never allocated, freed, or its allocate failed)
    int32_t stream = 0;   // the stream it was allocated on
  };
  static constexpr size_t kSlotsPerLine = kLineBytes / sizeof(Slot);

  // What each op moves, counted per replay thread on a cache line of that thread's own: the
  // thread that takes the turn then finds its counters in its own cache.
  struct alignas(64) Tally {
    int64_t live_bytes = 0;  // allocated minus freed by this thread (negative when it frees
                             // what others allocated); their sum is what the replay holds
    int64_t ops_done   = 0;
  };

  // One per replay thread, alone on its cache line: the op that thread may run next. Only the
  // thread passing the turn writes it and only the thread it names watches it, so a hand-off
  // moves one cache line between two cores, however many threads wait. `sleeping` has a line
  // of its own: the passer reads it right after storing the turn, and on the turn's line that
  // read fought the new holder's for the line (serve's null replay paid about 35 ns more per
  // hand-off than bare threads passing a turn in the same order; on its own line, as much).
  struct alignas(64) Turn {
    std::atomic<int64_t> op{kNotStarted};
    alignas(64) std::atomic<int32_t> sleeping{0};  // its thread is in (or entering) op.wait
  };

  int64_t live_bytes() const
  {
    int64_t sum = 0;
    for (Tally const& tally : tallies_) { sum += tally.live_bytes; }
    return sum;
  }

  // An op as a replay thread runs it, copied from the program before the pass is timed into
  // an array of that thread's own: taking a turn then pulls none of the program's cache lines
  // from the core that ran the ops before.
  struct ThreadOp {
    int64_t i;            // its index in the program
    int64_t bytes;        // an allocate's size
    int32_t slot;         // its slot's position in slots_ (thread_slot_positions)
    int32_t stream;
    int32_t next_thread;  // the thread of op i + 1 when that is another thread, else -1
    int8_t allocate;
  };

  // One op of the program, on one thread.
  bool step(int64_t i, Tally& tally)
  {
    return step(i, program_.op[i] == 0, slots_[static_cast<size_t>(program_.slot[i])],
                program_.stream[i], static_cast<size_t>(program_.size[i]), tally);
  }

  // One op. Returns false when the replay must stop.
  bool step(int64_t i, bool allocate, Slot& slot, int32_t stream, size_t bytes, Tally& tally)
  {
    if (allocate) {
      uint64_t const t0 = timed_ ? ticks() : 0;
      void* ptr         = nullptr;
      try {
        ptr = stack_.allocate(bytes, stream);
      } catch (...) {
        auto error = std::current_exception();
        if (!is_refusal(error)) { return fail_hard(error); }
        if (record_) { record_failure(i); }
        ++n_failures_;
        if (config_.stop_on_failure) {
          status_.store(HM_STOPPED);
          return false;
        }
        after_op(i, tally);
        return true;
      }
      if (timed_) { out_.latency_ns[i] = static_cast<int64_t>(ticks() - t0); }
      slot = Slot{ptr, static_cast<int64_t>(bytes), stream};
      tally.live_bytes += static_cast<int64_t>(bytes);
    } else {
      int64_t const held = slot.bytes;
      if (held >= 0) {  // < 0: its allocate failed and was skipped
        if (slot.ptr != nullptr) {
          uint64_t const t0 = timed_ ? ticks() : 0;
          stack_.deallocate(slot.ptr, static_cast<size_t>(held), stream);
          if (timed_) { out_.latency_ns[i] = static_cast<int64_t>(ticks() - t0); }
        }
        slot = Slot{};
        tally.live_bytes -= held;
      }
    }
    after_op(i, tally);
    return true;
  }

  void after_op(int64_t i, Tally& tally)
  {
    ++tally.ops_done;
    if (!record_) { return; }
    int64_t const every = program_.sample_every;
    if (every <= 0) {  // no plot: the peak op alone (the peak of a source with no high mark)
      if (i == program_.peak_op) {
        uint64_t const t0 = ticks();
        window_op_ = i, window_live_ = live_bytes(), window_best_ = stack_.reserved_now();
        sampled_peak_ = std::max(sampled_peak_, window_best_);
        flush_window();
        sampling_ticks_ += static_cast<int64_t>(ticks() - t0);
      }
      return;
    }
    // A plot: every op is looked at, and each window of `every` ops keeps the op where the
    // reserved bytes were highest, so that no peak falls between samples (as the virtual
    // GPU's sampler, vcuda/vcuda_replay.cpp, does).
    uint64_t const t0 = ticks();
    int64_t const now = stack_.reserved_now();
    if (now > window_best_) { window_op_ = i, window_live_ = live_bytes(), window_best_ = now; }
    // The reported peak is read where it always was, at the requested peak, so that a
    // figure does not change with --plot (it matters for a source with no high mark).
    if (i == program_.peak_op) { sampled_peak_ = std::max(sampled_peak_, now); }
    if ((i + 1) % every == 0) { flush_window(); }
    sampling_ticks_ += static_cast<int64_t>(ticks() - t0);
  }

  // The window's highest sample, if it has one, goes out; the next window starts empty.
  void flush_window()
  {
    if (window_op_ >= 0 && n_samples_ < out_.sample_capacity) {
      out_.sample_op[n_samples_]             = window_op_;
      out_.sample_reserved_bytes[n_samples_] = window_best_;
      out_.sample_live_bytes[n_samples_]     = window_live_;
      ++n_samples_;
    }
    window_op_ = -1, window_live_ = 0, window_best_ = -1;
  }

  void record_failure(int64_t i)
  {
    if (n_failures_ < out_.failure_capacity) {
      out_.failure_op[n_failures_]             = i;
      out_.failure_live_bytes[n_failures_]     = live_bytes();
      out_.failure_reserved_bytes[n_failures_] = stack_.reserved_now();
    }
  }

  bool fail_hard(std::exception_ptr const& error)
  {
    try {
      std::rethrow_exception(error);
    } catch (std::exception const& e) {
      error_ = e.what();
    } catch (...) {
      error_ = "unknown C++ exception";
    }
    status_.store(HM_ERROR);
    return false;
  }

  bool cancelled() const noexcept { return out_.cancel != nullptr && *out_.cancel != 0; }

  void run_range_single()
  {
    int64_t const n = program_.n_ops;
    Tally& tally    = tallies_[0];
    for (int64_t i = 0; i < n; ++i) {
      if ((i & 4095) == 0 && cancelled()) {
        status_.store(HM_CANCELLED);
        return;
      }
      if (!step(i, tally)) { return; }
    }
  }

  // One OS thread per logged thread; turns passed from thread to thread keep the log's global
  // order, so all bookkeeping is touched by one thread at a time (the turn's seq_cst store and
  // acquire load order it).
  void run_threads()
  {
    int32_t const n_threads = program_.n_threads;
    std::vector<std::vector<ThreadOp>> mine = thread_ops();
    for (Turn& turn : turns_) {
      turn.op.store(kNotStarted);
      turn.sleeping.store(0);
    }
    ready_.store(0);
    // Idle workers spin while there are spare cores: a hand-off between threads then costs
    // a cache line, not a futex wake-up (tens of microseconds, which swamped fast pools).
    unsigned const cores = std::max(1u, std::thread::hardware_concurrency());
    spin_limit_ = static_cast<unsigned>(n_threads) < cores ? (1 << 22) : (1 << 12);
    std::vector<std::thread> workers;
    std::vector<std::exception_ptr> errors(static_cast<size_t>(n_threads));
    for (int32_t t = 0; t < n_threads; ++t) {
      workers.emplace_back([this, t, &mine, &errors] {
        try {
          worker(t, mine[static_cast<size_t>(t)]);
        } catch (...) {
          errors[static_cast<size_t>(t)] = std::current_exception();
          ready_.fetch_add(1);  // never leave the starter waiting
          abort_all(HM_ERROR);
        }
      });
    }
    while (ready_.load() < n_threads) { std::this_thread::yield(); }
    mark_start();
    if (program_.n_ops > 0) {
      Turn& first             = turns_[static_cast<size_t>(program_.thread[0])];
      int64_t not_started     = kNotStarted;  // unless a worker failed to start
      if (first.op.compare_exchange_strong(not_started, 0)) { first.op.notify_all(); }
    }
    for (auto& w : workers) { w.join(); }
    for (auto& e : errors) {
      if (e) { fail_hard(e); }
    }
  }

  void worker(int32_t t, std::vector<ThreadOp> const& ops)
  {
#ifdef HIPMEM_WITH_RMM
    check_cuda(cudaSetDevice(config_.device), "cudaSetDevice");
#endif
    ready_.fetch_add(1);
    Turn& turn       = turns_[static_cast<size_t>(t)];
    Tally& tally     = tallies_[static_cast<size_t>(t)];
    int64_t const n  = program_.n_ops;
    int64_t previous = -2;  // the op this thread ran last
    for (ThreadOp const& op : ops) {
      // The turn moves only where the log changes thread: a run of this thread's own ops
      // waits for nothing, and writes nothing that the idle threads are watching. (Storing
      // the turn after every op made each op pay for a cache line the idle threads pulled
      // away.)
      if (op.i != previous + 1 && !wait_turn(turn, op.i)) { return; }
      if ((op.i & 4095) == 0 && cancelled()) {
        abort_all(HM_CANCELLED);
        return;
      }
      Slot& slot = slots_[static_cast<size_t>(op.slot)];
      if (!step(op.i, op.allocate != 0, slot, op.stream, static_cast<size_t>(op.bytes), tally)) {
        abort_all(status_.load());  // step set HM_STOPPED or HM_ERROR
        return;
      }
      previous = op.i;
      if (op.i + 1 == n) { mark_end(); }
      if (op.next_thread >= 0) { hand_off(op.i + 1, op.next_thread); }
    }
  }

  // Each replay thread's ops, in order, with what it needs of the program.
  std::vector<std::vector<ThreadOp>> thread_ops() const
  {
    std::vector<int32_t> const position = thread_slot_positions();
    std::vector<std::vector<ThreadOp>> ops(static_cast<size_t>(program_.n_threads));
    int64_t const n = program_.n_ops;
    for (int64_t i = 0; i < n; ++i) {
      int32_t const thread = program_.thread[i];
      int32_t const next   = i + 1 < n ? program_.thread[i + 1] : thread;
      ops[static_cast<size_t>(thread)].push_back(ThreadOp{
        i, program_.size[i], position[static_cast<size_t>(program_.slot[i])], program_.stream[i],
        next != thread ? next : -1, static_cast<int8_t>(program_.op[i] == 0)});
    }
    return ops;
  }

  // Where each slot lives when replay threads run: the slots a thread allocates side by
  // side, each thread's from a cache line of its own, so that writing one's slot does not pull
  // the line from the thread that allocated the slot beside it.
  std::vector<int32_t> thread_slot_positions() const
  {
    size_t const n_slots = static_cast<size_t>(program_.n_slots);
    std::vector<int32_t> owner(n_slots, 0);
    for (int64_t i = 0; i < program_.n_ops; ++i) {
      if (program_.op[i] == 0) {
        owner[static_cast<size_t>(program_.slot[i])] = program_.thread[i];
      }
    }
    std::vector<size_t> next(static_cast<size_t>(program_.n_threads), 0);  // counts, then starts
    for (int32_t t : owner) { ++next[static_cast<size_t>(t)]; }
    // The first slot on a cache-line boundary: slots_ is aligned to a slot, not to a line.
    size_t const base =
      (kLineBytes - reinterpret_cast<uintptr_t>(slots_.data()) % kLineBytes) % kLineBytes /
      sizeof(Slot);
    size_t start = base;
    for (size_t& count : next) {
      size_t const here = start;
      start += (count + kSlotsPerLine - 1) / kSlotsPerLine * kSlotsPerLine;
      count = here;
    }
    std::vector<int32_t> position(n_slots);
    for (size_t s = 0; s < n_slots; ++s) {
      position[s] = static_cast<int32_t>(next[static_cast<size_t>(owner[s])]++);
    }
    return position;
  }

  // Spin briefly (hand-offs between threads are often close together), then sleep until the
  // turn comes, so idle threads do not compete with the one replaying. `status_` is read
  // while spinning: it is written only when a pass starts or stops, so it stays in every
  // core's cache.
  bool wait_turn(Turn& turn, int64_t i)
  {
    for (unsigned spin = 0; spin < spin_limit_; ++spin) {
      if (turn.op.load(std::memory_order_acquire) == i) { return status_.load() == HM_OK; }
      if (status_.load(std::memory_order_relaxed) != HM_OK) { return false; }
      cpu_relax();
    }
    turn.sleeping.store(1);  // seq_cst, before the turn is read: see hand_off
    while (true) {
      int64_t const now = turn.op.load();
      if (status_.load(std::memory_order_relaxed) != HM_OK || now == i) {
        turn.sleeping.store(0, std::memory_order_relaxed);
        return now == i && status_.load() == HM_OK;
      }
      turn.op.wait(now, std::memory_order_acquire);
    }
  }

  // Pass the turn to `thread`, whose op `next` is. A notify costs an atomic add on libstdc++'s
  // shared waiter table (and a system call when anything waits there), so it is made only
  // when that thread sleeps. The turn is stored before `sleeping` is read, and a sleeper
  // marks itself before it reads the turn, all sequentially consistent: no sleeper can miss
  // its turn.
  void hand_off(int64_t next, int32_t thread)
  {
    Turn& theirs = turns_[static_cast<size_t>(thread)];
    theirs.op.store(next);
    if (theirs.sleeping.load() != 0) { theirs.op.notify_all(); }
  }

  // Stop every thread: the status first, then every turn, so that a thread sees the stop
  // whether it spins, sleeps or is handed a turn after this.
  void abort_all(int32_t status)
  {
    int32_t expected = HM_OK;
    status_.compare_exchange_strong(expected, status);
    for (Turn& turn : turns_) {
      turn.op.store(-1);
      turn.op.notify_all();
    }
  }

  void mark_start()
  {
    start_time_  = Clock::now();
    start_ticks_ = ticks();
  }

  // Only the thread that runs the last op writes these; the join orders them for the reader.
  void mark_end()
  {
    end_time_ = Clock::now();
    ended_    = true;
  }

  // Read-only while a pass runs.
  hm_config const& config_;
  hm_program const& program_;
  hm_outputs& out_;
  Stack& stack_;
  std::vector<Slot> slots_;
  std::vector<Tally> tallies_;  // [thread]; [0] alone when replaying on one thread
  std::vector<Turn> turns_;     // [thread]
  bool record_         = true;
  bool timed_          = false;
  unsigned spin_limit_ = 1 << 12;
  Clock::time_point start_time_{};
  uint64_t start_ticks_ = 0;
  // Written rarely: on a refused allocate, a sample, the end of a pass.
  alignas(64) int64_t n_failures_ = 0;
  Clock::time_point end_time_{};
  bool ended_ = false;
  int64_t n_samples_              = 0;
  int64_t sampled_peak_           = -1;
  int64_t held_at_end_bytes_      = 0;
  int64_t sampling_ticks_         = 0;
  // The window of ops being sampled (after_op): its highest reserved bytes so far.
  int64_t window_op_   = -1;
  int64_t window_live_ = 0;
  int64_t window_best_ = -1;
  std::string error_;
  // Read by every waiting thread, written only when a pass starts or stops.
  alignas(64) std::atomic<int32_t> status_{HM_OK};
  alignas(64) std::atomic<int32_t> ready_{0};
};

int64_t nanoseconds(Clock::duration span)
{
  return std::chrono::duration_cast<std::chrono::nanoseconds>(span).count();
}

int64_t replay_with(hm_config const& config, hm_program const& program, hm_outputs& out,
                    hm_result& result, Stack& stack, Clock::time_point entered)
{
  Replay replay{config, program, out, stack};
  int32_t const repeats = std::max(1, config.repeats);
  // Timing each call costs a pass about a tenth of its speed. With several passes, the pass
  // that does (and records failures and samples) runs first and apart, and `repeats` passes
  // timed as a whole follow: the best is taken among passes that are alike, as the C++ floor's
  // are, and their spread is the machine's, not the timing's.
  bool const timed_apart = repeats > 1 && config.time_calls != 0;
  int32_t const total    = repeats + (timed_apart ? 1 : 0);
  int64_t best_ns        = -1;
  double ns_per_tick     = 1.0;
  int32_t status         = HM_OK;
  result.timed_pass_wall_ns = -1;
  for (int32_t rep = 0; rep < total; ++rep) {
    bool const record = rep == 0;  // latencies and failures of the first, fresh pass
    stack.reset_peak();
    int64_t const upstream_before = stack.upstream_calls();
    try {
      status = replay.run(record);
    } catch (...) {
      replay.release_all();
      throw;
    }
    uint64_t const tick0 = replay.start_ticks();
    auto const t0        = replay.start_time();
    auto const joined    = Clock::now();
    replay.release_all();  // what the log never freed: part of the pass, as in the floor
    stack.synchronize();
    auto const t1        = Clock::now();
    uint64_t const tick1 = ticks();
    int64_t const elapsed_ns = nanoseconds(t1 - t0);
    if (tick1 > tick0) { ns_per_tick = static_cast<double>(elapsed_ns) / double(tick1 - tick0); }
    // The pass: from the start to its last op, then returning what is still held. Waiting for
    // the replay threads to exit (a futex wake-up of this thread, tens of microseconds on an
    // idle core) lies between the two and is left out.
    int64_t const wall_ns =
      replay.ended() ? nanoseconds(replay.end_time() - t0) + nanoseconds(t1 - joined) : elapsed_ns;
    int64_t const sampling_ns =
      record ? static_cast<int64_t>(double(replay.sampling_ticks()) * ns_per_tick) : 0;
    if (record) {
      result.n_failures = replay.failures();
      result.n_samples  = replay.samples();
      result.held_at_end_bytes = replay.held_at_end_bytes();
      // Convert this pass's raw tick latencies to nanoseconds.
      if (config.time_calls) {
        for (int64_t i = 0; i < program.n_ops; ++i) {
          if (out.latency_ns[i] >= 0) {
            out.latency_ns[i] = static_cast<int64_t>(double(out.latency_ns[i]) * ns_per_tick);
          }
        }
      }
    }
    int64_t const pass_ns = wall_ns - sampling_ns;
    if (record) { result.setup_ns = nanoseconds(t0 - entered); }
    // A timed pass that stopped the replay (a failure with stop_on_failure, an error) is the
    // only pass there is: it counts.
    if (timed_apart && record && status == HM_OK) {
      result.timed_pass_wall_ns = pass_ns;
    } else {
      if (best_ns < 0 || pass_ns < best_ns) { best_ns = pass_ns; }
      int64_t const index = result.n_passes;
      if (index < out.pass_capacity) {
        int64_t const upstream_after = stack.upstream_calls();
        out.pass_wall_ns[index]        = pass_ns;
        out.pass_upstream_calls[index] =
          upstream_before < 0 ? -1 : upstream_after - upstream_before;
        result.n_passes = index + 1;
      }
    }
    int64_t const peak = stack.reserved_peak();
    result.peak_reserved_bytes =
      std::max({result.peak_reserved_bytes, peak, replay.sampled_peak()});
    result.ops_done = replay.ops_done();
    if (status != HM_OK) { break; }
  }
  result.best_wall_ns = best_ns;
  result.status       = status;
  if (status == HM_ERROR) { set_message(&result, replay.error()); }
  return best_ns;
}

}  // namespace

extern "C" void hm_abi_info(hm_abi* out)
{
  out->version = HM_ABI_VERSION;
  out->config_bytes = static_cast<int32_t>(sizeof(hm_config));
  out->program_bytes = static_cast<int32_t>(sizeof(hm_program));
  out->outputs_bytes = static_cast<int32_t>(sizeof(hm_outputs));
  out->result_bytes = static_cast<int32_t>(sizeof(hm_result));
}

extern "C" const char* hm_build_info()
{
#ifdef HIPMEM_WITH_RMM
  return "rmm";
#else
  return "host";
#endif
}

extern "C" int hm_replay(const hm_config* config, const hm_program* program, hm_outputs* out,
                         hm_result* result)
{
  auto const entered = Clock::now();
  std::memset(result, 0, sizeof(*result));
  result->peak_reserved_bytes = -1;
  try {
    for (int64_t i = 0; i < program->n_ops; ++i) { out->latency_ns[i] = -1; }
#ifdef HIPMEM_WITH_RMM
    // Refusals are this replay's data, reported by it: RMM's own error lines would flood stderr.
    rapids_logger::log_level_setter quiet{rmm::default_logger(), rapids_logger::level_enum::off};
    check_cuda(cudaSetDevice(config->device), "cudaSetDevice");
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    std::size_t const free_before = device_free_bytes();
    {
      Streams streams{*program};
      {
        Stack stack{*config};
        stack.set_streams(streams.handles());
        stack.set_baseline_free(free_before);
        result->reserved_source = stack.reserved_source();
        replay_with(*config, *program, *out, *result, stack, entered);
      }  // the stack's destructor gives its pools back to the device
      check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    }
    std::size_t const free_after = device_free_bytes();
    result->unreturned_bytes =
      free_after < free_before ? static_cast<int64_t>(free_before - free_after) : 0;
#else
    Stack stack{*config};
    result->reserved_source = stack.reserved_source();
    replay_with(*config, *program, *out, *result, stack, entered);
    result->unreturned_bytes = stack.reserved_now();
#endif
  } catch (std::exception const& e) {
    result->status = HM_ERROR;
    set_message(result, e.what());
  } catch (...) {
    result->status = HM_ERROR;
    set_message(result, "unknown C++ exception");
  }
  return result->status;
}
