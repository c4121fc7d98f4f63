"""Replay speed in every process: N fresh processes per resource against N runs of the C++ floor.

One process of `hipmem replay` measures one figure; a user who runs it twice must get the same
ranking. This starts `--processes` fresh Python processes per log and resource, each doing
what `hipmem replay LOG -r SPEC --threads single --streams default --repeats 3` does (load the
log, build the program, replay it through the native core), interleaved with as many runs of
the C++ floor (`../shared/bench/replay_floor.cu`, built here against the same librmm): one
floor run, then one hipmem process per resource, then the next round. Each hipmem process
reports every pass (min/median/max over `--repeats`), its best pass, and counters that can
explain a slow process:

- page faults (minor, major) and context switches (voluntary, involuntary) of the replay
  thread (getrusage RUSAGE_THREAD, read on that thread around the core's call) and of the
  whole process (RUSAGE_CHILDREN, read by this parent);
- the replay thread's CPU migrations (`se.nr_migrations`, /proc/thread-self/sched) and time
  spent runnable but waiting for a core (/proc/thread-self/schedstat), and the core it was on
  before and after (field 39 of /proc/thread-self/stat);
- transparent huge pages: AnonHugePages of the whole process (/proc/self/smaps_rollup) and
  of the mapping holding each program array;
- the time before the first event: from this parent's spawn to the core's entry (Python
  start, imports, loading the log, building the program) plus the core's setup (building the
  resource stack, which is where a pool's initial block is taken), and each pass's
  allocations from upstream (a pool's growth; none for async, whose pool is the driver's).

The floor runs the same 16 GiB pool/arena settings, with every resource it would not be
compared on skipped (its source gains one line that returns from `run` for a resource not in
$FLOOR_RESOURCES: cuda and managed take over a minute on the long log).

Output: per log, condition and resource, hipmem's and the floor's min/median/max M events/s,
hipmem's slowest process over the floor's median, the spread (max/min) of each, hipmem like
for like against the floor (median over median, slowest over slowest) and how many processes
of each fell under 0.8 of their own median, and the counters of hipmem's slowest and fastest
process; the whole run as JSON under --out. docs/process-spread.md has a run and its reading.
Targets (issue #29), condition `base`: slowest / floor median >= 1.0 for pool, binning and
arena, >= 0.9 for async, and hipmem's spread no wider than the floor's plus 10 points.

Conditions (`--conditions`, for finding a cause; each applies to hipmem and floor alike
where it can): `base` as a user runs it; `nothp` with transparent huge pages off for the
process (prctl PR_SET_THP_DISABLE); `malloc-thp` with glibc's malloc asking for huge pages
(GLIBC_TUNABLES=glibc.malloc.hugetlb=1); `one-arena` with every thread's malloc in one arena
(glibc.malloc.arena_max=1); `pinned` on one core (sched_setaffinity); and, hipmem only,
`pin-thread` with the replay thread alone kept on the core it starts on, and `main-thread`
with the core called on Python's main thread instead of the engine's replay thread.

`--probe-cpus 0,8` samples the machine's own speed on those CPUs all through the run
(`cpu_speed_probe.cpp`: a multiply-add chain and two pointer chases, every 20 ms) and prints,
per resource, the probe's speed during hipmem's slow passes against its fast ones: whether a
slow pass was the machine being slow.

    python benchmarks/bench_process_spread.py --shared ../shared --out results
    python benchmarks/bench_process_spread.py --from-json results/bench_process_spread.json
    python benchmarks/bench_process_spread.py --backend host --logs gpt --processes 3

With `--backend host` it replays the host resource through the core's host build (no GPU, no
floor): the harness and its counters, anywhere.
"""

from __future__ import annotations

import argparse
import ctypes
import gzip
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hipmem._core.atomic_write import atomic_output  # noqa: E402

# The floor's resources, as hipmem specs with the floor's settings (16 GiB pools and arena).
GPU_SPECS = {
    "pool": "pool:initial=16GiB",
    "binning": "binning:initial=16GiB,min_exp=18,max_exp=22",
    "arena": "arena:size=16GiB",
    "async": "async",
}
HOST_SPECS = {"host": "host"}
# hipmem's slowest process over the floor's median must reach this (issue #29).
TARGET_RATIO = {"pool": 1.0, "binning": 1.0, "arena": 1.0, "async": 0.9}
SPREAD_POINTS = 10.0  # hipmem's spread may exceed the floor's by this many points
SLOW_SHARE = 0.8  # a process under this share of its own tool's median counts as slow
CONDITIONS = ("base", "nothp", "malloc-thp", "one-arena", "pinned", "pin-thread", "main-thread")
HIPMEM_ONLY = ("main-thread", "pin-thread")
ENV_SPAWN_NS = "HIPMEM_SPREAD_SPAWN_NS"
ENV_FLOOR_RESOURCES = "FLOOR_RESOURCES"
_FLOOR_LINE = re.compile(r"^(\w+)\s+([\d.]+) M events/s\s+([\d.]+) ms")
PR_SET_THP_DISABLE = 41


