// The machine's own cost of one hand-off between two cores: two threads, pinned to CPUs a and
// b, pass a counter back and forth through one cache line, each spinning (with pause) until
// the value says it is its turn. That is the protocol of hipmem's threaded replay with no
// replay around it, so it is the floor under what a replay pays each time the log changes
// thread (benchmarks/bench_threaded_replay.py runs it beside the null resource).
//
// Build and run (Linux, x86-64):
//   g++ -O2 -std=c++20 -pthread core_to_core_handoff.cpp -o core_to_core_handoff
//   ./core_to_core_handoff [ROUNDS]
// prints a matrix of ns per one-way hand-off (row: first CPU, column: second), then one JSON
// line: {"cpus": N, "min_ns": .., "median_ns": .., "max_ns": ..}.

#include <pthread.h>
#include <sched.h>
#include <x86intrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

void pin_to(int cpu)
{
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

void wait_for(std::atomic<long> const& flag, long value)
{
  while (flag.load(std::memory_order_acquire) != value) { _mm_pause(); }
}

// Nanoseconds per one-way hand-off between CPUs a (this thread) and b.
double handoff_ns(int a, int b, long rounds)
{
  alignas(64) std::atomic<long> flag{0};
  std::thread other([&] {
    pin_to(b);
    for (long i = 1; i < 2 * rounds; i += 2) {
      wait_for(flag, i);
      flag.store(i + 1, std::memory_order_release);
    }
  });
  pin_to(a);
  wait_for(flag, 0);
  auto const start = std::chrono::steady_clock::now();
  for (long i = 0; i < 2 * rounds; i += 2) {
    flag.store(i + 1, std::memory_order_release);
    wait_for(flag, i + 2);
  }
  auto const span = std::chrono::steady_clock::now() - start;
  other.join();
  return std::chrono::duration<double, std::nano>(span).count() / (2.0 * double(rounds));
}

// The CPUs this process may run on.
std::vector<int> allowed_cpus()
{
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) { return cpus; }
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) { cpus.push_back(cpu); }
  }
  return cpus;
}

}  // namespace

int main(int argc, char** argv)
{
  long const rounds          = argc > 1 ? std::atol(argv[1]) : 20000;
  std::vector<int> const ids = allowed_cpus();
  int const cpus             = static_cast<int>(ids.size());
  std::vector<double> all;
  for (int a : ids) {
    for (int b : ids) {
      if (a == b) {
        std::printf("     -");
        continue;
      }
      double const ns = handoff_ns(a, b, rounds);
      all.push_back(ns);
      std::printf(" %5.0f", ns);
    }
    std::printf("\n");
  }
  if (all.empty()) {
    std::printf("{\"cpus\": %d}\n", cpus);
    return 0;
  }
  std::sort(all.begin(), all.end());
  std::printf("{\"cpus\": %d, \"min_ns\": %.1f, \"median_ns\": %.1f, \"max_ns\": %.1f}\n", cpus,
              all.front(), all[all.size() / 2], all.back());
  return 0;
}
