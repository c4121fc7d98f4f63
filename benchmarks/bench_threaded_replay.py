"""hipmem's default replay mode against a threaded C++ reference and RMM's own replay benchmark.

The mode is the one RMM's `REPLAY_BENCH` (rapidsai/rmm, cpp/benchmarks/replay) measures: a
replay thread per logged thread, every call on the default stream. Needs an NVIDIA GPU, nvcc
and RMM's wheels (rmm-cu13, librmm-cu13, rapids-logger). For each log (gpt, cnn and serve
from `--shared`, and a long one: gpt tiled `--long-copies` times, each copy freeing what it
left live) and each resource as RMM's benchmark builds it (`pool` grown from 0, `binning` with
bins 2^18..2^22 over such a pool, `arena` of RMM's default size), it measures, side by side:

- hipmem: `replay_log(..., ReplayOptions(backend="cuda", streams="default", repeats=PASSES))`,
  i.e. `hipmem replay LOG -r RES --streams default --repeats PASSES`; one repetition is one
  such replay (a fresh resource, the best of PASSES passes: its `wall_ns`);
- the reference, `benchmarks/replay_threaded_reference.cu`, built here against the same librmm:
  RMM's method (one mutex and condition variable, notify_all after every event), the same
  resources, one repetition = a fresh resource and the best of PASSES passes;
- RMM's own binary when `--rmm-bench` names one (built from RMM's source; its libraries in
  `--rmm-bench-libs`): one repetition is one Google Benchmark run, a fresh resource replayed
  N times; its figure is the mean wall time of one replay, `real_time * threads` (see
  `run_rmm`). The reference is then measured the same way for that comparison: a fresh
  resource, N passes, their mean.

hipmem and the reference get `--repetitions` repetitions, RMM's binary and the reference as it
`--rmm-repetitions`; the table shows each one's median and range. The repetitions are
interleaved (one of every tool on every resource, then the next), so that the machine's drift
falls on all of them alike. A process of the reference first replays one untimed pass (as
hipmem's process is warm), except beside a run of RMM's binary that Google Benchmark timed
cold (see `measure_against_rmm`). The ranking check: for each pair of resources on a log
whose reference ranges do not overlap, hipmem must order them the same way. Then the null
resource (a fresh address per allocate, nothing freed) in each of hipmem's four modes, per
event, against the fastest resource in that mode; and what a hand-off between replay threads
costs the null resource, beside the machine's own one-way hand-off between two cores
(`core_to_core_handoff.cpp`, built here with c++), and per hand-off when bare threads pass
a turn in the log's own order (`--sequence`): the replay's hand-offs with no replay.

Targets (issue #19): hipmem's median at least the reference's (speed ratio >= 1.0) on pool,
binning and arena for every log; rankings agree where the reference is sure; the reference not
slower than RMM's binary beyond chance over the pairs (`against_rmm`); null per event under 20%
of the fastest resource's.

    python benchmarks/bench_threaded_replay.py [--shared DIR] [--out DIR] [--repetitions 5]
        [--passes 5] [--rmm-bench PATH --rmm-bench-libs DIR:DIR... [--rmm-repetitions N]]
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hipmem.replay.engine import native
from hipmem.replay.engine.options import ReplayOptions
from hipmem.replay.engine.program import build_program
from hipmem.replay.engine.resources import parse_spec
from hipmem.replay.engine.run import replay_log
from hipmem.replay.logs.loader import load_log
from tests.fleet_logs import HEADER, read_rows, tiled, write_log

RESOURCES = ("pool", "binning", "arena")
RMM_NAMES = {"pool": "Pool Resource", "binning": "Binning Resource", "arena": "Arena Resource"}
MODES = {  # hipmem's four modes: (threads, streams)
    "threads=logged streams=default": ("logged", "default"),
    "threads=logged streams=logged": ("logged", "logged"),
    "threads=single streams=default": ("single", "default"),
    "threads=single streams=logged": ("single", "logged"),
}
NULL_TARGET = 0.20
SIGNIFICANCE = 0.05  # "the reference is slower than RMM's binary" must be this sure
MODE_REPLAYS, MODE_PASSES = 5, 3  # per mode and resource: median of 5 replays, best of 3 passes
SEQUENCE_RUNS = 5  # runs of a log's bare hand-offs: their median and range
# Below this, a hand-off's cost (null threaded minus null on one thread, over the hand-offs) is
# a small difference of two noisy figures divided by a small count: gpt's 80 hand-offs in
# 43,534 events came out at -934 ns.
MIN_HANDOFFS_PER_EVENT = 0.05
_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}  # gbenchmark time units


def write_default_stream_csv(rows: list[list[str]], target: Path) -> Path:
    """A plain CSV with every call on stream 0: RMM's benchmark refuses any other stream."""
    with target.open("w") as out:
        out.write(HEADER + "\n")
        for row in rows:
            out.write(",".join([*row[:5], "0"]) + "\n")
    return target


