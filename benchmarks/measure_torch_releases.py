"""What changes between PyTorch releases: every committed snapshot replayed under the first
round of the settings grid (replay/settings/grid.py) with each fetched release's allocator on
the virtual GPU (the default device). Figures, not speed: docs/pytorch-virtual-gpu.md
("Releases") carries its table.

    python benchmarks/measure_torch_releases.py [--torch 2.4,2.11,2.14] [--json OUT]

Releases: the fetched ones by default (`hipmem torch fetch --torch X.Y` first). Prints, per
snapshot and setting, the reserved peak under each release, and a line for every setting
whose peak differs between releases.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hipmem.replay.engine.program import OP_ALLOCATE, build_program, program_arrays
from hipmem.replay.logs.loader import load_log
from hipmem.replay.pytorch import allocator as torch_allocator
from hipmem.replay.pytorch import fetch as torch_fetch
from hipmem.replay.settings import grid as allocator_grid
from hipmem.replay.virtual.devices import DEFAULT_DEVICE, find_device
from hipmem.replay.virtual.gpu import VirtualGpu

SNAPSHOTS = Path(__file__).resolve().parents[1] / "tests" / "data" / "snapshots"


def measure(
    releases: list[str], refusals: dict[tuple[str, str, str], int]
) -> dict[str, dict[str, dict[str, int]]]:
    """snapshot -> setting -> release -> reserved peak; `refusals` gets each replay's refused
    allocations."""
    device = find_device(DEFAULT_DEVICE)
    allocators = {r: torch_allocator.locate(r) for r in releases}
    figures: dict[str, dict[str, dict[str, int]]] = {}
    for path in sorted(SNAPSHOTS.glob("*.pickle.gz")):
        log = load_log([str(path)])
        program = build_program(log)
        sizes = [program.size_bytes[program.op == OP_ALLOCATE]]
        grid = allocator_grid.first_round(allocator_grid.large_request_sizes(sizes))
        name = path.name.removesuffix(".pickle.gz")
        figures[name] = {}
        for entry in grid:
            row = figures[name].setdefault(entry.settings or "(defaults)", {})
            for release, allocator in allocators.items():
                with VirtualGpu(program_arrays(program), program.slot_count,
                                len(program.streams), entry.settings, device,
                                allocator) as gpu:  # fmt: skip
                    run = gpu.replay()
                # The trace's recorded out-of-memory requests are refused again
                # (replay/engine/program.py):
                # the peak is the allocator's either way; the refusals are kept beside it.
                row[release] = run.peak_reserved_bytes
                refusals[(name, entry.settings, release)] = run.failure_count
            cells = " ".join(str(row[r]) for r in releases)
            print(f"{name:28} {entry.settings or '(defaults)':48} {cells}", file=sys.stderr)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch", help="releases, comma-separated (default: every fetched)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    names = args.torch.split(",") if args.torch else torch_fetch.fetched_versions()[::-1]
    releases = [torch_allocator.locate(n).version.split("+")[0] for n in names]
    refusals: dict[tuple[str, str, str], int] = {}
    figures = measure(releases, refusals)
    if args.json:
        refused = [[*key, count] for key, count in refusals.items() if count]
        args.json.write_text(json.dumps({"releases": releases, "figures": figures,
                                         "refused": refused}, indent=1))  # fmt: skip
    for snapshot, settings in figures.items():
        for setting, peaks in settings.items():
            if len(set(peaks.values())) > 1:
                cells = ", ".join(f"{r}: {p:,}" for r, p in peaks.items())
                print(f"{snapshot} | {setting} | {cells}")


if __name__ == "__main__":
    main()
