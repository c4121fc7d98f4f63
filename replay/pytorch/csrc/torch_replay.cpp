// hipmem's replay loop through PyTorch's caching allocator (c10::cuda::CUDACachingAllocator,
// the one torch.empty uses), built on first use against the installed PyTorch by
// torch.utils.cpp_extension (replay/pytorch/worker.py). The settings (PYTORCH_CUDA_ALLOC_CONF,
// memory fraction) are the process's: each torch resource replays in its own process.
//
// The loop mirrors replay_core.cu's: ops are allocate (0) or free (1) of a slot; a refused
// allocation (c10::OutOfMemoryError, after the allocator has freed its cache and retried, as in
// a real run) is recorded and its slot stays empty; what the log never freed is returned at
// the end.
#include <torch/extension.h>

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/util/Exception.h>

#include <chrono>
#include <cstdint>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

int64_t ns_between(Clock::time_point start, Clock::time_point end)
{
  return std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count();
}

struct Pass {
  int64_t wall_ns = 0;
  int64_t ops_done = 0;
  int64_t failures = 0;
  int64_t held_at_end_bytes = 0;
};

// One pass over the program. `latency_ns` gets each allocator call's time (-1: no call);
// `failure_op` / `failure_live_bytes` get the first refusals (as many as they hold).
Pass run_pass(torch::Tensor const& op, torch::Tensor const& slot, torch::Tensor const& size,
              torch::Tensor const& stream_index, torch::Tensor const& stream_handles,
              int64_t n_slots, bool stop_on_failure, bool time_calls, torch::Tensor& latency_ns,
              torch::Tensor& failure_op, torch::Tensor& failure_live_bytes)
{
  namespace alloc = c10::cuda::CUDACachingAllocator;
  auto const* ops     = op.data_ptr<int8_t>();
  auto const* slots   = slot.data_ptr<int32_t>();
  auto const* sizes   = size.data_ptr<int64_t>();
  auto const* streams = stream_index.data_ptr<int32_t>();
  auto const* handles = stream_handles.data_ptr<int64_t>();
  auto* latency       = latency_ns.data_ptr<int64_t>();
  auto* failed_op     = failure_op.data_ptr<int64_t>();
  auto* failed_live   = failure_live_bytes.data_ptr<int64_t>();
  int64_t const n_ops = op.numel();
  int64_t const room  = failure_op.numel();

  std::vector<void*> pointers(static_cast<size_t>(n_slots), nullptr);
  std::vector<int64_t> slot_bytes(static_cast<size_t>(n_slots), 0);
  int64_t live_bytes = 0;
  Pass pass;
  auto const start = Clock::now();
  int64_t i = 0;
  for (; i < n_ops; ++i) {
    auto const s = static_cast<size_t>(slots[i]);
    if (ops[i] == 0) {
      auto stream = reinterpret_cast<cudaStream_t>(handles[streams[i]]);
      auto const t0 = time_calls ? Clock::now() : Clock::time_point{};
      try {
        pointers[s] = alloc::raw_alloc_with_stream(static_cast<size_t>(sizes[i]), stream);
      } catch (c10::OutOfMemoryError const&) {
        if (pass.failures < room) {
          failed_op[pass.failures]   = i;
          failed_live[pass.failures] = live_bytes;
        }
        ++pass.failures;
        if (stop_on_failure) { break; }
        continue;
      }
      if (time_calls) { latency[i] = ns_between(t0, Clock::now()); }
      slot_bytes[s] = sizes[i];
      live_bytes += sizes[i];
    } else if (pointers[s] != nullptr) {
      auto const t0 = time_calls ? Clock::now() : Clock::time_point{};
      alloc::raw_delete(pointers[s]);
      if (time_calls) { latency[i] = ns_between(t0, Clock::now()); }
      pointers[s] = nullptr;
      live_bytes -= slot_bytes[s];
    }
  }
  pass.wall_ns  = ns_between(start, Clock::now());
  pass.ops_done = i;
  for (size_t s = 0; s < pointers.size(); ++s) {  // what the log never freed goes back
    if (pointers[s] != nullptr) {
      alloc::raw_delete(pointers[s]);
      pass.held_at_end_bytes += slot_bytes[s];
    }
  }
  return pass;
}

}  // namespace

// `repeats` passes on one allocator (its cache warm after the first); the best wall time.
// Returns [best_wall_ns, ops_done, failures, held_at_end_bytes] of the last pass.
std::vector<int64_t> replay(torch::Tensor op, torch::Tensor slot, torch::Tensor size,
                            torch::Tensor stream_index, torch::Tensor stream_handles,
                            int64_t n_slots, bool stop_on_failure, bool time_calls,
                            int64_t repeats, torch::Tensor latency_ns, torch::Tensor failure_op,
                            torch::Tensor failure_live_bytes)
{
  Pass last;
  int64_t best = INT64_MAX;
  for (int64_t r = 0; r < repeats; ++r) {
    // Only the first pass is timed per call: later passes measure the warm cache's wall time.
    last = run_pass(op, slot, size, stream_index, stream_handles, n_slots, stop_on_failure,
                    time_calls && r == 0, latency_ns, failure_op, failure_live_bytes);
    if (last.wall_ns < best) { best = last.wall_ns; }
  }
  return {best, last.ops_done, last.failures, last.held_at_end_bytes};
}

// The plain loop over the same API and nothing else, for the speed yardstick of
// benchmarks/bench_torch_replay.py: no timing, no failure bookkeeping, no repeats.
int64_t plain_loop(torch::Tensor op, torch::Tensor slot, torch::Tensor size, int64_t n_slots)
{
  namespace alloc = c10::cuda::CUDACachingAllocator;
  auto const* ops   = op.data_ptr<int8_t>();
  auto const* slots = slot.data_ptr<int32_t>();
  auto const* sizes = size.data_ptr<int64_t>();
  std::vector<void*> pointers(static_cast<size_t>(n_slots), nullptr);
  auto const start = Clock::now();
  for (int64_t i = 0; i < op.numel(); ++i) {
    auto const s = static_cast<size_t>(slots[i]);
    if (ops[i] == 0) {
      pointers[s] = alloc::raw_alloc_with_stream(static_cast<size_t>(sizes[i]), nullptr);
    } else if (pointers[s] != nullptr) {
      alloc::raw_delete(pointers[s]);
      pointers[s] = nullptr;
    }
  }
  auto const wall = ns_between(start, Clock::now());
  for (auto* p : pointers) {
    if (p != nullptr) { alloc::raw_delete(p); }
  }
  return wall;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)
{
  m.def("replay", &replay, "Replay a program through PyTorch's caching allocator");
  m.def("plain_loop", &plain_loop, "The same calls in a bare loop (benchmark yardstick)");
}