def build_reference(work: Path) -> Path:
    try:
        nvcc, rmm_dir, logger_dir = native.rmm_build_inputs()
    except native.NativeCoreUnavailable as missing:
        sys.exit(f"bench_threaded_replay: {missing}")
    binary = work / "replay_threaded_reference"
    libs = f"{rmm_dir}/lib64:{logger_dir}/lib64"
    source = Path(__file__).with_name("replay_threaded_reference.cu")
    subprocess.run(
        [nvcc, "-std=c++20", "-O3", "-DNDEBUG", "-diag-suppress", "177",
         f"-I{rmm_dir}/include", f"-I{rmm_dir}/include/rapids", f"-I{logger_dir}/include",
         str(source), "-o", str(binary),
         "-Xlinker", "--no-as-needed", f"-L{logger_dir}/lib64", "-lrapids_logger",
         f"-L{rmm_dir}/lib64", "-lrmm", "-cudart", "static",
         "-Xlinker", "--disable-new-dtags", "-Xlinker", f"-rpath,{libs}"],
        check=True,
    )  # fmt: skip
    return binary


def handoff_binary(work: Path) -> Path | None:
    """`core_to_core_handoff.cpp` built with the host's C++ compiler, or None without one."""
    compiler = shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        return None
    binary = work / "core_to_core_handoff"
    if not binary.exists():
        source = Path(__file__).with_name("core_to_core_handoff.cpp")
        subprocess.run([compiler, "-O2", "-std=c++20", "-pthread", str(source), "-o",
                        str(binary)], check=True)  # fmt: skip
    return binary


def bare_handoff(binary: Path | None, rounds: int = 20_000) -> dict[str, Any] | None:
    """The machine's own one-way hand-off between two cores (`core_to_core_handoff.cpp`):
    min, median and max over all pairs, and the whole matrix (ns, row: first CPU), which says
    which cores pass a cache line fastest."""
    if binary is None:
        return None
    done = subprocess.run([str(binary), str(rounds)], capture_output=True, text=True, check=True)
    *matrix, summary = done.stdout.strip().splitlines()
    found: dict[str, Any] = json.loads(summary)
    found["matrix_ns"] = [
        [None if cell == "-" else float(cell) for cell in row.split()] for row in matrix
    ]
    return found


def turn_owners(program: Any) -> Any:
    """The replay thread that holds the turn after each hand-off (and at the start): the
    thread of each run of consecutive ops on one thread."""
    threads = program.thread_index
    if len(threads) == 0:
        return threads
    return threads[np.r_[0, np.flatnonzero(threads[1:] != threads[:-1]) + 1]]


