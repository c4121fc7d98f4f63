"""On a machine with an NVIDIA GPU: do RMM's resources on the virtual GPU answer as on the GPU?

The same driver (replay/rmm/csrc/rmm_replay.cpp), compiled here with g++ against the same RMM
release's headers (librmm-cu12 24.12.1 and 25.4.0 from PyPI), is linked twice: to hipmem's
stand-in runtime (the virtual GPU) and to NVIDIA's real `libcudart.so.12` (from the
`nvidia-cuda-runtime-cu12` wheel, 12.9; it runs on any driver of CUDA 12.9 or later). So both
sides run the very same RMM code; only the runtime under it differs. For each log and each
resource, the GPU side runs first and reports the free memory it saw (after its context was
made); the virtual GPU is then given exactly that much memory, so that arena's default size
(half the free memory) is the same number of bytes. It prints peak reserved bytes (what the
resource took from cudaMalloc), refused allocations, cudaMalloc calls, `--find-capacity`
(pool/binning: smallest `maximum`; others: smallest `limit`, bisected to 1 MiB, as hipmem
does) and events/s, virtual vs GPU, and exits 1 on any mismatch of a figure.

Prepare here (a machine with internet and g++; no GPU needed), then carry one folder:

    .venv/bin/python benchmarks/gpu_rmm_virtual_check.py --prepare
        # fetches both releases (hipmem rmm fetch), builds 4 drivers into
        # build/rmm-gpu-check/ (about 6 MB; `build/` is git-ignored)

On the GPU machine (no internet; python3 with numpy and pandas), hipmem installed from the
checkout (its folders install as hipmem.replay etc., so the repository root on sys.path is not
enough), the wheels it lacks there carried in the git-ignored `.whl/` (`pip download -d .whl
pyelftools setuptools` here), with the device tool's carry ["build/rmm-gpu-check", ".whl"]:

    python3 -m pip install -q --no-index --no-deps .whl/*.whl
    python3 -m pip install -q --no-index --no-deps --no-build-isolation -e .
    python3 benchmarks/gpu_rmm_virtual_check.py [--capacity] [--logs FILE ...] [--json OUT]

Logs: tests/data/real/*.csv.gz, samples/serve-first-2000.csv.gz and shared/logs/*.csv.gz
(the repository's shared/, or ../shared, or ../../shared) when present; or --logs FILE ...
`--dry-run` runs only the virtual side (no GPU needed), to check the script and the carried
folder. With --capacity each GPU probe makes a CUDA context (a few tenths of a second):
split the logs over several runs (--logs) if one nears the device tool's 10 minutes.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hipmem._core.bisection import NothingHolds, least_holding_above  # noqa: E402
from hipmem.replay.capacity.search import _sized, sized_option  # noqa: E402
from hipmem.replay.engine.program import build_program  # noqa: E402
from hipmem.replay.engine.resources import ResourceSpec, parse_spec  # noqa: E402
from hipmem.replay.logs.loader import load_log  # noqa: E402
from hipmem.replay.rmm.virtual import driver_arguments  # noqa: E402
from hipmem.replay.virtual.gpu import ProgramFiles  # noqa: E402

CARRIED = REPO / "build" / "rmm-gpu-check"
RELEASES = ("24.12.1", "25.4.0")
RESOURCES = ("cuda", "pool", "arena", "binning", "fixed", "pool:limit=600MiB")
MiB = 1 << 20


def prepare() -> None:
    """Fetch both releases and build the virtual and the real-runtime driver of each."""
    from hipmem.replay.rmm import build as rmm_build
    from hipmem.replay.rmm import fetch as rmm_fetch

    shutil.rmtree(CARRIED, ignore_errors=True)
    for version in RELEASES:
        rmm = rmm_fetch.fetch(version)
        for runtime in rmm_build.RUNTIMES:
            built = rmm_build.build(rmm, runtime)
            into = CARRIED / version / runtime
            into.mkdir(parents=True)
            for path in built.iterdir():
                if path.name != "build.json":
                    shutil.copy2(path, into / path.name)
    total = sum(p.stat().st_size for p in CARRIED.rglob("*") if p.is_file())
    print(f"carry {CARRIED.relative_to(REPO)} ({total / MiB:.1f} MiB)")


def default_logs() -> list[Path]:
    # ../shared of the main checkout; shared/ where the device tool carried it
    places = (REPO / "shared" / "logs", REPO.parent / "shared" / "logs",
              REPO.parent.parent / "shared" / "logs")  # fmt: skip
    shared = next((p for p in places if p.is_dir()), REPO / "shared" / "logs")
    return [*sorted((REPO / "tests" / "data" / "real").glob("*.csv.gz")),
            REPO / "samples" / "serve-first-2000.csv.gz",
            *(sorted(shared.glob("*.csv.gz")) if shared.is_dir() else [])]  # fmt: skip


class Side:
    """One driver binary (virtual or GPU) over one program."""

    def __init__(self, folder: Path, program: ProgramFiles, slots: int, streams: int) -> None:
        self.driver = folder / "rmm_replay"
        self.work = Path(tempfile.mkdtemp(prefix="rmm-check-"))
        program.link_into(self.work)
        self.counts = [str(slots), str(max(streams, 1))]

    def run(self, spec: ResourceSpec, device_bytes: int, stop: bool = False) -> dict[str, Any]:
        limit = -1 if spec.limit_bytes is None else spec.limit_bytes
        done = subprocess.run(
            [str(self.driver), str(self.work), *self.counts, *driver_arguments(spec)],
            input=f"{device_bytes} {limit} {int(stop)} 0 1\n", capture_output=True, text=True,
            cwd=self.work, check=False,
        )  # fmt: skip
        first = done.stdout.split("\n", 1)[0]
        if not first:
            raise RuntimeError(f"{self.driver}: no answer (exit {done.returncode}): "
                               f"{done.stderr.strip()[-300:]}")  # fmt: skip
        answer: dict[str, Any] = json.loads(first)
        if "error" in answer:
            raise RuntimeError(f"{self.driver} {spec.label}: {answer['error']}")
        return answer

    def close(self) -> None:
        shutil.rmtree(self.work, ignore_errors=True)


def capacity(side: Side, spec: ResourceSpec, device_bytes: int, peak: int) -> int | None:
    """The smallest maximum/limit with no refusal, as hipmem.replay.capacity.search searches it
    (None: none up to 64 x the peak, as fixed, which refuses what is larger than a block)."""
    option = sized_option(spec)

    def replays(size: int) -> bool:
        answer = side.run(_sized(spec, option, size), device_bytes, stop=True)
        return "setup_refused" not in answer and int(answer["failures"]) == 0

    failing = (max(peak, 1) - 1) // MiB * MiB
    try:
        return least_holding_above(replays, failing, max(peak, 1), MiB)
    except NothingHolds:
        return None


def figures(answer: dict[str, Any], ops: int) -> dict[str, Any]:
    if "setup_refused" in answer:
        return {"setup_refused": answer["setup_refused"]}
    return {
        "peak_reserved_bytes": int(answer["peak_reserved_bytes"]),
        "refused": int(answer["failures"]),
        "cudamalloc_calls": int(answer["segment_allocations"]),
        "events_per_s": ops / max(int(answer["wall_ns"]), 1) * 1e9,
    }


def check(logs: list[Path], with_capacity: bool, dry_run: bool) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for path in logs:
        program = build_program(load_log([path]))
        ops = program.op_count
        with ProgramFiles(_arrays(program)) as files:
            for version in RELEASES:
                names = ("virtual",) if dry_run else ("cuda", "virtual")
                sides = {name: Side(CARRIED / version / name, files, program.slot_count,
                                    len(program.streams)) for name in names}  # fmt: skip
                try:
                    for text in RESOURCES:
                        spec = parse_spec(text)
                        row: dict[str, Any] = {"log": path.name, "rmm": version,
                                               "resource": text}  # fmt: skip
                        device_bytes = 80 << 30  # the virtual side's, under --dry-run
                        if not dry_run:
                            gpu = sides["cuda"].run(spec, 0)
                            device_bytes = int(gpu["free_bytes"])
                            row["gpu"] = figures(gpu, ops)
                        row["device_bytes"] = device_bytes
                        row["virtual"] = figures(sides["virtual"].run(spec, device_bytes), ops)
                        if with_capacity:
                            peak = program.peak_requested_bytes
                            for name, side in sides.items():
                                key = "gpu" if name == "cuda" else "virtual"
                                row[key]["capacity_bytes"] = capacity(side, spec, device_bytes,
                                                                      peak)  # fmt: skip
                        rows.append(row)
                        _print_row(row)
                finally:
                    for side in sides.values():
                        side.close()
    return rows


def _arrays(program: Any) -> dict[str, Any]:
    from hipmem.replay.engine.program import program_arrays

    return program_arrays(program)


SAME = ("peak_reserved_bytes", "refused", "cudamalloc_calls", "capacity_bytes", "setup_refused")


def mismatches(row: dict[str, Any]) -> list[str]:
    if "gpu" not in row:
        return []
    return [k for k in SAME if row["gpu"].get(k) != row["virtual"].get(k)]


def _print_row(row: dict[str, Any]) -> None:
    def side(figures_of: dict[str, Any] | None) -> str:
        if figures_of is None:
            return "-"
        if "setup_refused" in figures_of:
            return "not made"
        rate = figures_of["events_per_s"] / 1e6
        text = (f"{figures_of['peak_reserved_bytes']:>15,} {figures_of['refused']:>5} "
                f"{figures_of['cudamalloc_calls']:>6} {rate:6.2f}M")  # fmt: skip
        if "capacity_bytes" in figures_of:
            found = figures_of["capacity_bytes"]
            text += f" cap {'none' if found is None else format(found, ','):>14}"
        return text

    verdict = "ok" if not mismatches(row) else "DIFFERS: " + ", ".join(mismatches(row))
    print(f"{row['log']:<26} {row['rmm']:<8} {row['resource']:<18} virtual "
          f"{side(row['virtual'])} | gpu {side(row.get('gpu'))}  {verdict}",
          flush=True)  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prepare", action="store_true", help="fetch and build (here)")
    parser.add_argument("--capacity", action="store_true", help="also --find-capacity")
    parser.add_argument("--dry-run", action="store_true", help="virtual side only (no GPU)")
    parser.add_argument("--logs", nargs="*", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.prepare:
        prepare()
        return 0
    if not CARRIED.is_dir():
        print(f"no {CARRIED}: run --prepare on a machine with internet, then carry it")
        return 2
    print("columns per side: peak reserved bytes, refused, cudaMalloc calls, events/s")
    start = time.monotonic()
    rows = check(args.logs or default_logs(), args.capacity, args.dry_run)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    bad = [row for row in rows if mismatches(row)]
    print(f"{len(rows)} replays, {len(bad)} differ ({time.monotonic() - start:.0f} s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