# ---------------------------------------------------------------------------------------------
# Counters, read inside a process (the child) about itself
# ---------------------------------------------------------------------------------------------


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def thread_state() -> dict[str, Any]:
    """The calling thread's counters: rusage, migrations, run delay, the core it is on."""
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    state: dict[str, Any] = {
        "minflt": usage.ru_minflt,
        "majflt": usage.ru_majflt,
        "nvcsw": usage.ru_nvcsw,
        "nivcsw": usage.ru_nivcsw,
        "cpu_s": usage.ru_utime + usage.ru_stime,
    }
    sched = _read("/proc/thread-self/sched") or ""
    found = re.search(r"se\.nr_migrations\s*:\s*(\d+)", sched)
    state["migrations"] = int(found[1]) if found else None
    schedstat = (_read("/proc/thread-self/schedstat") or "").split()
    state["run_delay_ns"] = int(schedstat[1]) if len(schedstat) >= 2 else None
    stat = _read("/proc/thread-self/stat") or ""
    fields = stat[stat.rfind(")") + 2 :].split()  # after the name, which may hold spaces
    state["cpu"] = int(fields[36]) if len(fields) > 36 else None  # field 39 of the line
    return state


def thread_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What moved on the thread between two readings, and the cores it was on."""
    delta: dict[str, Any] = {}
    for key in ("minflt", "majflt", "nvcsw", "nivcsw", "migrations", "run_delay_ns"):
        a, b = before.get(key), after.get(key)
        delta[key] = None if a is None or b is None else b - a
    delta["cpu_s"] = round(after["cpu_s"] - before["cpu_s"], 6)
    delta["cpu_before"], delta["cpu_after"] = before["cpu"], after["cpu"]
    return delta


def cpu_ticks() -> dict[int, list[int]]:
    """Per CPU, /proc/stat's tick counters (user nice system idle iowait irq softirq steal)."""
    found = {}
    for line in (_read("/proc/stat") or "").splitlines():
        if re.match(r"^cpu\d+ ", line):
            name, *values = line.split()
            found[int(name[3:])] = [int(v) for v in values[:8]]
    return found


def ticks_delta(before: dict[int, list[int]], cpu: int | None) -> dict[str, int | None]:
    """What the machine did while the replay ran, in ticks (1/100 s): time the hypervisor took
    from the replay's CPU (steal) and from all, interrupts on that CPU, and busy time of the
    other CPUs."""
    after = cpu_ticks()
    if not before or not after:
        return {"steal_cpu": None, "steal_all": None, "irq_cpu": None, "busy_others": None}

    def moved(c: int, index: int) -> int:
        return after[c][index] - before[c][index]

    others = [c for c in after if c != cpu and c in before]
    return {
        "steal_cpu": None if cpu is None else moved(cpu, 7),
        "steal_all": sum(moved(c, 7) for c in after if c in before),
        "irq_cpu": None if cpu is None else moved(cpu, 5) + moved(cpu, 6),
        "busy_others": sum(moved(c, i) for c in others for i in (0, 1, 2, 5, 6)),
    }


GAP_NS = 50_000  # an allocator call this long was most likely interrupted, not slow


def call_profile(latency_ns: Any) -> dict[str, Any]:
    """How the first pass's allocator calls (the one pass timed call by call) were slow: the
    median call in each tenth of the pass (a machine slowed all through shows every tenth
    slower), and the time in calls over GAP_NS (a thread taken off its core for whole
    milliseconds shows as a few such calls, the median untouched)."""
    import numpy as np

    timed = latency_ns[latency_ns >= 0]
    if len(timed) == 0:
        return {"tenths_p50_ns": [], "gap_calls": 0, "gap_ns": 0}
    tenths = np.array_split(timed, 10)
    return {
        "tenths_p50_ns": [int(np.median(part)) if len(part) else None for part in tenths],
        "gap_calls": int((timed > GAP_NS).sum()),
        "gap_ns": int(timed[timed > GAP_NS].sum()),
    }


def pass_windows(report: Any, entered_ns: int) -> list[list[int]]:
    """When each pass ran (CLOCK_MONOTONIC ns), from the core's entry, its setup, the pass that
    timed each call when it ran apart, and the passes' walls: close enough (the few ms between
    passes aside) to line up with a probe."""
    pass_wall_ns = list(report.pass_wall_ns)
    windows, start = [], entered_ns + (report.setup_ns or 0) + (report.timed_pass_wall_ns or 0)
    for wall in pass_wall_ns:
        windows.append([start, start + wall])
        start += wall
    return windows


def rollup_huge_bytes() -> int | None:
    """AnonHugePages of the whole process (/proc/self/smaps_rollup), bytes."""
    text = _read("/proc/self/smaps_rollup")
    found = re.search(r"^AnonHugePages:\s+(\d+) kB", text or "", re.MULTILINE)
    return int(found[1]) * 1024 if found else None


def mapping_huge_bytes(addresses: dict[str, int]) -> dict[str, dict[str, Any] | None]:
    """For each named address, the mapping that holds it: its size and AnonHugePages, bytes."""
    text = _read("/proc/self/smaps") or ""
    found: dict[str, dict[str, Any] | None] = dict.fromkeys(addresses)
    blocks: list[tuple[int, int, str, dict[str, int]]] = []
    for line in text.splitlines():
        head = re.match(r"^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ \S+\s*(.*)$", line)
        if head:
            blocks.append((int(head[1], 16), int(head[2], 16), head[3], {}))
        elif blocks and (field := re.match(r"^(\w+):\s+(\d+) kB", line)):
            blocks[-1][3][field[1]] = int(field[2]) * 1024
    for name, address in addresses.items():
        for start, end, label, fields in blocks:
            if start <= address < end:
                found[name] = {
                    "start": start,
                    "name": label or "anonymous",
                    "mapping_bytes": end - start,
                    "rss_bytes": fields.get("Rss", 0),
                    "huge_bytes": fields.get("AnonHugePages", 0),
                }
                break
    return found


def _process_usage() -> dict[str, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "minflt": usage.ru_minflt,
        "majflt": usage.ru_majflt,
        "nvcsw": usage.ru_nvcsw,
        "nivcsw": usage.ru_nivcsw,
    }


