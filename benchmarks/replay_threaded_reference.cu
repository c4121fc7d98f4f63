// The project's own threaded reference for `hipmem replay --threads logged --streams default`:
// a C++ replay of an RMM log that does what RMM's replay benchmark (rapidsai/rmm,
// cpp/benchmarks/replay) does, written here from its description, not copied:
//
//   - one OS thread per logged thread, each replaying its own events in the log's order;
//   - every event waits its turn on ONE mutex and ONE condition variable around a global
//     event index, runs the allocator call with the mutex held, bumps the index and wakes
//     every waiter (notify_all after every event). REFERENCE_WAKE_NEXT builds a variant that
//     wakes only the thread whose turn it is, on a condition variable of its own;
//   - every call on the default stream, as RMM's allocate_sync / deallocate_sync make them
//     (see wait_for_default_stream);
//   - the resource is built once per repetition and replayed `--passes` times on it, a barrier
//     between passes; a pass is timed from the start barrier to the last event, plus returning
//     what the log never freed (hipmem returns it inside its timed pass too);
//   - resources as RMM's benchmark builds them: pool grown from 0 over cudaMalloc, binning
//     with bins 2^18..2^22 over such a pool, arena of RMM's default size; and `null` (a fresh
//     address per allocate, nothing freed) for the machinery's own cost.
//
// Bookkeeping differs on purpose: pointers are resolved to slots while the log is read, so no
// hash map is touched while timed. Google Benchmark reports RMM's binary per thread-iteration
// (its `real_time` is the wall time of one replay divided by the thread count), so compare
// this reference's pass times with `real_time * threads` (docs/threaded-replay.md).
//
// Build (benchmarks/bench_threaded_replay.py does it):
//   nvcc -std=c++20 -O3 -DNDEBUG -I$LIBRMM/include -I$LIBRMM/include/rapids -I$LOGGER/include \
//        replay_threaded_reference.cu -o replay_threaded_reference \
//        -L$LIBRMM/lib64 -lrmm -L$LOGGER/lib64 -lrapids_logger
// Run:
//   replay_threaded_reference LOG.csv RESOURCE [PASSES] [REPETITIONS] [WARMUP_PASSES]
// prints one JSON line per repetition: {"resource":..,"events":..,"threads":..,"pass_ns":[..]}.
// WARMUP_PASSES > 0 first replays that many passes on a resource of its own, untimed. Unless
// one iteration is long enough to report, Google Benchmark runs RMM's benchmark more than once
// in the same process (a fresh resource each) and reports the last run, so RMM's figure then
// leaves out the process's first replay (first cudaMalloc, the log's pages, thread start-up);
// a repetition measured beside it must leave it out too.

#include <cuda_runtime_api.h>
#include <rmm/mr/arena_memory_resource.hpp>
#include <rmm/mr/binning_memory_resource.hpp>
#include <rmm/mr/cuda_memory_resource.hpp>
#include <rmm/mr/pool_memory_resource.hpp>
#include <rmm/version_config.hpp>

// RMM up to 26.04 has resources derived from device_memory_resource (what RMM's own replay
// benchmark of that time is written against); later ones are CCCL resources held by value.
// Both are built here, so that the reference can run with the very librmm RMM's binary uses.
#define REFERENCE_OLD_RMM (RMM_VERSION_MAJOR * 100 + RMM_VERSION_MINOR < 2606)
#if REFERENCE_OLD_RMM
#include <rmm/cuda_stream_view.hpp>
#include <rmm/mr/device_memory_resource.hpp>
#else
#include <cuda/memory_resource>
#include <cuda/stream>
#endif

#include <atomic>
#include <barrier>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Event {
  int64_t index;  // position in the log: the global order
  int32_t slot;   // allocation slot (allocate: its own; free: its allocate's)
  bool allocate;
  std::size_t bytes;
};

struct Log {
  std::vector<std::vector<Event>> per_thread;
  std::vector<int32_t> owner;  // the thread of each event, by index
  int32_t slots  = 0;
  int64_t events = 0;
};

std::vector<std::string> split(std::string const& line)
{
  std::vector<std::string> fields;
  std::size_t start = 0;
  while (true) {
    std::size_t const comma = line.find(',', start);
    fields.push_back(line.substr(start, comma - start));
    if (comma == std::string::npos) { return fields; }
    start = comma + 1;
  }
}

