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
//   ./core_to_core_handoff --sequence FILE RUNS
// passes one turn between fresh, unpinned threads in the order FILE gives (the thread that
// holds the turn after each hand-off, as whitespace-separated indices): the hand-offs of a
// log's threaded replay, in its order, with no replay around them (one turn per thread on a
// cache line of its own, threads placed by the kernel and started anew for every run). RUNS
// runs; prints one JSON line: {"threads": T, "handoffs": H, "ns_per_handoff": [one per run]}.

#include <pthread.h>
#include <sched.h>
#include <x86intrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
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

// One turn per thread, alone on its cache line, as in the replay.
struct alignas(64) SequenceTurn {
  std::atomic<long> hop{-1};
};

// Nanoseconds per hand-off when fresh, unpinned threads pass one turn in the order `owner`
// gives (owner[h]: the thread that holds the turn at hop h), from the first hand-off to the
// last (thread start-up excluded, as in the replay).
double sequence_ns_per_handoff(std::vector<int> const& owner, int threads)
{
  std::vector<SequenceTurn> turns(static_cast<size_t>(threads));
  std::atomic<int> ready{0};
  std::chrono::steady_clock::time_point end;
  long const hops = static_cast<long>(owner.size());
  std::vector<std::thread> team;
  for (int t = 0; t < threads; ++t) {
    team.emplace_back([&, t] {
      std::vector<long> mine;  // this thread's hops, found before the clock starts
      for (long hop = 0; hop < hops; ++hop) {
        if (owner[static_cast<size_t>(hop)] == t) { mine.push_back(hop); }
      }
      ready.fetch_add(1);
      for (long hop : mine) {
        wait_for(turns[static_cast<size_t>(t)].hop, hop);
        if (hop + 1 == hops) {
          end = std::chrono::steady_clock::now();
        } else {
          int const next = owner[static_cast<size_t>(hop + 1)];
          turns[static_cast<size_t>(next)].hop.store(hop + 1, std::memory_order_release);
        }
      }
    });
  }
  while (ready.load() < threads) { std::this_thread::yield(); }
  auto const start = std::chrono::steady_clock::now();
  turns[static_cast<size_t>(owner[0])].hop.store(0, std::memory_order_release);
  for (auto& thread : team) { thread.join(); }
  return std::chrono::duration<double, std::nano>(end - start).count() / double(hops - 1);
}

// Reads the turn's owners (whitespace-separated thread indices, 0..T-1) from `path`.
std::vector<int> read_owners(char const* path)
{
  std::vector<int> owner;
  if (FILE* file = std::fopen(path, "r")) {
    int t = 0;
    while (std::fscanf(file, "%d", &t) == 1 && t >= 0 && t < 1024) { owner.push_back(t); }
    std::fclose(file);
  }
  return owner;
}

int sequence_main(char const* path, int runs)
{
  std::vector<int> const owner = read_owners(path);
  if (owner.size() < 2) {
    std::fprintf(stderr, "%s: need at least two thread indices\n", path);
    return 2;
  }
  int const threads = *std::max_element(owner.begin(), owner.end()) + 1;
  std::printf("{\"threads\": %d, \"handoffs\": %zu, \"ns_per_handoff\": [", threads,
              owner.size() - 1);
  for (int run = 0; run < runs; ++run) {
    std::printf("%s%.1f", run == 0 ? "" : ", ", sequence_ns_per_handoff(owner, threads));
  }
  std::printf("]}\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv)
{
  if (argc == 4 && std::string(argv[1]) == "--sequence") {
    return sequence_main(argv[2], std::max(1, std::atoi(argv[3])));
  }
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
