// How fast one CPU of this machine is, sampled every few milliseconds, while other programs
// are measured: a replay that is slow while this CPU is slow too was slowed by the machine.
//
// Each sample times four loops on the CPU the probe is pinned to, none of which calls
// anything: a chain of dependent multiply-adds (the core's clock), a pointer chase through
// 512 KiB (L2 latency) and one through 1 GiB, more than the 300 MiB L3 (memory latency), and
// inserts and erases in a std::map of 4,096 keys (branchy pointer work like an allocator's
// free lists). It prints one line per sample: CLOCK_MONOTONIC ns, then ns per step of each.
// PERIOD_MS 0 samples back to back: the probe then keeps its CPU busy, as a replay does.
//
// Build: c++ -O2 -std=c++20 cpu_speed_probe.cpp -o cpu_speed_probe
// Run:   cpu_speed_probe CPU PERIOD_MS SECONDS   (stops after SECONDS, or when killed)
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <numeric>
#include <random>
#include <vector>

namespace {

int64_t now_ns()
{
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// A single random cycle through `lines` cache lines: each load's address is the last load's
// value, so the loop runs at the latency of wherever the lines live.
std::vector<uint64_t> cycle(size_t lines, std::mt19937_64& random)
{
  constexpr size_t kStride = 8;  // 64-byte lines of uint64_t
  std::vector<uint64_t> order(lines);
  std::iota(order.begin(), order.end(), uint64_t{0});
  std::shuffle(order.begin() + 1, order.end(), random);
  std::vector<uint64_t> memory(lines * kStride);
  for (size_t i = 0; i < lines; ++i) {
    memory[order[i] * kStride] = order[(i + 1) % lines] * kStride;
  }
  return memory;
}

double chase_ns(std::vector<uint64_t> const& memory, uint64_t& at, int steps)
{
  int64_t const start = now_ns();
  for (int i = 0; i < steps; ++i) { at = memory[at]; }
  return double(now_ns() - start) / steps;
}

double multiply_add_ns(uint64_t& x, int steps)
{
  int64_t const start = now_ns();
  for (int i = 0; i < steps; ++i) { x = x * 6364136223846793005ULL + 1442695040888963407ULL; }
  return double(now_ns() - start) / steps;
}

double map_churn_ns(std::map<uint64_t, uint64_t>& keys, uint64_t& x, int steps)
{
  int64_t const start = now_ns();
  for (int i = 0; i < steps; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    uint64_t const key = (x >> 33) & 8191;  // half of 8,192 keys present on average
    auto const found   = keys.find(key);
    if (found == keys.end()) {
      keys.emplace(key, x);
    } else {
      keys.erase(found);
    }
  }
  return double(now_ns() - start) / steps;
}

}  // namespace

int main(int argc, char** argv)
{
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s CPU PERIOD_MS SECONDS\n", argv[0]);
    return 2;
  }
  int const cpu          = std::atoi(argv[1]);
  int64_t const period   = int64_t{std::atoi(argv[2])} * 1'000'000;
  int64_t const duration = int64_t{std::atoi(argv[3])} * 1'000'000'000;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    std::perror("sched_setaffinity");
    return 1;
  }
  std::mt19937_64 random{12345};
  auto const near = cycle(size_t{512} << 10 >> 6, random);
  auto const far  = cycle(size_t{1} << 30 >> 6, random);
  uint64_t at_near = 0, at_far = 0, x = 1, y = 7;
  std::map<uint64_t, uint64_t> keys;
  map_churn_ns(keys, y, 100'000);  // filled to its steady size before the first sample
  std::printf("# cpu %d: monotonic_ns multiply_add_ns l2_load_ns memory_load_ns map_op_ns\n",
              cpu);
  int64_t const end = now_ns() + duration;
  for (int64_t next = now_ns(); now_ns() < end;) {
    int64_t const t = now_ns();
    double const alu = multiply_add_ns(x, 200'000);
    double const l2  = chase_ns(near, at_near, 100'000);
    double const mem = chase_ns(far, at_far, 10'000);
    double const map = map_churn_ns(keys, y, 20'000);
    std::printf("%lld %.3f %.3f %.2f %.2f\n", static_cast<long long>(t), alu, l2, mem, map);
    std::fflush(stdout);
    next += period;
    timespec const until{static_cast<time_t>(next / 1'000'000'000),
                         static_cast<long>(next % 1'000'000'000)};
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, nullptr);
  }
  volatile uint64_t sink = x ^ y ^ at_near ^ at_far;  // the loops' results stay needed
  (void)sink;
  return 0;
}
