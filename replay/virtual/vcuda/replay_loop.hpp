// The replay loop of hipmem's C++ drivers, written once: vcuda_replay.cpp (PyTorch's caching
// allocator) and replay/rmm/csrc/rmm_replay.cpp (RMM's resources) include it (built with
// -I replay/virtual/vcuda), each with an allocator of its own:
//
//   void* allocate(std::size_t bytes, int32_t stream)   the call; throws on a refusal
//   bool refused(std::exception const& err)             whether `err` is a refusal (recorded
//                                                       with its op, the live bytes and the
//                                                       reserved bytes) or an error (thrown on)
//   void deallocate(void* ptr, std::size_t bytes, int32_t stream)
//   int64_t reserved_bytes()                            what the allocator holds from the device
//
// `stream` is the program's stream index (the driver maps it to a stream of its runtime). A
// free goes to the stream its own log row names, as on a GPU; what the log never freed goes
// back at the end, on the stream it was allocated on.
//
// The program is the one replay/engine/program.py writes: raw arrays op.bin (int8: 0 allocate,
// 1 free), slot.bin (int32), size.bin (int64) and stream.bin (int32) in one folder.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace hipmem {

using Clock = std::chrono::steady_clock;
constexpr int64_t kFailuresKept = 1000;

inline int64_t ns_between(Clock::time_point start, Clock::time_point end) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count();
}

template <typename T>
std::vector<T> read_array(std::string const& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw std::runtime_error("cannot read " + path);
  auto const bytes = static_cast<size_t>(in.tellg());
  std::vector<T> values(bytes / sizeof(T));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(bytes));
  return values;
}

template <typename T>
void write_array(std::string const& path, std::vector<T> const& values) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<char const*>(values.data()),
            static_cast<std::streamsize>(values.size() * sizeof(T)));
}

inline void write_list(std::ostringstream& out, char const* name,
                       std::vector<int64_t> const& values) {
  out << ",\"" << name << "\":[";
  for (size_t i = 0; i < values.size(); ++i) out << (i ? "," : "") << values[i];
  out << "]";
}

// One program, as the folder holds it.
struct ProgramArrays {
  std::vector<int8_t> op;
  std::vector<int32_t> slot;
  std::vector<int64_t> size;
  std::vector<int32_t> stream;
  int64_t n_slots = 0;
};

inline ProgramArrays read_program(std::string const& dir, int64_t n_slots) {
  ProgramArrays p;
  p.op = read_array<int8_t>(dir + "/op.bin");
  p.slot = read_array<int32_t>(dir + "/slot.bin");
  p.size = read_array<int64_t>(dir + "/size.bin");
  p.stream = read_array<int32_t>(dir + "/stream.bin");
  p.n_slots = n_slots;
  return p;
}

struct Pass {
  int64_t wall_ns = 0, ops_done = 0, failures = 0, held_at_end_bytes = 0, peak_live_bytes = 0;
  std::vector<int64_t> failure_op, failure_live_bytes, failure_reserved_bytes;
};

// Reserved bytes over a pass, for a plot: the highest point of each window of `every` ops.
struct Sampler {
  int64_t every = 0;
  std::vector<int64_t> triples;  // op, live bytes, reserved bytes
  int64_t best_op = -1, best_live = 0, best_reserved = -1;

  void after(int64_t op, int64_t live_bytes, int64_t reserved) {
    if (reserved > best_reserved) best_op = op, best_live = live_bytes, best_reserved = reserved;
    if ((op + 1) % every == 0) flush();
  }
  void flush() {
    if (best_op >= 0) triples.insert(triples.end(), {best_op, best_live, best_reserved});
    best_op = -1, best_reserved = -1;
  }
};