# ---------------------------------------------------------------------------------------------
# The child: one process, one log, one resource, as `hipmem replay` runs it
# ---------------------------------------------------------------------------------------------


def child(
    csv: Path, spec_text: str, backend: str, repeats: int, condition: str, replays: int
) -> dict[str, Any]:
    """One process's figures. With `replays` > 1 the same replay runs again in the process on a
    fresh resource (`later_replays`): a slow process whose later replays are fast was slow in
    its first stack, one whose later replays are slow too is slow as a process."""
    spawned_ns = int(os.environ.get(ENV_SPAWN_NS, "0")) or None
    from hipmem.replay.engine import native, native_replay
    from hipmem.replay.engine import run as engine
    from hipmem.replay.engine.program import build_program
    from hipmem.replay.engine.resources import parse_spec
    from hipmem.replay.logs.loader import load_log

    log = load_log([csv])
    program = build_program(log)
    seen: dict[str, Any] = {}
    original_call = native.NativeCall.__call__

    def observed_call(self: native.NativeCall, library: ctypes.CDLL) -> None:
        # On the thread that runs the core, right around it: its counters are this replay's.
        arrays = {name: int(a.ctypes.data) for name, a in self.arrays.items() if a.nbytes}
        arrays["latency_ns"] = int(self.run.latency_ns.ctypes.data)
        # Where this thread's small mallocs land (RMM's free lists and maps are made of them):
        # the main heap, or an arena of this thread's own, and whether that has huge pages.
        libc = ctypes.CDLL(None)
        libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
        libc.free.argtypes = [ctypes.c_void_p]
        probe = libc.malloc(48)
        arrays["thread_malloc"] = int(probe)
        libc.free(probe)
        seen["threads_in_process"] = len(list(Path("/proc/self/task").iterdir()))
        seen["thp_before_bytes"] = rollup_huge_bytes()
        seen["arrays"] = mapping_huge_bytes(arrays)
        if condition == "pin-thread":  # this thread stays on the core it is on now
            os.sched_setaffinity(0, {thread_state()["cpu"]})
        ticks_before = cpu_ticks()
        entered_ns = time.monotonic_ns()
        before = thread_state()
        original_call(self, library)
        seen["thread"] = thread_delta(before, thread_state())
        seen["first_pass_calls"] = call_profile(self.run.latency_ns)
        seen["machine_ticks"] = ticks_delta(ticks_before, before["cpu"])
        seen["entered_ns"] = entered_ns
        seen["thp_after_bytes"] = rollup_huge_bytes()
        seen["startup_ns"] = entered_ns - spawned_ns if spawned_ns else None

    native.NativeCall.__call__ = observed_call  # type: ignore[method-assign]
    if condition == "main-thread":
        native_replay.run_cancellable = lambda work, cancel: work()
    options = engine.ReplayOptions(
        backend=backend, threads="single", streams="default", repeats=repeats
    )
    usage_before = _process_usage()
    report = engine.replay_log(log, parse_spec(spec_text), options, program=program)
    usage_after = _process_usage()
    if report.outcome != "completed" or report.failure_count:
        raise SystemExit(f"{spec_text}: {report.outcome}, {report.failure_count} refused")
    first = dict(seen)
    first["pass_windows_ns"] = pass_windows(report, seen["entered_ns"])
    first["timed_pass_wall_ns"] = report.timed_pass_wall_ns
    later = []
    for _ in range(replays - 1):
        again = engine.replay_log(log, parse_spec(spec_text), options, program=program)
        later.append(
            {
                "pass_windows_ns": pass_windows(again, seen["entered_ns"]),
                "machine_ticks": seen["machine_ticks"],
                "mev_s": again.events_per_s / 1e6,
                "thread": seen["thread"],
                "pass_mev_s": [rate / 1e6 for rate in again.pass_events_per_s],
            }
        )
    return {
        "events": report.log_events,
        "pass_wall_ns": list(report.pass_wall_ns),
        "best_wall_ns": report.wall_ns,
        "mev_s": report.events_per_s / 1e6,
        "pass_mev_s": [rate / 1e6 for rate in report.pass_events_per_s],
        "pass_upstream_calls": None
        if report.pass_upstream_calls is None
        else list(report.pass_upstream_calls),
        "setup_ns": report.setup_ns,
        "allocator_ns_first_pass": report.allocator_ns,
        "alloc_p50_ns": report.alloc_latency.p50_ns if report.alloc_latency else None,
        "free_p50_ns": report.free_latency.p50_ns if report.free_latency else None,
        "process_during_replay": {k: usage_after[k] - usage_before[k] for k in usage_before},
        **first,
        "later_replays": later,
    }


# ---------------------------------------------------------------------------------------------
# The parent: logs, the floor, interleaved processes
# ---------------------------------------------------------------------------------------------


def condition_setup(condition: str) -> tuple[dict[str, str], Callable[[], None] | None]:
    """(extra environment, pre-exec hook) that put a process under `condition`."""
    if condition == "malloc-thp":
        return {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}, None
    if condition == "one-arena":  # every thread's malloc in the main arena, as in the floor
        return {"GLIBC_TUNABLES": "glibc.malloc.arena_max=1"}, None
    if condition == "nothp":

        def no_thp() -> None:  # inherited across exec: the whole process runs without THP
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "prctl(PR_SET_THP_DISABLE)")

        return {}, no_thp
    if condition == "pinned":
        cpu = max(os.sched_getaffinity(0))

        def pin() -> None:
            os.sched_setaffinity(0, {cpu})

        return {}, pin
    return {}, None