// Reads Thread,Time,Action,Pointer,Size,Stream; frees of unknown pointers and logged failures
// are skipped, as both hipmem and RMM's benchmark do.
Log read_log(char const* path)
{
  std::ifstream in{path};
  if (!in) { throw std::runtime_error(std::string{"cannot open "} + path); }
  std::string line;
  std::getline(in, line);  // header
  Log log;
  std::unordered_map<std::string, int32_t> thread_of;
  // pointer -> (thread, position) of its allocate: positions, since the vectors grow
  std::unordered_map<uint64_t, std::pair<int32_t, std::size_t>> live_at;
  int64_t index = 0;
  while (std::getline(in, line)) {
    if (line.empty()) { continue; }
    auto const f = split(line);
    if (f.size() < 6) { throw std::runtime_error("a row without 6 fields: " + line); }
    bool const is_alloc = f[2] == "allocate";
    bool const is_free  = f[2] == "free";
    if (!is_alloc && !is_free) { continue; }  // "allocate failure": not replayed
    uint64_t const pointer = std::strtoull(f[3].c_str(), nullptr, 16);
    auto [it, added] = thread_of.try_emplace(f[0], static_cast<int32_t>(thread_of.size()));
    int32_t const thread = it->second;
    if (added) { log.per_thread.emplace_back(); }
    Event event{index, -1, is_alloc, std::strtoull(f[4].c_str(), nullptr, 10)};
    if (is_alloc) {
      event.slot = log.slots++;
      auto old   = live_at.find(pointer);
      if (old != live_at.end()) { live_at.erase(old); }  // a live pointer reused: forget it
      live_at[pointer] = {thread, log.per_thread[thread].size()};
    } else {
      auto found = live_at.find(pointer);
      if (found == live_at.end()) { continue; }  // free of an unknown pointer: skipped
      auto const [t, i] = found->second;
      event.slot        = log.per_thread[t][i].slot;
      event.bytes       = log.per_thread[t][i].bytes;
      live_at.erase(found);
    }
    log.per_thread[thread].push_back(event);
    log.owner.push_back(thread);
    ++index;
  }
  log.events = index;
  return log;
}

// A fresh, never dereferenced address per allocate: the null resource's.
void* next_null_address(std::size_t bytes)
{
  static std::atomic<uintptr_t> next_address{0};
  auto const at = next_address.fetch_add((bytes + 255) / 256 * 256 + 256);
  return reinterpret_cast<void*>((uintptr_t{1} << 44) + at);
}

// The calls RMM's benchmark makes are `allocate_sync` and `deallocate_sync`. In RMM 26.04, the
// version its replay.cpp is written against (device_memory_resource), `allocate_sync` allocates
// on the default stream and waits for that stream, and `deallocate_sync` frees on the default
// stream without waiting. From the CCCL-based resources on (26.10 here:
// stream_ordered_memory_resource::deallocate_sync) `deallocate_sync` waits for the stream too:
// one more synchronisation per free than RMM's binary makes. So the reference spells the calls
// out itself, the same with every RMM: allocate on the default stream then wait for it; free on
// the default stream. REFERENCE_STREAM_ORDERED waits for nothing, as hipmem does: built only to
// measure what the wait costs.
void wait_for_default_stream()
{
#ifndef REFERENCE_STREAM_ORDERED
  if (cudaStreamSynchronize(nullptr) != cudaSuccess) {
    throw std::runtime_error("cudaStreamSynchronize failed");
  }
#endif
}

#if REFERENCE_OLD_RMM
class null_resource final : public rmm::mr::device_memory_resource {
  void* do_allocate(std::size_t bytes, rmm::cuda_stream_view) override
  {
    return next_null_address(bytes);
  }
  void do_deallocate(void*, std::size_t, rmm::cuda_stream_view) noexcept override {}
};

