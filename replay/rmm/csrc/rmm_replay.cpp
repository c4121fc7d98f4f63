// hipmem's replay of a program through RAPIDS RMM's own memory resources (pool, arena,
// binning, fixed-size, limiting adaptor, the plain cuda resource), header-only releases from
// PyPI (librmm-cu12 24.12 and 25.4), on the virtual GPU of virtual_cuda.c. Built on first use
// by replay/rmm/build.py with g++ against the fetched RMM headers, linked to the
// stand-in runtime; built against the real libcudart.so.12 the same source runs on a GPU
// (benchmarks/gpu_rmm_virtual_check.py).
//
//   rmm_replay DIR N_SLOTS N_STREAMS KIND UPSTREAM INITIAL MAXIMUM ARENA BLOCK PREALLOC MIN MAX
//
// KIND is cuda, pool, arena, binning or fixed; UPSTREAM of binning is pool or cuda; sizes
// are bytes, -1 for RMM's default. DIR holds the program as vcuda_replay.cpp reads it
// (replay/engine/program.py), the lines on stdin are its probe lines, answered the same way,
// and the loop is the same one (replay/virtual/vcuda/replay_loop.hpp, with RMM's calls):
//
//   DEVICE_BYTES LIMIT_BYTES STOP_ON_FAILURE TIME_CALLS REPEATS [SAMPLE_EVERY]
//
// LIMIT_BYTES >= 0 puts RMM's limiting_resource_adaptor on top (`limit=`). Reserved bytes are
// what the resource took from upstream: the bytes cudaMalloc was asked for, counted exactly
// by the stand-in (hipmem_vcuda_requested), and checked against the count kept here around
// RMM's cuda resource; on a real runtime only the latter exists (the same figure: nothing else
// calls cudaMalloc). A refusal (rmm::out_of_memory, rmm::bad_alloc) is recorded with its op and
// the live bytes. Each logged stream is a stream of its own (RMM's pool, fixed and binning keep
// free lists per stream); the calls run on one thread in the log's order (no resource here
// keys anything by thread on non-default streams, and arena's per-thread arenas serve only
// the per-thread default stream, which no log names). A resource that cannot be made (an
// arena or a pool's initial size past the device) answers {"setup_refused": "..."}.
#include <rmm/cuda_stream_view.hpp>
#include <rmm/error.hpp>
#include <rmm/mr/device/arena_memory_resource.hpp>
#include <rmm/mr/device/binning_memory_resource.hpp>
#include <rmm/mr/device/cuda_memory_resource.hpp>
#include <rmm/mr/device/device_memory_resource.hpp>
#include <rmm/mr/device/fixed_size_memory_resource.hpp>
#include <rmm/mr/device/limiting_resource_adaptor.hpp>
#include <rmm/mr/device/pool_memory_resource.hpp>

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "replay_loop.hpp"  // replay/virtual/vcuda: the loop, written once

namespace {

using hipmem::Pass;
using hipmem::Sampler;
using hipmem::write_array;
using hipmem::write_list;
using rmm::mr::device_memory_resource;

// The stand-in's own count of what cudaMalloc was asked for; absent from a real runtime, whose
// replays count it in `Upstream` below instead.
using RequestedFn = void (*)(unsigned long long*, unsigned long long*, unsigned long long*);
using ConfigureFn = int (*)(unsigned long long, unsigned long long);
struct VcudaState {  // virtual_cuda.c's HipmemVcudaState
  unsigned long long total_bytes, granularity_bytes, committed_bytes, committed_peak_bytes,
      refusals, ranges, arena_bytes;
};
using StateFn = void (*)(VcudaState*);

template <typename F>
F standin(char const* name) {  // the stand-in's own entry point; null on a real runtime
  return reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
}

std::string json_text(std::string text) {
  std::string out;
  for (char c : text.substr(0, text.find('\n'))) {
    if (c == '"' || c == '\\') out += '\\';
    out += c >= 0x20 ? c : ' ';
  }
  return out;
}

// RMM's cuda resource (cudaMalloc/cudaFree), counting what it hands out: the bytes and calls
// of the resource's upstream, current and peak. (cuda_memory_resource is final: wrapped.)
class Upstream final : public device_memory_resource {
 public:
  int64_t current_bytes = 0, peak_bytes = 0, calls = 0;
  char* first = nullptr;  // the first block handed out: an arena's whole arena

