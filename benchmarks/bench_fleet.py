"""`hipmem fleet` on one GPU against two, side by side in one run: pairs/s and events/s.

Needs a machine with 2 NVIDIA GPUs, nvcc, RMM's wheels (rmm-cu13, librmm-cu13,
rapids-logger) and the fleet extra (dask, distributed, dask-cuda). It

1. builds a fleet from the repository's real logs: windows and shifts of each, every one
   tiled to `--events-per-log` events (a copy frees at its end what it left live, so each
   log keeps its original's peak), so each pair replays long enough that a Dask task's own
   cost (a few milliseconds) does not set the rate;
2. builds the native replay core once (nvcc), before anything is timed;
3. starts two local clusters, one worker on GPU 0 and one worker per GPU on GPUs 0 and 1
   (dask-cuda's LocalCUDACluster, as `hipmem fleet` does), warms every worker up, then
   sweeps every (log, resource) pair on each, alternating, `--rounds` times; the wall time
   of the sweep alone is timed (the cluster is up before);
4. checks that every pair's figures are the same on both clusters, and that the work ran
   on the GPUs it should: one PCI bus id on the 1-GPU cluster, two on the 2-GPU cluster,
   each worker process always on the same one;
5. prints one table (the median round of each) and writes every record to `--out`.

Target: the 2-GPU sweep at >= 1.8x the 1-GPU sweep's pairs/s and events/s.

    python benchmarks/bench_fleet.py [--logs 12] [--events-per-log 1500000] [--rounds 3]
    python benchmarks/bench_fleet.py --host --logs 4 --events-per-log 100000   # no GPU: CPU workers
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hipmem.replay.engine import native
from hipmem.replay.engine.options import ReplayOptions
from hipmem.replay.engine.resources import parse_spec
from hipmem.replay.fleet.cluster import fleet_client, plan_local_cluster
from hipmem.replay.fleet.run import FleetRequest, run_fleet
from tests.fleet_logs import HEADER, REAL, read_rows, shifted, tiled, window

GPU_SPECS = ("pool:initial=16GiB", "binning:initial=16GiB", "arena:size=16GiB", "async")
HOST_SPECS = ("host", "host:limit=1GiB")


def build_fleet(folder: Path, logs: int, events_per_log: int) -> list[Path]:
    """`logs` logs: windows and shifts of the real ones, each tiled to about the events asked."""
    sources = [read_rows(p) for p in sorted(REAL.glob("*.csv.gz"))]
    made: list[Path] = []
    for k in range(logs):
        rows = sources[k % len(sources)]
        start = (k // len(sources)) * 250 % max(1, len(rows) - 4000)
        unit = tiled(shifted(window(rows, start, 4000), 600 * k, (k + 1) << 40), 1)
        # Every copy frees what it left live, so copies can repeat the same addresses.
        text = "".join(",".join(row) + "\n" for row in unit)
        copies = max(1, events_per_log // len(unit))
        path = folder / f"fleet-{k:03d}.csv"
        with path.open("w") as out:
            out.write(HEADER + "\n")
            for _ in range(copies):
                out.write(text)
        made.append(path)
    return made


def load_core(flavour: str) -> None:
    """On a worker: build or load the replay core (returns nothing a client could not take)."""
    native.load(flavour)


def sweep(client: Any, logs: list[Path], specs: list[str], backend: str) -> dict[str, Any]:
    request = FleetRequest(logs, [parse_spec(s) for s in specs], ReplayOptions(backend=backend))
    started = time.perf_counter()
    run = run_fleet(client, request)
    wall_s = time.perf_counter() - started
    failed = [r for r in run.records if r["status"] != "ok"]
    if failed:
        raise SystemExit(f"{len(failed)} pairs failed, first: {failed[0]}")
    events = sum(int(r["events"]) for r in run.records)
    return {
        "wall_s": wall_s,
        "pairs": len(run.records),
        "events": events,
        "pairs_per_s": len(run.records) / wall_s,
        "events_per_s": events / wall_s,
        "records": run.records,
    }


def devices_used(records: list[dict[str, Any]]) -> dict[int, set[str]]:
    """Worker pid -> the GPUs (PCI bus id, else visible-device list) its pairs ran on."""
    used: dict[int, set[str]] = {}
    for r in records:
        where = r["where"]
        used.setdefault(where["pid"], set()).add(str(where["gpu"] or where["visible_devices"]))
    return used


def check_devices(label: str, records: list[dict[str, Any]], gpus: int, host: bool) -> str:
    used = devices_used(records)
    if host:
        return f"{label}: {len(used)} worker process(es)"
    per_worker = [ids for ids in used.values()]
    if any(len(ids) != 1 for ids in per_worker):
        raise SystemExit(f"{label}: a worker ran on several GPUs: {used}")
    distinct = set().union(*per_worker)
    if len(used) != gpus or len(distinct) != gpus:
        raise SystemExit(f"{label}: expected {gpus} workers on {gpus} GPUs, got {used}")
    return f"{label}: workers {sorted(used)} on GPUs {sorted(distinct)}"


def check_same_figures(one: list[dict[str, Any]], two: list[dict[str, Any]]) -> int:
    """Every pair's figures equal on both clusters (peak reserved on one-thread logs)."""
    keys = ("outcome", "failure_count", "peak_requested_bytes")
    compared = 0
    for a, b in zip(one, two, strict=True):
        assert (a["log"], a["spec"]) == (b["log"], b["spec"])
        if {k: a[k] for k in keys} != {k: b[k] for k in keys}:
            raise SystemExit(f"{a['log']} {a['spec']}: 1 GPU {a} but 2 GPUs {b}")
        compared += 1
    return compared


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--logs", type=int, default=12)
    parser.add_argument("--events-per-log", type=int, default=1_500_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--host", action="store_true", help="CPU workers, host memory (no GPU)")
    parser.add_argument("--out", type=Path, default=Path("bench_fleet.json"))
    args = parser.parse_args()
    backend = "host" if args.host else "cuda"
    specs = list(HOST_SPECS if args.host else GPU_SPECS)
    if not args.host:
        native.load("rmm")  # nvcc builds the core once, into the cache the workers share
    with tempfile.TemporaryDirectory(prefix="hipmem-bench-fleet-") as folder:
        t0 = time.perf_counter()
        logs = build_fleet(Path(folder), args.logs, args.events_per_log)
        print(
            f"{len(logs)} logs x {len(specs)} resources, built in {time.perf_counter() - t0:.1f} s"
        )
        plans = {n: plan_local_cluster(gpus_needed=not args.host, workers=n) for n in (1, 2)}
        with fleet_client(plan=plans[1]) as one, fleet_client(plan=plans[2]) as two:
            clients = {1: one, 2: two}
            print(f"clusters: {type(one.cluster).__name__} ({plans[1].describe()}), "
                  f"{type(two.cluster).__name__} ({plans[2].describe()})")  # fmt: skip
            flavour = "host" if args.host else "rmm"
            for n, client in clients.items():  # warm-up: every worker loads the core, once
                client.run(load_core, flavour)
                sweep(client, logs[:n], specs[:1], backend)
            rounds: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
            for r in range(args.rounds):
                for n in (1, 2) if r % 2 == 0 else (2, 1):
                    result = sweep(clients[n], logs, specs, backend)
                    rounds[n].append(result)
                    print(
                        f"round {r + 1}, {n} {'worker' if args.host else 'GPU'}(s): "
                        f"{result['wall_s']:.2f} s, {result['pairs_per_s']:.2f} pairs/s, "
                        f"{result['events_per_s'] / 1e6:.2f} M events/s",
                        flush=True,
                    )
    median = {n: sorted(rs, key=lambda x: x["wall_s"])[len(rs) // 2] for n, rs in rounds.items()}
    unit = "workers" if args.host else "GPUs"
    print(check_devices(f"1 of the {unit}", median[1]["records"], 1, args.host))
    print(check_devices(f"2 {unit}", median[2]["records"], 2, args.host))
    compared = check_same_figures(median[1]["records"], median[2]["records"])
    print(f"{compared} pairs: the same outcome, refused allocations and peak requested on both")
    median_of = f"wall s (median of {args.rounds})"
    print(f"\n| {unit} | pairs | M events | {median_of} | pairs/s | M events/s | vs 1 |")
    print("|---|---|---|---|---|---|---|")
    for n in (1, 2):
        m = median[n]
        speedup = m["pairs_per_s"] / median[1]["pairs_per_s"]
        print(
            f"| {n} | {m['pairs']} | {m['events'] / 1e6:.1f} | {m['wall_s']:.2f} | "
            f"{m['pairs_per_s']:.2f} | {m['events_per_s'] / 1e6:.2f} | {speedup:.2f}x |"
        )
    spread = {n: [round(x["wall_s"], 2) for x in rs] for n, rs in rounds.items()}
    replay_s = statistics.median(r["wall_ns"] for r in median[1]["records"]) / 1e9
    print(f"every round's wall s: {spread}; median pair: {replay_s:.3f} s of replay")
    target = median[2]["events_per_s"] / median[1]["events_per_s"]
    verdict = "met" if target >= 1.8 else "NOT met"
    print(f"2 {unit} / 1: {target:.2f}x events/s (target >= 1.8x): {verdict}")
    out = args.out / "bench_fleet.json" if args.out.is_dir() else args.out  # a folder: inside it
    out.write_text(json.dumps({str(n): rs for n, rs in rounds.items()}, indent=1, default=str))
    print(f"records: {out}")


if __name__ == "__main__":
    main()