class Resource {
 public:
  explicit Resource(std::string const& name)
  {
    using pool_mr = rmm::mr::pool_memory_resource<rmm::mr::cuda_memory_resource>;
    if (name == "pool" || name == "binning") {
      pool_ = std::make_unique<pool_mr>(&cuda_, 0);
      if (name == "pool") {
        top_ = pool_.get();
      } else {
        binning_ = std::make_unique<rmm::mr::binning_memory_resource<pool_mr>>(pool_.get(), 18, 22);
        top_     = binning_.get();
      }
    } else if (name == "arena") {
      arena_ = std::make_unique<rmm::mr::arena_memory_resource<rmm::mr::cuda_memory_resource>>(&cuda_);
      top_   = arena_.get();
    } else if (name == "null") {
      top_ = &null_;
    } else {
      throw std::invalid_argument("unknown resource " + name + " (pool, binning, arena, null)");
    }
  }
  void* allocate(std::size_t bytes)
  {
    void* ptr = top_->allocate(rmm::cuda_stream_view{}, bytes);
    wait_for_default_stream();
    return ptr;
  }
  void deallocate(void* ptr, std::size_t bytes)
  {
    top_->deallocate(rmm::cuda_stream_view{}, ptr, bytes);
  }

 private:
  rmm::mr::cuda_memory_resource cuda_;
  std::unique_ptr<rmm::mr::pool_memory_resource<rmm::mr::cuda_memory_resource>> pool_;
  std::unique_ptr<rmm::mr::device_memory_resource> binning_;
  std::unique_ptr<rmm::mr::device_memory_resource> arena_;
  null_resource null_;
  rmm::mr::device_memory_resource* top_ = nullptr;
};
#else
class null_resource {
 public:
  void* allocate(cuda::stream_ref, std::size_t bytes, std::size_t) { return next(bytes); }
  void deallocate(cuda::stream_ref, void*, std::size_t, std::size_t) noexcept {}
  void* allocate_sync(std::size_t bytes, std::size_t) { return next(bytes); }
  void deallocate_sync(void*, std::size_t, std::size_t) noexcept {}
  bool operator==(null_resource const&) const noexcept { return true; }
  bool operator!=(null_resource const&) const noexcept { return false; }
  friend void get_property(null_resource const&, cuda::mr::device_accessible) noexcept {}

 private:
  static void* next(std::size_t bytes) { return next_null_address(bytes); }
};

using any_device_mr = cuda::mr::any_resource<cuda::mr::device_accessible>;

any_device_mr make_resource(std::string const& name)
{
  if (name == "pool") {
    return rmm::mr::pool_memory_resource{rmm::mr::cuda_memory_resource{}, 0};
  }
  if (name == "binning") {
    any_device_mr pool = rmm::mr::pool_memory_resource{rmm::mr::cuda_memory_resource{}, 0};
    return rmm::mr::binning_memory_resource{std::move(pool), int8_t{18}, int8_t{22}};
  }
  if (name == "arena") { return rmm::mr::arena_memory_resource{rmm::mr::cuda_memory_resource{}}; }
  if (name == "null") { return null_resource{}; }
  throw std::invalid_argument("unknown resource " + name + " (pool, binning, arena, null)");
}

class Resource {
 public:
  explicit Resource(std::string const& name) : mr_{make_resource(name)} {}
  void* allocate(std::size_t bytes)
  {
    void* ptr = mr_.allocate(cuda::stream_ref{cudaStream_t{nullptr}}, bytes, 256);
    wait_for_default_stream();
    return ptr;
  }
  void deallocate(void* ptr, std::size_t bytes)
  {
    mr_.deallocate(cuda::stream_ref{cudaStream_t{nullptr}}, ptr, bytes, 256);
  }

 private:
  any_device_mr mr_;
};
#endif

// One repetition: a fresh resource, `passes` timed passes on it.
class Replay {
 public:
  Replay(Log const& log, std::string const& resource, int passes)
    : log_{log}, mr_{resource}, passes_{passes},
      ptrs_(static_cast<std::size_t>(log.slots), nullptr),
      held_(static_cast<std::size_t>(log.slots), 0),
      turns_(log.per_thread.size()),
      start_{static_cast<std::ptrdiff_t>(log.per_thread.size())},
      end_{static_cast<std::ptrdiff_t>(log.per_thread.size())}
  {
  }

  std::vector<int64_t> run()
  {
    std::vector<std::thread> threads;
    for (std::size_t t = 0; t < log_.per_thread.size(); ++t) {
      threads.emplace_back([this, t] { replay_thread(static_cast<int32_t>(t)); });
    }
    for (auto& thread : threads) { thread.join(); }
    return pass_ns_;
  }