 private:
  rmm::mr::cuda_memory_resource cuda_;

  void* do_allocate(std::size_t bytes, rmm::cuda_stream_view stream) override {
    void* ptr = cuda_.allocate(bytes, stream);
    if (first == nullptr) first = static_cast<char*>(ptr);
    current_bytes += static_cast<int64_t>(bytes);
    peak_bytes = current_bytes > peak_bytes ? current_bytes : peak_bytes;
    if (bytes != 0) ++calls;  // cudaMalloc(0) takes nothing: a null pointer, as on a GPU
    return ptr;
  }
  void do_deallocate(void* ptr, std::size_t bytes, rmm::cuda_stream_view stream) override {
    cuda_.deallocate(ptr, bytes, stream);
    current_bytes -= static_cast<int64_t>(bytes);
  }
};

struct Config {
  std::string kind, upstream;
  long long initial = -1, maximum = -1, arena = -1, block = -1, prealloc = -1, min_exp = 18,
            max_exp = 22;
};

std::optional<std::size_t> optional_bytes(long long value) {
  return value < 0 ? std::nullopt : std::optional<std::size_t>(static_cast<std::size_t>(value));
}

// The resource stack of one probe: built on a fresh device, torn down (every byte back
// upstream) before the next.
struct Stack {
  Upstream device;
  std::unique_ptr<device_memory_resource> pool, core, limit;
  device_memory_resource* top = nullptr;

  Stack(Config const& c, long long limit_bytes) {
    if (c.kind == "cuda") {
      top = &device;
    } else if (c.kind == "pool") {
      core = std::make_unique<rmm::mr::pool_memory_resource<device_memory_resource>>(
          &device, static_cast<std::size_t>(c.initial < 0 ? 0 : c.initial),
          optional_bytes(c.maximum));
    } else if (c.kind == "arena") {
      core = std::make_unique<rmm::mr::arena_memory_resource<device_memory_resource>>(
          &device, optional_bytes(c.arena));
    } else if (c.kind == "fixed") {
      core = std::make_unique<rmm::mr::fixed_size_memory_resource<device_memory_resource>>(
          &device, static_cast<std::size_t>(c.block), static_cast<std::size_t>(c.prealloc));
    } else if (c.kind == "binning") {
      device_memory_resource* below = &device;
      if (c.upstream == "pool") {  // bins and large allocations from a pool over the device
        pool = std::make_unique<rmm::mr::pool_memory_resource<device_memory_resource>>(
            &device, static_cast<std::size_t>(c.initial < 0 ? 0 : c.initial),
            optional_bytes(c.maximum));
        below = pool.get();
      }
      core = std::make_unique<rmm::mr::binning_memory_resource<device_memory_resource>>(
          below, static_cast<int8_t>(c.min_exp), static_cast<int8_t>(c.max_exp));
    } else {
      throw std::invalid_argument("not an RMM resource kind: " + c.kind);
    }
    if (core) top = core.get();
    if (limit_bytes >= 0) {
      limit = std::make_unique<rmm::mr::limiting_resource_adaptor<device_memory_resource>>(
          top, static_cast<std::size_t>(limit_bytes));
      top = limit.get();
    }
  }
  ~Stack() {  // top down: each resource returns its memory to the one below
    limit.reset();
    core.reset();
    pool.reset();
  }
};

struct Program : hipmem::ProgramArrays {
  std::vector<rmm::cuda_stream_view> streams;  // one per logged stream; 0 is the default one
};

bool is_refusal(std::exception const& err) {
  return dynamic_cast<rmm::bad_alloc const*>(&err) != nullptr;  // out_of_memory is one too
}

// How far into its arena an arena resource ever carved, at most: every carve from the arena's
// free end (RMM's global_arena::first_fit) is a superblock of max(1 MiB, the request as the
// resource rounds it) whose first block is the allocation that asked for it, so each
// allocation's offset plus that size bounds it. replay/capacity/arena_rule.py says why this
// decides which other arena sizes replay alike.
std::size_t arena_reach(char const* arena, void const* ptr, std::size_t bytes) {
#ifdef RMM_ARENA_USE_SIZE_CLASSES
  bytes = rmm::mr::detail::arena::align_to_size_class(bytes);
#else
  bytes = rmm::align_up(bytes, rmm::CUDA_ALLOCATION_ALIGNMENT);
#endif
  std::size_t const superblock = rmm::mr::detail::arena::superblock::minimum_size;
  return static_cast<std::size_t>(static_cast<char const*>(ptr) - arena) +
         (bytes > superblock ? bytes : superblock);
}

// RMM's resource stack, as replay_loop.hpp calls it.
struct RmmCalls {
  Stack& stack;
  std::vector<rmm::cuda_stream_view> const& streams;
  bool arena;
  std::size_t* arena_extent_bytes;