def run_counted(
    command: list[str], env: dict[str, str], preexec: Callable[[], None] | None
) -> tuple[str, dict[str, int], float]:
    """Run one process to its end: (stdout, its rusage counters, wall seconds). The counters
    are RUSAGE_CHILDREN's growth over the run; children run one at a time, so it is this one's."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        command, capture_output=True, text=True, env=env, preexec_fn=preexec, check=False
    )
    wall_s = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-3:]
        raise RuntimeError(f"{command[0]} exited {done.returncode}: {' | '.join(tail)}")
    usage = {
        name: getattr(after, f"ru_{name}") - getattr(before, f"ru_{name}")
        for name in ("minflt", "majflt", "nvcsw", "nivcsw")
    }
    return done.stdout, usage, wall_s


def run_hipmem(
    csv: Path, spec: str, backend: str, repeats: int, condition: str, replays: int = 1
) -> dict[str, Any]:
    extra, preexec = condition_setup(condition)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, **extra, PYTHONPATH=path)
    env[ENV_SPAWN_NS] = str(time.monotonic_ns())
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        str(csv),
        "--spec",
        spec,
        "--backend",
        backend,
        "--repeats",
        str(repeats),
        "--condition",
        condition,
        "--replays",
        str(replays),
    ]
    stdout, usage, wall_s = run_counted(command, env, preexec)
    found: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    found["process"] = usage
    found["process_wall_s"] = round(wall_s, 3)
    return found


def floor_source(shared_source: Path) -> str:
    """The floor's source with one line added: `run` returns at once for a resource not named
    in $FLOOR_RESOURCES (all run when it is unset). Nothing else changes."""
    text = shared_source.read_text()
    anchor = "static void run(const char* name, MR& mr, const std::vector<Event>& ev) {\n"
    if anchor not in text:
        raise SystemExit(f"bench_process_spread: {shared_source} has no `run` to filter")
    skip = (
        '  if (const char* only = std::getenv("' + ENV_FLOOR_RESOURCES + '")) {\n'
        '    std::string list = std::string(",") + only + ",";\n'
        '    if (list.find(std::string(",") + name + ",") == std::string::npos) return;\n'
        "  }\n"
    )
    return "#include <cstdlib>\n" + text.replace(anchor, anchor + skip)


def build_floor(shared_source: Path, work: Path) -> Path:
    """The floor, built in `work`, or the one an earlier run built there from the same source."""
    from benchmarks.bench_replay import build_floor as build
    from hipmem.replay.engine import native

    work.mkdir(parents=True, exist_ok=True)
    source, binary = work / "replay_floor.cu", work / "replay_floor"
    text = floor_source(shared_source)
    if not (binary.is_file() and source.is_file() and source.read_text() == text):
        source.write_text(text)
        return build(source, work)  # it also puts librmm's folders on LD_LIBRARY_PATH
    _nvcc, rmm_dir, logger_dir = native.rmm_build_inputs()
    os.environ["LD_LIBRARY_PATH"] = f"{rmm_dir}/lib64:{logger_dir}/lib64:" + os.environ.get(
        "LD_LIBRARY_PATH", ""
    )
    return binary


def run_floor(binary: Path, csv: Path, resources: list[str], condition: str) -> dict[str, Any]:
    extra, preexec = condition_setup(condition)
    env = dict(os.environ, **extra, **{ENV_FLOOR_RESOURCES: ",".join(resources)})
    started_ns = time.monotonic_ns()
    stdout, usage, wall_s = run_counted([str(binary), str(csv)], env, preexec)
    window = [started_ns, time.monotonic_ns()]
    rates = {}
    for line in stdout.splitlines():
        if match := _FLOOR_LINE.match(line.strip()):
            rates[match[1]] = float(match[2])
    missing = [r for r in resources if r not in rates]
    if missing:
        raise RuntimeError(f"the floor printed no figure for {missing}: {stdout[-300:]!r}")
    return {
        "mev_s": rates,
        "process": usage,
        "process_wall_s": round(wall_s, 3),
        "window_ns": window,
    }


def start_probes(
    cpus: list[int], work: Path, period_ms: int = 20
) -> list[tuple[int, subprocess.Popen[bytes], Path]]:
    """`cpu_speed_probe.cpp`, built with the host's C++ compiler, sampling each of `cpus` every
    `period_ms` (0: back to back, the CPU kept busy) in the background until stop_probes."""
    compiler = shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        raise SystemExit("bench_process_spread: --probe-cpus needs a C++ compiler (c++)")
    binary = work / "cpu_speed_probe"
    source = Path(__file__).with_name("cpu_speed_probe.cpp")
    subprocess.run([compiler, "-O2", "-std=c++20", str(source), "-o", str(binary)], check=True)
    probes = []
    for cpu in cpus:
        target = work / f"probe-cpu{cpu}.txt"
        with target.open("w") as out:
            proc = subprocess.Popen([str(binary), str(cpu), str(period_ms), "86400"], stdout=out)
        probes.append((cpu, proc, target))
    return probes


def stop_probes(probes: list[tuple[int, subprocess.Popen[bytes], Path]]) -> dict[str, Any]:
    """Each probe's samples: [monotonic ns, multiply-add ns, L2 load ns, memory load ns]."""
    found: dict[str, Any] = {}
    for cpu, proc, target in probes:
        proc.terminate()
        proc.wait()
        lines = target.read_text().splitlines()
        found[str(cpu)] = [[float(x) for x in ln.split()] for ln in lines if ln[:1].isdigit()]
    return found