// One pass over the program. `latency` (when given) gets each call's time (-1: no call);
// `sampler` (when given) looks at every op, so the reserved peak is never missed between
// samples. A refusal's slot stays empty and its free is skipped.
template <typename Allocator>
Pass run_pass(ProgramArrays const& p, Allocator& allocator, bool stop_on_failure,
              int64_t* latency, Sampler* sampler) {
  std::vector<void*> pointers(static_cast<size_t>(p.n_slots), nullptr);
  std::vector<int64_t> slot_bytes(static_cast<size_t>(p.n_slots), 0);
  std::vector<int32_t> slot_stream(static_cast<size_t>(p.n_slots), 0);
  int64_t live_bytes = 0;
  Pass pass;
  auto const n_ops = static_cast<int64_t>(p.op.size());
  auto const start = Clock::now();
  int64_t i = 0;
  for (; i < n_ops; ++i) {
    auto const s = static_cast<size_t>(p.slot[i]);
    if (p.op[i] == 0) {
      auto const t0 = latency ? Clock::now() : Clock::time_point{};
      try {
        pointers[s] = allocator.allocate(static_cast<std::size_t>(p.size[i]), p.stream[i]);
      } catch (std::exception const& err) {
        if (!allocator.refused(err)) throw;
        if (pass.failures < kFailuresKept) {
          pass.failure_op.push_back(i);
          pass.failure_live_bytes.push_back(live_bytes);
          pass.failure_reserved_bytes.push_back(allocator.reserved_bytes());
        }
        ++pass.failures;
        if (stop_on_failure) break;
        if (sampler) sampler->after(i, live_bytes, allocator.reserved_bytes());
        continue;
      }
      if (latency) latency[i] = ns_between(t0, Clock::now());
      slot_bytes[s] = p.size[i];
      slot_stream[s] = p.stream[i];
      live_bytes += p.size[i];
      pass.peak_live_bytes = live_bytes > pass.peak_live_bytes ? live_bytes : pass.peak_live_bytes;
    } else if (pointers[s] != nullptr) {
      auto const t0 = latency ? Clock::now() : Clock::time_point{};
      allocator.deallocate(pointers[s], static_cast<std::size_t>(slot_bytes[s]), p.stream[i]);
      if (latency) latency[i] = ns_between(t0, Clock::now());
      pointers[s] = nullptr;
      live_bytes -= slot_bytes[s];
    }
    if (sampler) sampler->after(i, live_bytes, allocator.reserved_bytes());
  }
  pass.wall_ns = ns_between(start, Clock::now());
  if (sampler) sampler->flush();
  pass.ops_done = i;
  for (size_t s = 0; s < pointers.size(); ++s) {  // what the log never freed goes back
    if (pointers[s] != nullptr) {
      allocator.deallocate(pointers[s], static_cast<std::size_t>(slot_bytes[s]), slot_stream[s]);
      pass.held_at_end_bytes += slot_bytes[s];
    }
  }
  return pass;
}

// A probe line on stdin: DEVICE_BYTES LIMIT_BYTES STOP_ON_FAILURE TIME_CALLS REPEATS
// [SAMPLE_EVERY]. False at the end of the input or on a line that is not one.
struct ProbeLine {
  long long device_bytes = 0, limit_bytes = -1, sample_every = 0;
  int stop = 0, time_calls = 0, repeats = 1;
};

inline bool parse_probe_line(std::string const& line, ProbeLine& probe) {
  std::istringstream fields(line);
  if (!(fields >> probe.device_bytes >> probe.limit_bytes >> probe.stop >> probe.time_calls >>
        probe.repeats)) {
    return false;
  }
  if (!(fields >> probe.sample_every) || probe.sample_every < 0) probe.sample_every = 0;
  if (probe.repeats <= 0) probe.repeats = 1;
  return true;
}

// The driver's last word on an error: one JSON line {"error": FIRST LINE}, and exit status 3.
inline int error_line(std::exception const& err) {
  std::string first(err.what());
  first = first.substr(0, first.find('\n'));
  std::cout << "{\"error\":\"";
  for (char c : first) {
    if (c == '"' || c == '\\') std::cout << '\\';
    std::cout << (c >= 0x20 ? c : ' ');
  }
  std::cout << "\"}" << std::endl;
  return 3;
}

}  // namespace hipmem