def sequence_handoff(binary: Path | None, program: Any, runs: int, work: Path) -> list[float]:
    """ns per hand-off when bare threads pass a turn in this program's order, one figure per
    run (`core_to_core_handoff --sequence`): the replay's hand-offs with no replay."""
    owners = turn_owners(program)
    if binary is None or len(owners) < 2:
        return []
    sequence = work / "turn_owners.txt"
    sequence.write_text(" ".join(str(int(t)) for t in owners) + "\n")
    done = subprocess.run([str(binary), "--sequence", str(sequence), str(runs)],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return [float(ns) for ns in json.loads(done.stdout)["ns_per_handoff"]]


def handoffs(program: Any) -> int:
    """How many times the log changes thread: the hand-offs of a threaded replay."""
    return max(0, len(turn_owners(program)) - 1)


def run_reference(binary: Path, csv: Path, resource: str, passes: int, reps: int,
                  warmup_passes: int = 1) -> list[list[float]]:  # fmt: skip
    """Milliseconds of every pass, per repetition (a fresh resource each), in a process warmed
    first by `warmup_passes` untimed passes, as hipmem's process is warm when it is timed."""
    done = subprocess.run(
        [str(binary), str(csv), resource, str(passes), str(reps), str(warmup_passes)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return [[ns / 1e6 for ns in line["pass_ns"]] for line in lines]


def best_passes(repetitions: list[list[float]]) -> list[float]:
    """Per repetition, its best pass: what hipmem's `--repeats` reports."""
    return [min(passes) for passes in repetitions]


def _with_libraries(libs: str) -> dict[str, str]:
    """The environment RMM's binary runs in: its libraries first on the loader path."""
    return dict(os.environ, LD_LIBRARY_PATH=libs + ":" + os.environ.get("LD_LIBRARY_PATH", ""))


def run_rmm(binary: Path, libs: str, csv: Path, resource: str, reps: int) -> list[dict[str, float]]:
    """Per repetition: `wall_ms`, the wall time of one replay of the log (one iteration), and
    `iterations`, how many replays each thread made in it.

    Google Benchmark runs a multi-threaded benchmark's `threads` threads `iters` iterations
    each, sums the iterations over the threads and averages their wall times (v1.7.1,
    src/benchmark_runner.cc: `results.iterations += st.iterations()` and
    `real_time_used /= b.threads`), so its `real_time` per iteration is the wall time of one
    replay divided by the thread count. RMM's benchmark replays the whole log in each
    iteration on every thread, so the wall time per replay is `real_time * threads`.
    `check_rmm_time_unit` measures this on RMM's binary in each run.
    """
    env = _with_libraries(libs)
    out = csv.with_suffix(f".{resource}.rmm.json")  # its stdout mixes the log's own lines in
    subprocess.run(
        [str(binary), "-f", str(csv), "-r", resource, f"--benchmark_repetitions={reps}",
         f"--benchmark_out={out}", "--benchmark_out_format=json"],
        capture_output=True, text=True, check=True, env=env,
    )  # fmt: skip
    found = []
    for run in json.loads(out.read_text())["benchmarks"]:
        if run.get("run_type") == "iteration" and run["name"].startswith(RMM_NAMES[resource]):
            threads = int(run["threads"])
            real_ms = float(run["real_time"]) * _MS[run["time_unit"]]
            found.append({
                "wall_ms": real_ms * threads,
                "real_time_ms": real_ms,
                "iterations": int(run["iterations"]) // threads,
            })  # fmt: skip
    return found


def check_rmm_time_unit(binary: Path, libs: str, csv: Path) -> dict[str, Any]:
    """Time RMM's binary from outside: the wall per replay against `real_time * threads`.

    With `--v=2` Google Benchmark prints "Running NAME for N" before each run of N iterations
    and "Ran in CPU/REAL" after it, on stderr as they happen. The time between the two lines
    of the last run, read on this side's clock, divided by N, is the wall time of one replay.
    """
    env = _with_libraries(libs)
    out = csv.with_suffix(".check.rmm.json")
    started: dict[str, float] = {}
    spans: list[tuple[int, float]] = []
    with subprocess.Popen(
        [str(binary), "-f", str(csv), "-r", "pool", "--v=2", f"--benchmark_out={out}",
         "--benchmark_out_format=json"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
    ) as proc:  # fmt: skip
        assert proc.stderr is not None
        for line in proc.stderr:  # "-- LOG(2): Running Pool Resource/threads:5 for 10"
            now = time.perf_counter()
            if running := re.search(r"Running .* for (\d+)$", line.strip()):
                started = {"iters": float(running[1]), "at": now}
            elif "Ran in " in line and started:
                spans.append((int(started["iters"]), now - started["at"]))
    if not spans:
        return {"error": "no --v=2 lines from RMM's binary"}
    iters, seconds = spans[-1]
    runs = json.loads(out.read_text())["benchmarks"]
    run = next(r for r in runs if r["name"].startswith(RMM_NAMES["pool"]))
    real_ms = float(run["real_time"]) * _MS[run["time_unit"]]
    return {
        "threads": int(run["threads"]),
        "iterations_per_thread": iters,
        "reported_iterations": int(run["iterations"]),
        "real_time_ms": real_ms,
        "real_time_x_threads_ms": real_ms * int(run["threads"]),
        "outside_wall_per_iteration_ms": seconds * 1e3 / iters,
    }


def run_hipmem(log: Any, program: Any, spec: str, mode: tuple[str, str], passes: int,
               reps: int) -> list[float]:  # fmt: skip
    threads, streams = mode
    options = ReplayOptions(backend="cuda", threads=threads, streams=streams, repeats=passes)
    walls = []
    for _ in range(reps):
        report = replay_log(log, parse_spec(spec), options, program=program)
        assert report.outcome == "completed" and report.failure_count == 0, report.outcome
        walls.append(report.wall_ns / 1e6)
    return walls


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def agreeing_order(reference: dict[str, list[float]], ours: dict[str, list[float]]) -> list[str]:
    """The pairs the reference is sure of (ranges apart) that hipmem orders otherwise."""
    wrong = []
    for i, a in enumerate(RESOURCES):
        for b in RESOURCES[i + 1 :]:
            ra, rb = reference[a], reference[b]
            sure = max(ra) < min(rb) or max(rb) < min(ra)  # the reference's ranges are apart
            reference_first = statistics.median(ra) < statistics.median(rb)
            ours_first = statistics.median(ours[a]) < statistics.median(ours[b])
            if sure and reference_first != ours_first:
                wrong.append(f"{a}/{b}")
    return wrong


def sign_test_p(wins: int, pairs: int) -> float:
    """One-sided sign test: the chance that a fair coin wins `wins` or more of `pairs`."""
    return sum(math.comb(pairs, k) for k in range(wins, pairs + 1)) / 2**pairs


def against_rmm(rmm: list[float], as_rmm: list[float]) -> dict[str, float]:
    """The reference against RMM's binary, pair by pair: each of RMM's repetitions ran just
    before one of the reference's, so a pair shares the machine's state of the moment, which
    moves both by more than they differ (a quarter and more). `speed_ratio` is the geometric
    mean of RMM's time over the reference's; the reference counts as slower only where the
    pairs say so beyond chance (`p_reference_slower` under SIGNIFICANCE)."""
    ratios = [r / a for r, a in zip(rmm, as_rmm, strict=True)]
    faster = sum(ratio > 1.0 for ratio in ratios)
    return {
        "pairs": len(ratios),
        "reference_faster": faster,
        "speed_ratio": statistics.geometric_mean(ratios),
        "p_reference_slower": sign_test_p(len(ratios) - faster, len(ratios)),
    }


def machine() -> dict[str, Any]:
    from cuda.bindings import runtime

    _err, props = runtime.cudaGetDeviceProperties(0)
    name = props.name.decode() if isinstance(props.name, bytes) else str(props.name)
    return {
        "gpu": name.rstrip("\x00"),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "rmm": (native._package_dir("librmm") or Path("?")).joinpath("VERSION").read_text().strip()
        if native._package_dir("librmm")
        else "?",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--shared", type=Path, default=Path(__file__).resolve().parents[2] / "shared"
    )
    parser.add_argument("--out", type=Path, default=None, help="folder for bench.json")
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--long-copies", type=int, default=15)
    parser.add_argument("--logs", default="gpt,cnn,serve,long")
    parser.add_argument("--rmm-bench", type=Path, default=None, help="RMM's REPLAY_BENCH")
    parser.add_argument("--rmm-bench-libs", default="", help="LD_LIBRARY_PATH for it")
    parser.add_argument(
        "--rmm-repetitions",
        type=int,
        default=None,
        help="repetitions of RMM's binary and of the reference measured as it (default: "
        "--repetitions); both spread widely, since every event wakes every thread",
    )
    parser.add_argument(
        "--from-json",
        type=Path,
        default=None,
        help="print the tables and the verdict of a saved bench_threaded_replay.json; no GPU",
    )
    args = parser.parse_args()
    if args.from_json:
        data = args.from_json.read_bytes()  # a saved run, or a gzipped copy (.json.gz)
        saved = json.loads(gzip.decompress(data) if args.from_json.suffix == ".gz" else data)
        for name, found in saved["logs"].items():
            print_log(name, found)
        verdict(saved)
        return
    native.load("rmm")  # build the core before anything is timed
    work = Path(tempfile.mkdtemp(prefix="bench-threaded-"))
    reference = build_reference(work)
    results: dict[str, Any] = {
        "machine": machine(),
        "args": vars(args) | {"shared": str(args.shared)},
    }
    results["logs"] = {}
    handoff = handoff_binary(work)
    results["bare_handoff"] = bare_handoff(handoff)
    summary = {k: v for k, v in (results["bare_handoff"] or {}).items() if k != "matrix_ns"}
    print(f"one-way hand-off between two cores on this machine (core_to_core_handoff.cpp): "
          f"{summary}")  # fmt: skip
    if args.rmm_bench:
        serve = write_default_stream_csv(
            read_rows(args.shared / "logs" / "serve.csv.gz"), work / "check.csv"
        )
        results["rmm_time_unit"] = check_rmm_time_unit(args.rmm_bench, args.rmm_bench_libs, serve)
        print(f"RMM's real_time per iteration, checked on serve.csv (pool): "
              f"{results['rmm_time_unit']}")  # fmt: skip
    for name in args.logs.split(","):
        source = args.shared / "logs" / f"{'gpt' if name == 'long' else name}.csv.gz"
        rows = read_rows(source)
        if name == "long":
            rows = tiled(rows, args.long_copies)
        csv = write_default_stream_csv(rows, work / f"{name}.csv")
        log = load_log(csv)
        # The logged streams too, for hipmem's modes that put each on its own real stream.
        logged = load_log(write_log(work / f"{name}-streams.csv", rows))
        results["logs"][name] = measure_log(args, reference, handoff, csv, log, logged)
        print_log(name, results["logs"][name])
    verdict(results)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "bench_threaded_replay.json").write_text(
            json.dumps(results, indent=1, default=str)
        )


def measure_log(args: argparse.Namespace, reference: Path, handoff: Path | None, csv: Path,
                log: Any, logged: Any) -> dict[str, Any]:  # fmt: skip
    reps, passes = args.repetitions, args.passes
    program, logged_program = build_program(log), build_program(logged)
    found: dict[str, Any] = {
        "events": len(log.events),
        "threads": len(program.threads),
        "handoffs": handoffs(program),
        "modes": {},
    }
    for tool in ("reference", "hipmem", "rmm", "rmm_runs", "reference_as_rmm"):
        found[tool] = {resource: [] for resource in RESOURCES}
    default_mode = MODES["threads=logged streams=default"]
    rmm_reps = (args.rmm_repetitions or reps) if args.rmm_bench else 0
    # One repetition of every tool on every resource in turn, then the next: whatever drifts on
    # the machine during the run (other tenants, clocks) falls on all of them alike, so neither
    # the rankings nor the ratios depend on which tool or resource ran while it was slow.
    for rep in range(max(reps, rmm_reps)):
        for resource in RESOURCES:
            if rep < reps:
                measure_ours(found, reference, csv, log, program, resource, default_mode, passes)
            if rep < rmm_reps:
                measure_against_rmm(found, args, reference, csv, resource)
    found["reference"]["null"] = best_passes(run_reference(reference, csv, "null", passes, reps))
    for label, mode in MODES.items():
        found["modes"][label] = per_event_ns(logged, logged_program, mode)
    found["bare_sequence_ns_per_handoff"] = sequence_handoff(
        handoff, program, SEQUENCE_RUNS, csv.parent
    )
    return found


def per_event_ns(log: Any, program: Any, mode: tuple[str, str],
                 specs: tuple[str, ...] = (*RESOURCES, "null")) -> dict[str, float]:  # fmt: skip
    """ns per event of every resource and of null (or of `specs`) in one of hipmem's modes: the
    median of MODE_REPLAYS replays, each the best of MODE_PASSES passes."""
    return {
        spec: statistics.median(run_hipmem(log, program, spec, mode, MODE_PASSES, MODE_REPLAYS))
        * 1e6
        / len(log.events)
        for spec in specs
    }


def measure_ours(found: dict[str, Any], reference: Path, csv: Path, log: Any, program: Any,
                 resource: str, mode: tuple[str, str], passes: int) -> None:  # fmt: skip
    """One repetition of the reference and of hipmem: each a fresh resource, its best pass."""
    found["reference"][resource] += best_passes(run_reference(reference, csv, resource, passes, 1))
    found["hipmem"][resource] += run_hipmem(log, program, resource, mode, passes, 1)


def measure_against_rmm(found: dict[str, Any], args: argparse.Namespace, reference: Path,
                        csv: Path, resource: str) -> None:  # fmt: skip
    """One repetition of RMM's binary, then the reference measured as Google Benchmark measures
    it: one fresh resource, as many passes as RMM's threads made in that repetition, the mean
    pass (the cold first one included, as RMM's first iteration is).

    Google Benchmark first runs 1 iteration and reports that run if it took long enough (the
    long log); otherwise it runs again with more, in the same process, and reports the last.
    So RMM's process is warm when timed exactly when it made more than one iteration, and the
    reference's process gets one untimed pass first exactly then."""
    [run] = run_rmm(args.rmm_bench, args.rmm_bench_libs, csv, resource, 1)
    found["rmm_runs"][resource].append(run)
    found["rmm"][resource].append(run["wall_ms"])
    iterations = int(run["iterations"])
    [passes_ms] = run_reference(
        reference, csv, resource, iterations, 1, warmup_passes=1 if iterations > 1 else 0
    )
    found["reference_as_rmm"][resource].append(statistics.mean(passes_ms))


def print_log(name: str, found: dict[str, Any]) -> None:
    print(
        f"\n{name}: {found['events']:,} events, {found['threads']} threads (ms; median [min-max])"
    )
    print("| resource | RMM REPLAY_BENCH (mean) | reference (mean, as RMM) | reference (best) "
          "| hipmem (best) | hipmem vs reference | reference vs RMM |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for resource in RESOURCES:
        cells = []
        for tool in ("rmm", "reference_as_rmm", "reference", "hipmem"):
            values = found[tool].get(resource)
            if values:
                s = spread(values)
                cells.append(f"{s['median']:.2f} [{s['min']:.2f}-{s['max']:.2f}]")
            else:
                cells.append("-")
        hip = statistics.median(found["hipmem"][resource])
        ref = statistics.median(found["reference"][resource])
        rmm = found["rmm"].get(resource)
        as_rmm = found["reference_as_rmm"].get(resource)
        vs_rmm = "-"
        if rmm and as_rmm:
            paired = against_rmm(rmm, as_rmm)
            of_medians = statistics.median(rmm) / statistics.median(as_rmm)
            vs_rmm = (f"{paired['speed_ratio']:.2f}x, faster in {paired['reference_faster']} of "
                      f"{paired['pairs']} pairs (medians {of_medians:.2f}x)")  # fmt: skip
        print(f"| {resource} | {' | '.join(cells)} | {ref / hip:.2f}x | {vs_rmm} |")
    print("null per event (ns) against the fastest resource, per hipmem mode:")
    for label, per_event in found["modes"].items():
        fastest = min(per_event[r] for r in RESOURCES)
        share = per_event["null"] / fastest
        print(f"  {label}: null {per_event['null']:.1f} ns, fastest {fastest:.1f} ns "
              f"({share:.0%}{'' if share < NULL_TARGET else ' OVER 20%'})")  # fmt: skip
    print_handoffs(found)


def print_handoffs(found: dict[str, Any]) -> None:
    """What a hand-off costs the null replay (logged threads above one thread, per hand-off),
    beside bare threads passing a turn in the same order. Only where hand-offs are frequent
    enough for the difference to stand above the replays' own spread."""
    per_event = found["handoffs"] / found["events"]
    print(f"  {found['handoffs']:,} hand-offs ({per_event:.2f} per event)", end="")
    if per_event < MIN_HANDOFFS_PER_EVENT:
        print(f": too few to price (under {MIN_HANDOFFS_PER_EVENT} per event)")
        return
    print("; null with logged threads above null on one thread, per hand-off:")
    for streams in ("default", "logged"):
        logged = found["modes"][f"threads=logged streams={streams}"]["null"]
        single = found["modes"][f"threads=single streams={streams}"]["null"]
        per_handoff = (logged - single) * found["events"] / found["handoffs"]
        print(f"    streams={streams}: {per_handoff:.0f} ns")
    bare = found.get("bare_sequence_ns_per_handoff")
    if bare:
        low, middle, high = min(bare), statistics.median(bare), max(bare)
        print(f"    bare threads passing a turn in the same order, nothing else: "
              f"{middle:.0f} ns per hand-off [{low:.0f}-{high:.0f}]")  # fmt: skip


def verdict(results: dict[str, Any]) -> None:
    print("\nverdict:")
    ok = True
    for name, found in results["logs"].items():
        slower = [
            r
            for r in RESOURCES
            if statistics.median(found["hipmem"][r]) > statistics.median(found["reference"][r])
        ]
        wrong = agreeing_order(found["reference"], found["hipmem"])
        ref_vs_rmm = [
            r
            for r in RESOURCES
            if found["rmm"].get(r)
            and against_rmm(found["rmm"][r], found["reference_as_rmm"][r])["p_reference_slower"]
            < SIGNIFICANCE
        ]
        over = [
            label
            for label, per_event in found["modes"].items()
            if per_event["null"] >= NULL_TARGET * min(per_event[r] for r in RESOURCES)
        ]
        ok &= not (slower or wrong or ref_vs_rmm or over)
        print(f"  {name}: hipmem slower than the reference on {slower or 'none'}; "
              f"order differs on {wrong or 'none'}; reference surely slower than RMM on "
              f"{ref_vs_rmm or 'none'}; null over 20% in {over or 'no mode'}")  # fmt: skip
    print("  ALL TARGETS MET" if ok else "  NOT all targets met")


if __name__ == "__main__":
    main()