def prepare_logs(args: argparse.Namespace, work: Path) -> dict[str, Path]:
    """Plain CSVs the floor and hipmem both read: the shared logs, the long one, any files."""
    from tests.fleet_logs import read_rows, tiled, write_log

    logs: dict[str, Path] = {}
    for name in [n for n in args.logs.split(",") if n]:
        source = args.shared / "logs" / f"{'gpt' if name == 'long' else name}.csv.gz"
        rows = read_rows(source)
        if name == "long":
            rows = tiled(rows, args.long_copies)
        logs[name] = write_log(work / f"{name}.csv", rows)
    for path in args.log_file:
        logs[path.name.split(".")[0]] = write_log(
            work / f"{path.name.split('.')[0]}.csv", read_rows(path)
        )
    return logs


def machine() -> dict[str, Any]:
    found: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "glibc": " ".join(platform.libc_ver()),
        "kernel": platform.release(),
        "thp_enabled": (_read("/sys/kernel/mm/transparent_hugepage/enabled") or "").strip(),
        "thp_defrag": (_read("/sys/kernel/mm/transparent_hugepage/defrag") or "").strip(),
    }
    cpuinfo = _read("/proc/cpuinfo") or ""
    model = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.MULTILINE)
    found["cpu_model"] = model[1] if model else None
    try:
        from cuda.bindings import runtime

        _err, props = runtime.cudaGetDeviceProperties(0)
        name = props.name.decode() if isinstance(props.name, bytes) else str(props.name)
        found["gpu"] = name.rstrip("\x00")
    except Exception:  # no GPU, no cuda-bindings: the host run
        found["gpu"] = None
    return found


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from hipmem.replay.engine import native

    specs = HOST_SPECS if args.backend == "host" else GPU_SPECS
    resources = [r for r in args.resources.split(",") if r] if args.resources else list(specs)
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-process-spread-"))
    work.mkdir(parents=True, exist_ok=True)
    probe_cpus = [int(c) for c in args.probe_cpus.split(",") if c]
    probes = start_probes(probe_cpus, work, args.probe_period_ms) if probe_cpus else []
    # The core and the floor are built side by side (nvcc takes most of a minute on each),
    # both before anything is timed.
    with ThreadPoolExecutor(2) as builds:
        core = builds.submit(native.load, "host" if args.backend == "host" else "rmm")
        floor_build = (
            None if args.backend == "host" else builds.submit(build_floor, args.floor_source, work)
        )
        core.result()
        floor = None if floor_build is None else floor_build.result()
    results: dict[str, Any] = {"machine": machine(), "args": _jsonable(vars(args)), "logs": {}}
    try:
        run_rounds(args, results, prepare_logs(args, work), floor, specs, resources)
    finally:
        if probes:
            results["probes"] = stop_probes(probes)
    return results


def run_rounds(
    args: argparse.Namespace,
    results: dict[str, Any],
    logs: dict[str, Path],
    floor: Path | None,
    specs: dict[str, str],
    resources: list[str],
) -> None:
    """Round after round: for each log and condition, one floor run, then one process per
    resource. What drifts on the machine falls on the floor, every log, resource and condition
    alike, and a run cut short by --deadline-s leaves every log with as many rounds."""
    conditions = args.conditions.split(",")
    for name in logs:
        results["logs"][name] = {
            "events": None,
            "conditions": {
                c: {"floor": [], "hipmem": {r: [] for r in resources}} for c in conditions
            },
        }
    deadline = time.monotonic() + args.deadline_s if args.deadline_s else None
    for round_index in range(args.processes):
        if deadline is not None and time.monotonic() > deadline:
            results["stopped_at_deadline"] = f"before round {round_index + 1}"
            break
        for name, csv in logs.items():
            per_log = results["logs"][name]
            for condition in conditions:
                found = per_log["conditions"][condition]
                if floor is not None and condition not in HIPMEM_ONLY:
                    found["floor"].append(run_floor(floor, csv, resources, condition))
                for r in resources:
                    run = run_hipmem(
                        csv, specs[r], args.backend, args.repeats, condition, args.replays
                    )
                    found["hipmem"][r].append(run)
                    per_log["events"] = run["events"]
        save(args, results)  # what a run cut short has measured is kept
        print(f"round {round_index + 1} of {args.processes} done", flush=True)


def probe_alone(args: argparse.Namespace) -> dict[str, Any]:
    """The probes alone for `--probe-alone` seconds, nothing else measured: how this machine
    treats a CPU kept busy (`--probe-period-ms 0`) or lightly used."""
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-process-spread-"))
    work.mkdir(parents=True, exist_ok=True)
    cpus = [int(c) for c in args.probe_cpus.split(",") if c] or [0]
    probes = start_probes(cpus, work, args.probe_period_ms)
    time.sleep(args.probe_alone)
    return {
        "machine": machine(),
        "args": _jsonable(vars(args)),
        "logs": {},
        "probes": stop_probes(probes),
    }


def load_saved(path: Path) -> dict[str, Any]:
    """A saved run: the JSON this writes, or a gzipped copy (.json.gz) as kept in the repo."""
    data = path.read_bytes()
    found: dict[str, Any] = json.loads(gzip.decompress(data) if path.suffix == ".gz" else data)
    return found


def save(args: argparse.Namespace, results: dict[str, Any]) -> None:
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        target = args.out / "bench_process_spread.json"
        with atomic_output(target) as temp:
            temp.write_text(json.dumps(results, indent=1))


def _jsonable(values: dict[str, Any]) -> dict[str, Any]:
    def plain(value: Any) -> Any:
        if isinstance(value, list):
            return [plain(v) for v in value]
        return str(value) if isinstance(value, Path) else value

    return {k: plain(v) for k, v in values.items()}


