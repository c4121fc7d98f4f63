// hipmem's replay of a program through PyTorch's own caching allocator (the code in
// libc10_cuda.so) on the virtual GPU of virtual_cuda.c. Built on first use by
// replay/virtual/build.py against the c10 headers of the PyTorch it runs, linked to that
// PyTorch's libc10.so and libc10_cuda.so and to the stand-in runtime, which comes first so
// that its soname (libcudart.so.N) is the one every library binds to.
//
//   vcuda_replay DIR N_SLOTS N_STREAMS [--plain]
//
// DIR holds the program as raw arrays (op.bin int8, slot.bin int32, size.bin int64,
// stream.bin int32; replay/engine/program.py) and where the recording's driver put each segment
// (placement.bin, uint64 size and offset pairs, maybe none: replay/virtual/placement.py). Then
// each line on stdin is one replay ("probe"):
//
//   DEVICE_BYTES LIMIT_BYTES STOP_ON_FAILURE TIME_CALLS REPEATS [SAMPLE_EVERY]
//
// DEVICE_BYTES sizes the virtual GPU; LIMIT_BYTES >= 0 caps the process with PyTorch's
// per-process memory fraction (LIMIT / DEVICE), as `-r torch:limit=` does on a GPU. Each probe
// answers one JSON line on stdout; with TIME_CALLS, DIR/latency.bin gets each call's time.
// SAMPLE_EVERY > 0 (for plots) writes DIR/samples.bin: for each window of that many ops of the
// first pass, the op where the allocator's reserved bytes were highest, the bytes the replay
// held then and those reserved bytes (int64 triples). Every op is looked at, so the reserved
// peak is never missed between samples.
// The loop is replay_loop.hpp's (rmm_replay.cpp runs the same one), here with PyTorch's calls:
// allocate -> raw_alloc_with_stream, free -> raw_delete, a refusal (c10::OutOfMemoryError, after
// the allocator freed its cache and retried) is recorded with its op index and the live bytes,
// and leftovers are returned.
//
// A line `state DEVICE_BYTES LIMIT_BYTES` (replay/explain/state.py) replays the program up to
// the first allocation the allocator refuses and writes DIR/state.json: the op refused, the
// allocator's statistics and its segments and blocks at that moment, from c10's own
// snapshot() (taken after the refusal, when PyTorch has already freed its cache and retried:
// the state its out-of-memory message describes). Then every block is returned, as below.
//
// After a probe every block is returned and the cache emptied (so no device memory is in use,
// which the stand-in checks before it changes size). hipmem still starts a process per probe
// (replay/virtual/gpu.py): with expandable segments, a probe after a refused one on a smaller
// device did not answer as a fresh process does. PYTORCH_CUDA_ALLOC_CONF is read once per
// process in any case.
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
// The allocator API differs between releases; what a release has is detected here, from its
// headers, so that one source builds against every release (vcuda_build.py picks the C++
// standard the headers need).
#if __has_include(<c10/cuda/PeerToPeerAccess.h>)
#include <c10/cuda/PeerToPeerAccess.h>  // 2.11 on; 2.14's expandable segments ask it
#define HIPMEM_HAS_P2P_CACHE 1
#endif

#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "replay_loop.hpp"

extern "C" {
// The stand-in runtime's own entry points (virtual_cuda.c).
struct HipmemVcudaState {
  unsigned long long total_bytes, granularity_bytes, committed_bytes, committed_peak_bytes,
      refusals, ranges, arena_bytes;
};
int hipmem_vcuda_configure(unsigned long long total_bytes, unsigned long long granularity_bytes);
int hipmem_vcuda_place(unsigned long long const* pairs, unsigned long long count);
void hipmem_vcuda_state(HipmemVcudaState* out);
}

// libc10_cuda.so exports this without a header: ATen registers its "does the device have a
// CUDA context" check through it, which getStreamFromPool asks. The virtual GPU always has one.
namespace c10::cuda::_internal {
C10_CUDA_API void setHasPrimaryContext(bool (*has_primary_context)(c10::DeviceIndex));
}

