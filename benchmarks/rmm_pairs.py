"""More pairs of RMM's binary and the reference measured as it, on chosen cells.

`bench_threaded_replay.py` measures 11 pairs per resource and log. Where a cell comes out
level (the reference faster in about half the pairs), more pairs settle it: this measures
`--pairs` pairs of the cells named, the same way (`measure_against_rmm`), and prints the
paired verdict of each. Needs an NVIDIA GPU, nvcc, RMM's wheels and RMM's binary
(`build_rmm_replay_bench.py` prints the two arguments).

    python benchmarks/rmm_pairs.py --rmm-bench PATH --rmm-bench-libs LIBS \\
        [--shared DIR] [--logs cnn,long] [--resources arena] [--pairs 21]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_threaded_replay import (
    against_rmm,
    build_reference,
    measure_against_rmm,
    write_default_stream_csv,
)
from tests.fleet_logs import read_rows, tiled

LONG_COPIES = 15  # as the bench builds "long": gpt tiled 15 times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--shared", type=Path, default=Path(__file__).resolve().parents[2] / "shared"
    )
    parser.add_argument("--logs", default="cnn,long")
    parser.add_argument("--resources", default="arena")
    parser.add_argument("--pairs", type=int, default=21)
    parser.add_argument("--rmm-bench", type=Path, required=True, help="RMM's REPLAY_BENCH")
    parser.add_argument("--rmm-bench-libs", default="", help="LD_LIBRARY_PATH for it")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rmm-pairs-"))
    reference = build_reference(work)
    for name in args.logs.split(","):
        rows = read_rows(args.shared / "logs" / f"{'gpt' if name == 'long' else name}.csv.gz")
        if name == "long":
            rows = tiled(rows, LONG_COPIES)
        csv = write_default_stream_csv(rows, work / f"{name}.csv")
        for resource in args.resources.split(","):
            found: dict[str, Any] = {
                tool: {resource: []} for tool in ("rmm", "rmm_runs", "reference_as_rmm")
            }
            for _ in range(args.pairs):
                measure_against_rmm(found, args, reference, csv, resource)
            print_cell(name, resource, found["rmm"][resource], found["reference_as_rmm"][resource])


def print_cell(name: str, resource: str, rmm: list[float], as_rmm: list[float]) -> None:
    paired = against_rmm(rmm, as_rmm)
    print(f"{name} {resource}: RMM {statistics.median(rmm):.2f} ms [{min(rmm):.2f}-"
          f"{max(rmm):.2f}], reference as RMM {statistics.median(as_rmm):.2f} ms "
          f"[{min(as_rmm):.2f}-{max(as_rmm):.2f}]; reference {paired['speed_ratio']:.2f}x, "
          f"faster in {paired['reference_faster']} of {paired['pairs']} pairs, "
          f"p(slower) {paired['p_reference_slower']:.3f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