 private:
  void replay_thread(int32_t t)
  {
    for (int pass = 0; pass < passes_; ++pass) {
      if (t == 0) { next_ = 0; }
      start_.arrive_and_wait();
      if (t == 0) { t0_ = Clock::now(); }
      for (Event const& event : log_.per_thread[static_cast<std::size_t>(t)]) { play(t, event); }
      end_.arrive_and_wait();
      if (t == 0) { finish_pass(); }
    }
  }

  void play(int32_t t, Event const& event)
  {
    std::unique_lock lock{mutex_};
    if (next_ != event.index) { turn_of(t).wait(lock, [&] { return next_ == event.index; }); }
    auto const slot = static_cast<std::size_t>(event.slot);
    if (event.allocate) {
      ptrs_[slot] = mr_.allocate(event.bytes);
      held_[slot] = event.bytes;
    } else if (ptrs_[slot] != nullptr) {
      mr_.deallocate(ptrs_[slot], held_[slot]);
      ptrs_[slot] = nullptr;
    }
    ++next_;
#ifdef REFERENCE_WAKE_NEXT
    if (next_ < log_.events) {
      auto const owner = log_.owner[static_cast<std::size_t>(next_)];
      if (owner != t) { turn_of(owner).notify_one(); }
    }
#else
    turn_of(t).notify_all();
#endif
  }

  std::condition_variable& turn_of(int32_t t)
  {
#ifdef REFERENCE_WAKE_NEXT
    return turns_[static_cast<std::size_t>(t)];
#else
    (void)t;
    return turns_[0];  // one for all, as RMM's benchmark
#endif
  }

  // What the log never freed goes back inside the timed pass, as in hipmem.
  void finish_pass()
  {
    for (std::size_t s = 0; s < ptrs_.size(); ++s) {
      if (ptrs_[s] != nullptr) {
        mr_.deallocate(ptrs_[s], held_[s]);
        ptrs_[s] = nullptr;
      }
    }
    if (cudaDeviceSynchronize() != cudaSuccess) { std::abort(); }
    auto const wall = Clock::now() - t0_;
    pass_ns_.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(wall).count());
  }

  Log const& log_;
  Resource mr_;
  int passes_;
  std::vector<void*> ptrs_;
  std::vector<std::size_t> held_;
  std::mutex mutex_;
  std::vector<std::condition_variable> turns_;  // one per thread (REFERENCE_WAKE_NEXT uses them)
  int64_t next_ = 0;
  std::barrier<> start_;
  std::barrier<> end_;
  Clock::time_point t0_{};
  std::vector<int64_t> pass_ns_;
};

}  // namespace

int main(int argc, char** argv)
{
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: %s LOG.csv pool|binning|arena|null [PASSES] [REPETITIONS] "
                 "[WARMUP_PASSES]\n",
                 argv[0]);
    return 2;
  }
  try {
    Log const log         = read_log(argv[1]);
    std::string const res = argv[2];
    int const passes      = argc > 3 ? std::atoi(argv[3]) : 5;
    int const repetitions = argc > 4 ? std::atoi(argv[4]) : 1;
    int const warmup      = argc > 5 ? std::atoi(argv[5]) : 0;
    if (warmup > 0) { Replay{log, res, warmup}.run(); }
    for (int r = 0; r < repetitions; ++r) {
      std::vector<int64_t> pass_ns;
      {
        Replay replay{log, res, passes};
        pass_ns = replay.run();
      }  // the resource goes back to the device before the next repetition
      std::printf("{\"resource\": \"%s\", \"events\": %lld, \"threads\": %zu, \"pass_ns\": [",
                  res.c_str(), static_cast<long long>(log.events), log.per_thread.size());
      for (std::size_t i = 0; i < pass_ns.size(); ++i) {
        std::printf("%s%lld", i ? ", " : "", static_cast<long long>(pass_ns[i]));
      }
      std::printf("]}\n");
      std::fflush(stdout);
    }
  } catch (std::exception const& e) {
    std::fprintf(stderr, "replay_threaded_reference: %s\n", e.what());
    return 1;
  }
  return 0;
}