namespace {

namespace alloc = c10::cuda::CUDACachingAllocator;
using hipmem::Clock;
using hipmem::ns_between;
using hipmem::Pass;
using hipmem::Sampler;
using hipmem::write_array;
using hipmem::write_list;

struct Program : hipmem::ProgramArrays {
  std::vector<cudaStream_t> handles;  // one per logged stream; the default stream stays 0
  // DIR/placement.bin: where the recording's driver put each segment, (size, offset) pairs
  std::vector<unsigned long long> placement;
};

// The virtual GPU sized for one replay, with the recorded placement from its first call.
void configure(Program const& p, long long device_bytes) {
  if (hipmem_vcuda_configure(static_cast<unsigned long long>(device_bytes), 0) != 0 ||
      hipmem_vcuda_place(p.placement.data(), p.placement.size() / 2) != 0) {
    throw std::runtime_error("the virtual GPU still holds memory from the last replay");
  }
}

// PyTorch's caching allocator, as replay_loop.hpp calls it.
struct TorchCalls {
  std::vector<cudaStream_t> const& handles;

  void* allocate(std::size_t bytes, int32_t stream) {
    return alloc::raw_alloc_with_stream(bytes, handles[static_cast<size_t>(stream)]);
  }
  static bool refused(std::exception const& err) {
    return dynamic_cast<c10::OutOfMemoryError const*>(&err) != nullptr;
  }
  static void deallocate(void* ptr, std::size_t, int32_t) { alloc::raw_delete(ptr); }
  static int64_t reserved_bytes() { return alloc::getDeviceStats(0).reserved_bytes[0].current; }
};

Pass run_pass(Program const& p, bool stop_on_failure, int64_t* latency, Sampler* sampler) {
  TorchCalls calls{p.handles};
  return hipmem::run_pass(p, calls, stop_on_failure, latency, sampler);
}

// The plain loop over the same calls and nothing else: the benchmark's yardstick.
int64_t plain_loop(Program const& p) {
  std::vector<void*> pointers(static_cast<size_t>(p.n_slots), nullptr);
  auto const start = Clock::now();
  for (size_t i = 0; i < p.op.size(); ++i) {
    auto const s = static_cast<size_t>(p.slot[i]);
    if (p.op[i] == 0) {
      pointers[s] = alloc::raw_alloc_with_stream(static_cast<size_t>(p.size[i]), nullptr);
    } else if (pointers[s] != nullptr) {
      alloc::raw_delete(pointers[s]);
      pointers[s] = nullptr;
    }
  }
  auto const wall = ns_between(start, Clock::now());
  for (auto* ptr : pointers) {
    if (ptr != nullptr) { alloc::raw_delete(ptr); }
  }
  return wall;
}

// Back to a fresh process's state: no block cached, no device memory in use, no statistics.
// Every library must bind to the stand-in: a real libcudart.so.N loaded first (from a CUDA
// toolkit on the loader path) would take the allocator's calls to a GPU, or fail with none.
void check_runtime() {
  Dl_info runtime{}, standin{};
  void* malloc_symbol = dlsym(RTLD_DEFAULT, "cudaMalloc");
  if (malloc_symbol == nullptr || dladdr(malloc_symbol, &runtime) == 0 ||
      dladdr(reinterpret_cast<void*>(&hipmem_vcuda_state), &standin) == 0 ||
      std::strcmp(runtime.dli_fname, standin.dli_fname) != 0) {
    throw std::runtime_error(std::string("the CUDA runtime in use is ") +
                             (malloc_symbol ? runtime.dli_fname : "none") +
                             ", not hipmem's virtual GPU");
  }
}

void reset_allocator() {
  alloc::emptyCache();
  alloc::resetPeakStats(0);
  alloc::resetAccumulatedStats(0);
}

std::string probe(Program const& p, std::string const& dir, long long device_bytes,
                  long long limit_bytes, bool stop_on_failure, bool time_calls, int repeats,
                  long long sample_every) {
  configure(p, device_bytes);
  if (limit_bytes >= 0) {  // as torch_worker.py does on a GPU: a fraction of the device
    double const fraction = static_cast<double>(limit_bytes) / static_cast<double>(device_bytes);
    alloc::setMemoryFraction(fraction < 1.0 ? fraction : 1.0, 0);
  }
  std::vector<int64_t> latency(time_calls ? p.op.size() : 0, -1);
  Sampler sampler;
  sampler.every = sample_every;
  Pass last;
  int64_t best = INT64_MAX;
  for (int r = 0; r < repeats; ++r) {
    if (r > 0) { alloc::resetPeakStats(0); }
    last = run_pass(p, stop_on_failure, time_calls && r == 0 ? latency.data() : nullptr,
                    sample_every > 0 && r == 0 ? &sampler : nullptr);
    best = last.wall_ns < best ? last.wall_ns : best;
  }
  auto const stats = alloc::getDeviceStats(0);
  HipmemVcudaState device{};
  hipmem_vcuda_state(&device);
  if (time_calls) { write_array(dir + "/latency.bin", latency); }
  if (sample_every > 0) { write_array(dir + "/samples.bin", sampler.triples); }
  std::ostringstream out;
  auto const aggregate = 0;  // StatType::AGGREGATE
  out << "{\"wall_ns\":" << best << ",\"ops_done\":" << last.ops_done
      << ",\"failures\":" << last.failures << ",\"held_at_end_bytes\":" << last.held_at_end_bytes
      << ",\"peak_reserved_bytes\":" << stats.reserved_bytes[aggregate].peak
      << ",\"peak_requested_bytes\":" << stats.requested_bytes[aggregate].peak
      << ",\"peak_allocated_bytes\":" << stats.allocated_bytes[aggregate].peak
      << ",\"reserved_at_end_bytes\":" << stats.reserved_bytes[aggregate].current
      << ",\"segment_allocations\":" << stats.segment[aggregate].allocated
      << ",\"num_ooms\":" << stats.num_ooms << ",\"num_alloc_retries\":" << stats.num_alloc_retries
      << ",\"device_bytes\":" << device.total_bytes
      << ",\"device_peak_bytes\":" << device.committed_peak_bytes;
  write_list(out, "failure_op", last.failure_op);
  write_list(out, "failure_live_bytes", last.failure_live_bytes);
  out << "}";
  reset_allocator();
  return out.str();
}

// The allocator's state at the first refusal (the `state` line above), as one JSON object.
std::string state_at_refusal(Program const& p, std::string const& dir, long long device_bytes,
                             long long limit_bytes) {
  configure(p, device_bytes);
  if (limit_bytes >= 0) {
    double const fraction = static_cast<double>(limit_bytes) / static_cast<double>(device_bytes);
    alloc::setMemoryFraction(fraction < 1.0 ? fraction : 1.0, 0);
  }
  std::vector<void*> pointers(static_cast<size_t>(p.n_slots), nullptr);
  int64_t refused_op = -1;
  for (size_t i = 0; i < p.op.size() && refused_op < 0; ++i) {
    auto const s = static_cast<size_t>(p.slot[i]);
    if (p.op[i] == 0) {
      try {
        pointers[s] = alloc::raw_alloc_with_stream(static_cast<size_t>(p.size[i]),
                                                   p.handles[p.stream[i]]);
      } catch (c10::OutOfMemoryError const&) {
        refused_op = static_cast<int64_t>(i);
      }
    } else if (pointers[s] != nullptr) {
      alloc::raw_delete(pointers[s]);
      pointers[s] = nullptr;
    }
  }
  std::ostringstream out;
  auto const stats = alloc::getDeviceStats(0);
  auto const aggregate = 0;  // StatType::AGGREGATE
  out << "{\"refused_op\":" << refused_op
      << ",\"reserved_bytes\":" << stats.reserved_bytes[aggregate].current
      << ",\"allocated_bytes\":" << stats.allocated_bytes[aggregate].current
      << ",\"requested_bytes\":" << stats.requested_bytes[aggregate].current
      << ",\"inactive_split_bytes\":" << stats.inactive_split_bytes[aggregate].current
      << ",\"inactive_split_blocks\":" << stats.inactive_split[aggregate].current
      << ",\"num_alloc_retries\":" << stats.num_alloc_retries << ",\"segments\":[";
  auto const info = alloc::snapshot();
  bool first_segment = true;
  for (auto const& segment : info.segments) {
    out << (first_segment ? "" : ",") << "{\"address\":" << segment.address
        << ",\"total_size\":" << segment.total_size
        << ",\"allocated_size\":" << segment.allocated_size
        << ",\"requested_size\":" << segment.requested_size
        << ",\"is_large\":" << (segment.is_large ? "true" : "false")
        << ",\"is_expandable\":" << (segment.is_expandable ? "true" : "false")
        << ",\"stream\":" << reinterpret_cast<uintptr_t>(segment.stream) << ",\"blocks\":[";
    first_segment = false;
    bool first_block = true;
    for (auto const& block : segment.blocks) {
      out << (first_block ? "" : ",") << "[" << block.size << "," << block.requested_size << ","
          << (block.allocated ? 1 : 0) << "," << (block.active ? 1 : 0) << "]";
      first_block = false;
    }
    out << "]}";
  }
  out << "]}";
  std::ofstream(dir + "/state.json") << out.str();
  for (auto* ptr : pointers) {
    if (ptr != nullptr) { alloc::raw_delete(ptr); }
  }
  reset_allocator();
  return "{\"refused_op\":" + std::to_string(refused_op) + "}";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: vcuda_replay DIR N_SLOTS N_STREAMS [--plain]\n";
    return 2;
  }
  std::string const dir = argv[1];
  bool const plain = argc > 4 && std::strcmp(argv[4], "--plain") == 0;
  try {
    Program p;
    static_cast<hipmem::ProgramArrays&>(p) = hipmem::read_program(dir, std::stoll(argv[2]));
    p.placement = hipmem::read_array<unsigned long long>(dir + "/placement.bin");
    auto const n_streams = std::stoll(argv[3]);
    check_runtime();
    c10::cuda::_internal::setHasPrimaryContext([](c10::DeviceIndex) { return true; });
    alloc::init(1);
#ifdef HIPMEM_HAS_P2P_CACHE
    // What PyTorch's CUDA initialisation does (torch.cuda's lazy init): from 2.14 on, mapping
    // an expandable segment asks the peer-access cache, which must exist.
    c10::cuda::detail::init_p2p_access_cache(1);
#endif
    // Logged streams get streams from PyTorch's pool, as torch.cuda.Stream() does on a GPU.
    p.handles.push_back(nullptr);
    for (long long s = 1; s < n_streams; ++s) {
      p.handles.push_back(c10::cuda::getStreamFromPool(false, 0).stream());
    }
    std::string line;
    while (std::getline(std::cin, line)) {
      if (line.rfind("state ", 0) == 0) {
        std::istringstream fields(line.substr(6));
        long long device_bytes = 0, limit_bytes = -1;
        if (!(fields >> device_bytes >> limit_bytes)) { break; }
        std::cout << state_at_refusal(p, dir, device_bytes, limit_bytes) << std::endl;
        continue;
      }
      hipmem::ProbeLine asked;
      if (!hipmem::parse_probe_line(line, asked)) { break; }
      if (plain) {
        configure(p, asked.device_bytes);
        std::cout << "{\"wall_ns\":" << plain_loop(p) << "}" << std::endl;
        reset_allocator();
        continue;
      }
      std::cout << probe(p, dir, asked.device_bytes, asked.limit_bytes, asked.stop != 0,
                         asked.time_calls != 0, asked.repeats, asked.sample_every)
                << std::endl;
    }
  } catch (std::exception const& err) {
    return hipmem::error_line(err);
  }
  return 0;
}