# ---------------------------------------------------------------------------------------------
# Summaries, table, verdict (also for a saved run: --from-json)
# ---------------------------------------------------------------------------------------------


def spread_of(values: list[float]) -> dict[str, float]:
    """min, median, max and the spread in points: (max / min - 1) * 100."""
    low, high = min(values), max(values)
    return {
        "min": low,
        "median": statistics.median(values),
        "max": high,
        "spread_points": (high / low - 1.0) * 100.0 if low > 0 else float("inf"),
    }


def summarize(found: dict[str, Any], resource_name: str) -> dict[str, Any]:
    """One resource under one condition: hipmem's and the floor's figures, and the verdict."""
    runs = found["hipmem"][resource_name]
    ours = spread_of([run["mev_s"] for run in runs])
    floor_rates = [run["mev_s"][resource_name] for run in found["floor"]]
    summary: dict[str, Any] = {"hipmem": ours, "floor": None, "slowest_over_floor_median": None}
    slowest = min(runs, key=lambda run: run["mev_s"])
    fastest = max(runs, key=lambda run: run["mev_s"])
    summary["slowest"], summary["fastest"] = counters(slowest), counters(fastest)
    if floor_rates:
        floor = spread_of(floor_rates)
        summary["floor"] = floor
        ratio = ours["min"] / floor["median"]
        summary["slowest_over_floor_median"] = ratio
        target = TARGET_RATIO.get(resource_name)
        summary["meets_ratio"] = target is None or ratio >= target
        summary["meets_spread"] = ours["spread_points"] <= floor["spread_points"] + SPREAD_POINTS
        # Beside the targets: hipmem against the floor like for like (median against median,
        # slowest against slowest), and how many processes of each were slow by their own
        # median: what the machine did to each tool.
        summary["median_over_floor_median"] = ours["median"] / floor["median"]
        summary["slowest_over_floor_slowest"] = ours["min"] / floor["min"]
        summary["slow_processes"] = {
            "floor": sum(rate < SLOW_SHARE * floor["median"] for rate in floor_rates),
            "hipmem": sum(run["mev_s"] < SLOW_SHARE * ours["median"] for run in runs),
        }
    return summary


def counters(run: dict[str, Any]) -> dict[str, Any]:
    """The counters of one hipmem process, flat, for the table and the JSON summary."""
    thread = run.get("thread") or {}
    arrays = run.get("arrays") or {}
    mappings = {m["start"]: m for name, m in arrays.items() if m and name != "thread_malloc"}
    huge = sum(m["huge_bytes"] for m in mappings.values())
    heap = arrays.get("thread_malloc") or {}
    first_event_ns = None
    if run.get("startup_ns") is not None and run.get("setup_ns") is not None:
        first_event_ns = run["startup_ns"] + run["setup_ns"]
    return {
        "mev_s": run["mev_s"],
        "pass_mev_s": run.get("pass_mev_s"),
        "thread_minflt": thread.get("minflt"),
        "thread_majflt": thread.get("majflt"),
        "thread_nvcsw": thread.get("nvcsw"),
        "thread_nivcsw": thread.get("nivcsw"),
        "migrations": thread.get("migrations"),
        "run_delay_ns": thread.get("run_delay_ns"),
        "cpu": f"{thread.get('cpu_before')}->{thread.get('cpu_after')}",
        "process_minflt": run["process"]["minflt"],
        "process_nivcsw": run["process"]["nivcsw"],
        "thp_process_bytes": run.get("thp_after_bytes"),
        "thp_arrays_bytes": huge,
        "thread_heap": f"{heap.get('name', '?')} {heap.get('huge_bytes', 0) // 2**20}/"
        f"{heap.get('mapping_bytes', 0) // 2**20} MiB huge",
        "first_event_ns": first_event_ns,
        "setup_ns": run.get("setup_ns"),
        "upstream_calls": run.get("pass_upstream_calls"),
        "alloc_p50_ns": run.get("alloc_p50_ns"),
        "allocator_ns_first_pass": run.get("allocator_ns_first_pass"),
        "later_replays_mev_s": [later["mev_s"] for later in run.get("later_replays") or []],
    }


def _cell(s: dict[str, float] | None) -> str:
    if s is None:
        return "-"
    return f"{s['min']:.2f} / {s['median']:.2f} / {s['max']:.2f}"


def _counters_cell(c: dict[str, Any]) -> str:
    def mib(n: int | None) -> str:
        return "?" if n is None else f"{n / 2**20:.0f}"

    first = c["first_event_ns"]
    return (
        f"{c['mev_s']:.2f}: flt {c['thread_minflt']}, nivcsw {c['thread_nivcsw']}, "
        f"migr {c['migrations']}, cpu {c['cpu']}, thp {mib(c['thp_process_bytes'])}/"
        f"{mib(c['thp_arrays_bytes'])} MiB, heap {c['thread_heap']}, alloc p50 "
        f"{c['alloc_p50_ns']} ns, first event {'?' if first is None else f'{first / 1e6:.0f}'} ms"
        + "".join(f", again {rate:.2f}" for rate in c["later_replays_mev_s"])
    )