  void* allocate(std::size_t bytes, int32_t stream) {
    void* ptr = stack.top->allocate(bytes, streams[static_cast<size_t>(stream)]);
    if (arena && ptr != nullptr) {
      std::size_t const reach = arena_reach(stack.device.first, ptr, bytes);
      if (reach > *arena_extent_bytes) *arena_extent_bytes = reach;
    }
    return ptr;
  }
  static bool refused(std::exception const& err) { return is_refusal(err); }
  void deallocate(void* ptr, std::size_t bytes, int32_t stream) {
    stack.top->deallocate(ptr, bytes, streams[static_cast<size_t>(stream)]);
  }
  int64_t reserved_bytes() const { return stack.device.current_bytes; }
};

Pass run_pass(Program const& p, Stack& stack, bool arena, std::size_t* arena_extent_bytes,
              bool stop_on_failure, int64_t* latency, Sampler* sampler) {
  RmmCalls calls{stack, p.streams, arena, arena_extent_bytes};
  return hipmem::run_pass(p, calls, stop_on_failure, latency, sampler);
}

std::string probe(Program const& p, Config const& config, std::string const& dir,
                  long long device_bytes, long long limit_bytes, bool stop_on_failure,
                  bool time_calls, int repeats, long long sample_every) {
  // On the stand-in, the device takes its probe's size; a real runtime has its own.
  auto configure = standin<ConfigureFn>("hipmem_vcuda_configure");
  if (configure && configure(static_cast<unsigned long long>(device_bytes), 0) != 0) {
    throw std::runtime_error("the virtual GPU still holds memory from the last replay");
  }
  std::size_t free_bytes = 0, total_bytes = 0;
  cudaMemGetInfo(&free_bytes, &total_bytes);
  std::vector<int64_t> latency(time_calls ? p.op.size() : 0, -1);
  Sampler sampler;
  sampler.every = sample_every;
  Pass last;
  int64_t best = INT64_MAX, peak_reserved = 0, upstream_calls = 0;
  std::size_t arena_extent = 0;
  bool const arena = config.kind == "arena";
  {
    std::unique_ptr<Stack> stack;
    try {
      stack = std::make_unique<Stack>(config, limit_bytes);
    } catch (std::exception const& err) {  // made before any op: refused at its making
      // Refused memory (a pool's maximum below what binning's bins preallocate, an arena past
      // the device) is an answer; anything else an error.
      long long device_refusals = -1;
      if (auto state_of = standin<StateFn>("hipmem_vcuda_state")) {
        VcudaState state{};
        state_of(&state);
        device_refusals = static_cast<long long>(state.refusals);
      }
      return std::string("{\"") + (is_refusal(err) ? "setup_refused" : "error") + "\":\"" +
             json_text(err.what()) + "\",\"device_refusals\":" +
             std::to_string(device_refusals) + ",\"free_bytes\":" + std::to_string(free_bytes) +
             "}";
    }
    for (int r = 0; r < repeats; ++r) {
      last = run_pass(p, *stack, arena, &arena_extent, stop_on_failure,
                      time_calls && r == 0 ? latency.data() : nullptr,
                      sample_every > 0 && r == 0 ? &sampler : nullptr);
      best = last.wall_ns < best ? last.wall_ns : best;
    }
    peak_reserved = stack->device.peak_bytes;
    upstream_calls = stack->device.calls;
  }
  // The stand-in's own count of the bytes cudaMalloc was asked for must agree with ours.
  long long device_refusals = -1, device_peak = peak_reserved;
  if (auto requested = standin<RequestedFn>("hipmem_vcuda_requested")) {
    unsigned long long current = 0, peak = 0, calls = 0;
    requested(&current, &peak, &calls);
    if (current != 0) throw std::runtime_error("the resource did not return every byte");
    if (static_cast<int64_t>(peak) != peak_reserved ||
        static_cast<int64_t>(calls) != upstream_calls) {
      throw std::runtime_error("the stand-in counted " + std::to_string(peak) + " bytes in " +
                               std::to_string(calls) + " cudaMalloc calls, the resource " +
                               std::to_string(peak_reserved) + " in " +
                               std::to_string(upstream_calls));
    }
    VcudaState state{};
    standin<StateFn>("hipmem_vcuda_state")(&state);
    device_refusals = static_cast<long long>(state.refusals);
    device_peak = static_cast<long long>(state.committed_peak_bytes);  // in whole pages
  }
  if (time_calls) write_array(dir + "/latency.bin", latency);
  if (sample_every > 0) write_array(dir + "/samples.bin", sampler.triples);
  std::ostringstream out;
  out << "{\"wall_ns\":" << best << ",\"ops_done\":" << last.ops_done
      << ",\"failures\":" << last.failures << ",\"held_at_end_bytes\":" << last.held_at_end_bytes
      << ",\"peak_reserved_bytes\":" << peak_reserved
      << ",\"peak_requested_bytes\":" << last.peak_live_bytes
      << ",\"peak_allocated_bytes\":" << last.peak_live_bytes << ",\"reserved_at_end_bytes\":0"
      << ",\"segment_allocations\":" << upstream_calls << ",\"num_ooms\":" << last.failures
      << ",\"num_alloc_retries\":0,\"device_bytes\":" << device_bytes
      << ",\"device_peak_bytes\":" << device_peak << ",\"device_refusals\":" << device_refusals
      << ",\"free_bytes\":" << free_bytes
      << ",\"arena_extent_bytes\":" << (arena ? static_cast<long long>(arena_extent) : -1);
  write_list(out, "failure_op", last.failure_op);
  write_list(out, "failure_live_bytes", last.failure_live_bytes);
  write_list(out, "failure_reserved_bytes", last.failure_reserved_bytes);
  out << "}";
  return out.str();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 13) {
    std::cerr << "usage: rmm_replay DIR N_SLOTS N_STREAMS KIND UPSTREAM INITIAL MAXIMUM ARENA "
                 "BLOCK PREALLOC MIN_EXP MAX_EXP\n";
    return 2;
  }
  std::string const dir = argv[1];
  try {
    Program p;
    static_cast<hipmem::ProgramArrays&>(p) = hipmem::read_program(dir, std::stoll(argv[2]));
    auto const n_streams = std::stoll(argv[3]);
    Config config;
    config.kind = argv[4];
    config.upstream = argv[5];
    config.initial = std::stoll(argv[6]);
    config.maximum = std::stoll(argv[7]);
    config.arena = std::stoll(argv[8]);
    config.block = std::stoll(argv[9]);
    config.prealloc = std::stoll(argv[10]);
    config.min_exp = std::stoll(argv[11]);
    config.max_exp = std::stoll(argv[12]);
    p.streams.emplace_back(rmm::cuda_stream_view{});
    for (long long s = 1; s < n_streams; ++s) {
      cudaStream_t stream = nullptr;
      if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
        throw std::runtime_error("cudaStreamCreateWithFlags failed");
      }
      p.streams.emplace_back(stream);
    }
    std::string line;
    while (std::getline(std::cin, line)) {
      hipmem::ProbeLine asked;
      if (!hipmem::parse_probe_line(line, asked)) break;
      std::cout << probe(p, config, dir, asked.device_bytes, asked.limit_bytes, asked.stop != 0,
                         asked.time_calls != 0, asked.repeats, asked.sample_every)
                << std::endl;
    }
  } catch (std::exception const& err) {
    return hipmem::error_line(err);
  }
  return 0;
}