def print_log_condition(
    name: str, condition: str, events: int | None, found: dict[str, Any], resources: list[str]
) -> None:
    n = len(next(iter(found["hipmem"].values())))
    print(
        f"\n{name} ({events or 0:,} events), condition {condition}: {n} hipmem processes "
        f"per resource, {len(found['floor'])} floor runs; M events/s min / median / max"
    )
    print(
        "| resource | floor | hipmem | slowest / floor median | spread floor | spread hipmem "
        f"| verdict | median / floor median | slowest / floor slowest | under {SLOW_SHARE}x own "
        "median: floor, hipmem |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in resources:
        s = summarize(found, r)
        floor, ours = s["floor"], s["hipmem"]
        ratio = s["slowest_over_floor_median"]
        verdict = "-"
        if ratio is not None:
            verdict = "ok" if s["meets_ratio"] and s["meets_spread"] else "NOT MET"
        floor_spread = "-" if floor is None else f"{floor['spread_points']:.0f} pts"
        beside = "- | - | -"
        if floor is not None:
            slow = s["slow_processes"]
            beside = (
                f"{s['median_over_floor_median']:.2f}x | {s['slowest_over_floor_slowest']:.2f}x"
                f" | {slow['floor']}/{len(found['floor'])}, {slow['hipmem']}/{n}"
            )
        print(
            f"| {r} | {_cell(floor)} | {_cell(ours)} | "
            f"{'-' if ratio is None else f'{ratio:.2f}x'} | {floor_spread} | "
            f"{ours['spread_points']:.0f} pts | {verdict} | {beside} |"
        )
    for r in resources:
        s = summarize(found, r)
        print(f"  {r} slowest  {_counters_cell(s['slowest'])}")
        print(f"  {r} fastest  {_counters_cell(s['fastest'])}")


def probe_speed(samples: list[list[float]], window: list[int]) -> tuple[float, float] | None:
    """The probe's speed during `window` against its own median over the run: (multiply-add,
    map operations), 1.0 = as usual, 0.5 = taking twice as long. None: no sample in the
    window. (Samples saved before the map loop existed give their memory load instead.)"""
    inside = [row for row in samples if window[0] <= row[0] <= window[1]]
    if not inside:
        return None
    typical_alu = statistics.median(row[1] for row in samples)
    typical_work = statistics.median(row[-1] for row in samples)
    return (
        typical_alu / statistics.median(row[1] for row in inside),
        typical_work / statistics.median(row[-1] for row in inside),
    )


def probe_spells(samples: list[list[float]], bin_ms: float = 100.0) -> dict[str, float]:
    """How often, and for how long, the probe's CPU ran slow: its map operations per `bin_ms`
    bin against their median over the run. A slow bin is under 0.7 of the median speed."""
    if not samples:
        return {"bins": 0, "slow_fraction": 0.0, "longest_slow_s": 0.0, "slowest": 1.0}
    typical = statistics.median(row[-1] for row in samples)
    start = samples[0][0]
    bins: dict[int, list[float]] = {}
    for row in samples:
        bins.setdefault(int((row[0] - start) / (bin_ms * 1e6)), []).append(row[-1])
    speed = {k: typical / statistics.median(v) for k, v in bins.items()}
    slow = sorted(k for k, v in speed.items() if v < 0.7)
    longest = run = 0
    for i, k in enumerate(slow):
        run = run + 1 if i and k == slow[i - 1] + 1 else 1
        longest = max(longest, run)
    return {
        "bins": len(speed),
        "slow_fraction": len(slow) / len(speed),
        "longest_slow_s": longest * bin_ms / 1e3,
        "slowest": min(speed.values()),
    }


def print_probe_spells(probes: dict[str, list[list[float]]]) -> None:
    for cpu, samples in probes.items():
        spells = probe_spells(samples)
        alu = [row[1] for row in samples]
        print(
            f"  probe on cpu {cpu}: {len(samples)} samples over {spells['bins']} bins of 100 ms; "
            f"multiply-add median {statistics.median(alu):.3f} ns; map operations slower than "
            f"0.7x their median in {spells['slow_fraction']:.0%} of the bins, for at most "
            f"{spells['longest_slow_s']:.1f} s in a row, slowest bin {spells['slowest']:.2f}x"
        )


def passes_beside_probe(found: dict[str, Any], resource: str, samples: list[list[float]]) -> Any:
    """(pass speed against the fastest pass of the resource, probe speeds) for every pass."""
    runs = found["hipmem"][resource]
    pairs = []
    best = max(rate for run in runs for rate in _all_pass_rates(run))
    for run in runs:
        for replay in [run, *run.get("later_replays", [])]:
            windows = replay.get("pass_windows_ns") or []
            for rate, window in zip(replay["pass_mev_s"], windows, strict=False):
                speed = probe_speed(samples, window)
                if speed is not None:
                    pairs.append((rate / best, *speed))
    return pairs


def _all_pass_rates(run: dict[str, Any]) -> list[float]:
    return [r for replay in [run, *run.get("later_replays", [])] for r in replay["pass_mev_s"]]


def print_probe_comparison(results: dict[str, Any]) -> None:
    """Whether slow passes fell when the machine itself was slow, per probe CPU."""
    probes = results.get("probes") or {}
    if not probes or not results["logs"]:
        return
    print(
        "\nthe machine's own speed (cpu_speed_probe) during hipmem's passes: passes under 80%"
        " of the resource's fastest pass against those at 90% or more; probe speed 1.00 is "
        "its median over the run, 0.50 twice as slow"
    )
    print_probe_spells(probes)
    for name, per_log in results["logs"].items():
        for condition, found in per_log["conditions"].items():
            for resource_name in found["hipmem"] if _measured(found) else []:
                for cpu, samples in probes.items():
                    print_probe_line(
                        f"{name} {condition} {resource_name}, probe cpu {cpu}",
                        passes_beside_probe(found, resource_name, samples),
                    )


def print_probe_line(label: str, pairs: list[tuple[float, float, float]]) -> None:
    slow = [p for p in pairs if p[0] < 0.8]
    fast = [p for p in pairs if p[0] >= 0.9]
    if len(pairs) < 3 or not slow or not fast:
        print(f"  {label}: {len(pairs)} passes, {len(slow)} slow, {len(fast)} fast")
        return

    def mean(group: list[tuple[float, float, float]], i: int) -> float:
        return statistics.fmean(p[i] for p in group)

    print(
        f"  {label}: {len(slow)} slow passes: multiply-add {mean(slow, 1):.2f}, map "
        f"{mean(slow, 2):.2f}; {len(fast)} fast: {mean(fast, 1):.2f}, {mean(fast, 2):.2f}"
    )


def verdict(results: dict[str, Any], condition: str = "base") -> bool:
    """Whether every log and resource meets the targets under `condition`; prints why not."""
    print(f"\nverdict (condition {condition}):")
    ok = True
    for name, per_log in results["logs"].items():
        found = per_log["conditions"].get(condition)
        if found is None or not _measured(found):
            continue
        short = []
        for r in found["hipmem"]:
            s = summarize(found, r)
            if s["floor"] is None:
                continue
            if not s["meets_ratio"]:
                short.append(
                    f"{r} slowest {s['slowest_over_floor_median']:.2f}x < {TARGET_RATIO[r]:.1f}x"
                )
            if not s["meets_spread"]:
                short.append(
                    f"{r} spread {s['hipmem']['spread_points']:.0f} pts > floor "
                    f"{s['floor']['spread_points']:.0f} + {SPREAD_POINTS:.0f}"
                )
        if not found["floor"]:
            print(f"  {name}: no floor figures (a host run): nothing to judge")
            ok = False
            continue
        ok &= not short
        print(f"  {name}: {'; '.join(short) if short else 'all targets met'}")
    print("  ALL TARGETS MET" if ok else "  NOT all targets met")
    return ok


def _measured(found: dict[str, Any]) -> bool:
    return all(found["hipmem"].values())


def print_results(results: dict[str, Any]) -> None:
    m = results["machine"]
    print(
        f"machine: {m.get('gpu')}, {m.get('cpus')} cpus ({m.get('cpu_model')}), kernel "
        f"{m.get('kernel')}, {m.get('glibc')}, THP {m.get('thp_enabled')} / defrag "
        f"{m.get('thp_defrag')}"
    )
    for name, per_log in results["logs"].items():
        for condition, found in per_log["conditions"].items():
            if _measured(found):
                print_log_condition(
                    name, condition, per_log["events"], found, list(found["hipmem"])
                )
    if not results["logs"]:
        print("\nthe probes alone (cpu_speed_probe), nothing else measured:")
        print_probe_spells(results.get("probes") or {})
    print_probe_comparison(results)
    if any("base" in per_log["conditions"] for per_log in results["logs"].values()):
        verdict(results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared")
    parser.add_argument("--logs", default="gpt,cnn,serve,long", help="shared logs, and long")
    parser.add_argument(
        "--log-file",
        type=Path,
        action="append",
        default=[],
        help="another RMM log to measure (repeatable)",
    )
    parser.add_argument("--long-copies", type=int, default=15, help="gpt tiles in the long log")
    parser.add_argument("--resources", default="", help="comma list (default: all four)")
    parser.add_argument("--processes", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--conditions", default="base", help=f"of {', '.join(CONDITIONS)}")
    parser.add_argument(
        "--replays",
        type=int,
        default=1,
        help="replays per process (the later ones say whether a slow process "
        "stays slow on a fresh resource)",
    )
    parser.add_argument("--backend", choices=("cuda", "host"), default="cuda")
    parser.add_argument(
        "--floor-source",
        type=Path,
        default=None,
        help="replay_floor.cu (default: SHARED/bench/replay_floor.cu)",
    )
    parser.add_argument("--out", type=Path, default=None, help="folder for the JSON")
    parser.add_argument(
        "--work",
        type=Path,
        default=None,
        help="folder for the logs and the floor (kept: a later run reuses the floor)",
    )
    parser.add_argument(
        "--deadline-s",
        type=float,
        default=None,
        help="start no new round after this many seconds (the run is kept)",
    )
    parser.add_argument(
        "--probe-cpus",
        default="",
        help="CPUs to sample the machine's own speed on while measuring (cpu_speed_probe.cpp)",
    )
    parser.add_argument(
        "--probe-period-ms",
        type=int,
        default=20,
        help="between probe samples; 0 keeps each probe's CPU busy",
    )
    parser.add_argument(
        "--probe-alone",
        type=float,
        default=None,
        metavar="SECONDS",
        help="run only the probes, this long, and summarize them",
    )
    parser.add_argument(
        "--from-json",
        type=Path,
        default=None,
        help="print a saved run's tables and verdict; no GPU",
    )
    parser.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--spec", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--condition", default="base", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        found = child(
            args.child, args.spec, args.backend, args.repeats, args.condition, args.replays
        )
        print(json.dumps(found))
        return
    if args.from_json is not None:
        print_results(load_saved(args.from_json))
        return
    unknown = [c for c in args.conditions.split(",") if c not in CONDITIONS]
    if unknown:
        parser.error(f"--conditions: not one of {', '.join(CONDITIONS)}: {', '.join(unknown)}")
    args.floor_source = args.floor_source or args.shared / "bench" / "replay_floor.cu"
    if not args.logs and not args.log_file:
        parser.error("nothing to measure: --logs or --log-file")
    results = probe_alone(args) if args.probe_alone else measure(args)
    save(args, results)
    print()
    print_results(results)


if __name__ == "__main__":
    main()
