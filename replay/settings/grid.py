"""The grid of PyTorch allocator settings that `recommend --from-snapshot` replays: the data, and
the rules that derive its values from the snapshots. Documented in docs/allocator-settings.md.

Every entry is a whole setting string, the value PYTORCH_HIP_ALLOC_CONF / PYTORCH_CUDA_ALLOC_CONF
would hold, so that what is replayed is exactly what is recommended. Two rounds:

1. Settings that need nothing but the snapshots (`first_round`):
   - PyTorch's defaults (""), and `expandable_segments:True`;
   - `max_split_size_mb` at the SPLIT_QUANTILES of the requests larger than LARGE_SEGMENT_BYTES
     (20 MiB: PyTorch's large-pool segment, below which every request shares segments of that
     size and the setting changes nothing), rounded up to whole MiB, never below
     MIN_MAX_SPLIT_MIB, each value once; none when no request is that large;
   - `roundup_power2_divisions` at each of ROUNDUP_DIVISIONS, and the per-range form
     ROUNDUP_PER_RANGE;
   - expandable segments with each of EXPANDABLE_ROUNDUPS.
2. `garbage_collection_threshold`, which acts only under a per-process memory fraction
   (PyTorch garbage-collects when its reserved bytes pass threshold x the fraction's cap), so
   each such entry carries its fraction (`second_round`): GC_THRESHOLDS on the defaults, and
   GC_COMBINED_THRESHOLD with expandable segments and with each max_split_size value. The
   cap is the largest reserved peak the same setting without the threshold reached in round 1,
   over all the snapshots: the fraction never asks the job to fit in less than that setting
   took by itself, so what changes is the threshold's doing. The fraction is that cap over the
   device's memory rounded up to 6 significant digits, written into the setting as
   `per_process_memory_fraction` (PyTorch 2.11 reads it; versions without it, such as 2.9,
   have no way to say a fraction in a setting string, and the round is left out for them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from pathlib import Path

import numpy as np

from hipmem._core.alloc_conf import LEAST_SPLIT_MIB, settings_pairs
from hipmem._core.byte_sizes import MiB

from ..pytorch.allocator import TorchAllocator

LARGE_SEGMENT_BYTES = 20 * MiB  # kLargeBuffer in c10/cuda/CUDACachingAllocator.cpp
MIN_MAX_SPLIT_MIB = LEAST_SPLIT_MIB  # PyTorch refuses less (hipmem/_core/alloc_conf.py)
SPLIT_QUANTILES = (0.25, 0.5, 0.75)
ROUNDUP_DIVISIONS = (1, 4, 8, 16)
# The per-range example of PyTorch's documentation ("Optimizing memory usage with
# PYTORCH_CUDA_ALLOC_CONF", docs/source/notes/cuda.rst): one division below 256 MB, two up
# to 512 MB, four up to 1 GB, eight above.
ROUNDUP_PER_RANGE = "[256:1,512:2,1024:4,>:8]"
EXPANDABLE_ROUNDUPS = (4, 8, 16)
GC_THRESHOLDS = (0.6, 0.8)
GC_COMBINED_THRESHOLD = 0.8
FRACTION_DIGITS = 6  # significant digits of per_process_memory_fraction
FRACTION_KEY = "per_process_memory_fraction"
EXPANDABLE = "expandable_segments:True"


@dataclass(frozen=True)
class GridEntry:
    """One setting string of the grid and why it is there."""

    settings: str  # PyTorch's setting string; "" is its defaults
    rule: str  # how the entry came about, in words (the table's and --json's)
    base: str | None = None  # round 2: the round-1 setting whose peak set the cap
    cap_bytes: int | None = None  # round 2: the per-process cap, in bytes, on the device

    @property
    def simplicity(self) -> tuple[int, int]:
        """Fewer settings, then a shorter string: the tie-break's "simpler"."""
        return (len(settings_pairs(self.settings)), len(self.settings))


def join(*pairs: str) -> str:
    return ",".join(pair for pair in pairs if pair)


def large_request_sizes(sizes: list[np.ndarray]) -> np.ndarray:
    """The allocation sizes, over every snapshot, above LARGE_SEGMENT_BYTES."""
    every = np.concatenate([np.asarray(s, dtype=np.int64) for s in sizes] or
                           [np.zeros(0, dtype=np.int64)])  # fmt: skip
    return every[every > LARGE_SEGMENT_BYTES]


def split_sizes_mib(large_sizes: np.ndarray) -> dict[int, list[float]]:
    """max_split_size_mb values (whole MiB, rounded up, at least MIN_MAX_SPLIT_MIB), each with
    the quantiles of the large requests it stands for."""
    found: dict[int, list[float]] = {}
    if len(large_sizes) == 0:
        return found
    for size, share in zip(np.quantile(large_sizes, SPLIT_QUANTILES, method="higher"),
                           SPLIT_QUANTILES, strict=True):  # fmt: skip
        found.setdefault(max(MIN_MAX_SPLIT_MIB, math.ceil(int(size) / MiB)), []).append(share)
    return dict(sorted(found.items()))


GC_UNDER_CAP = (0.6, 0.8)  # garbage_collection_threshold values tried under a given cap


def within_cap() -> list[GridEntry]:
    """Garbage collection under a cap already in force (a user's, or one inferred from a
    recorded out-of-memory error): the threshold acts on whatever fraction is set, so these
    rows add none (the second round's rows add their own)."""
    entries = []
    for threshold in GC_UNDER_CAP:
        gc = f"garbage_collection_threshold:{threshold}"
        for base in ("", EXPANDABLE):
            entries.append(
                GridEntry(join(base, gc), f"garbage collection at {threshold:.0%} of the cap")
            )
    return entries


def first_round(large_sizes: np.ndarray) -> list[GridEntry]:
    """The settings that need nothing but the snapshots' sizes."""
    entries = [
        GridEntry("", "PyTorch's defaults"),
        GridEntry(EXPANDABLE, "expandable segments"),
    ]
    for mib, shares in split_sizes_mib(large_sizes).items():
        quantiles = "/".join(f"{share:.0%}" for share in shares)
        rule = f"split limit: {quantiles} quantile of requests > 20 MiB"
        entries.append(GridEntry(f"max_split_size_mb:{mib}", rule))
    for divisions in ROUNDUP_DIVISIONS:
        entries.append(GridEntry(f"roundup_power2_divisions:{divisions}",
                                 f"round up: {divisions} steps per power of 2"))  # fmt: skip
    entries.append(GridEntry(f"roundup_power2_divisions:{ROUNDUP_PER_RANGE}",
                             "round up: steps per size range (PyTorch's example)"))  # fmt: skip
    for divisions in EXPANDABLE_ROUNDUPS:
        entries.append(GridEntry(join(EXPANDABLE, f"roundup_power2_divisions:{divisions}"),
                                 f"expandable, round up: {divisions} steps"))  # fmt: skip
    return entries


def second_round(
    peaks: dict[str, int | None], device_bytes: int, first: list[GridEntry]
) -> list[GridEntry]:
    """The garbage-collection entries, each under the cap its base setting's peak sets
    (`peaks`: round 1's largest reserved peak per setting, None where it refused or failed)."""
    bases: list[tuple[str, float]] = [("", t) for t in GC_THRESHOLDS]
    bases.append((EXPANDABLE, GC_COMBINED_THRESHOLD))
    bases += [(e.settings, GC_COMBINED_THRESHOLD) for e in first
              if e.settings.startswith("max_split_size_mb:")]  # fmt: skip
    entries = []
    for base, threshold in bases:
        peak = peaks.get(base)
        if peak is None or peak >= device_bytes:  # refused, or the cap would be the device
            continue
        fraction = fraction_text(peak, device_bytes)
        settings = join(base, f"garbage_collection_threshold:{threshold}",
                        f"{FRACTION_KEY}:{fraction}")  # fmt: skip
        cap = cap_bytes(fraction, device_bytes)
        rule = f"collect at {threshold} of a cap at the peak of {base or 'the defaults'}"
        entries.append(GridEntry(settings, rule, base=base, cap_bytes=cap))
    return entries


def fraction_text(cap_bytes: int, device_bytes: int) -> str:
    """cap / device, rounded up to FRACTION_DIGITS significant digits, in plain decimals."""
    share = Decimal(cap_bytes) / Decimal(device_bytes)
    step = Decimal(1).scaleb(share.adjusted() - FRACTION_DIGITS + 1)
    return format(share.quantize(step, rounding=ROUND_CEILING).normalize(), "f")


def cap_bytes(fraction: str, device_bytes: int) -> int:
    """The bytes PyTorch allows under `fraction` of a device (it multiplies in doubles)."""
    return int(float(fraction) * device_bytes)


def takes_memory_fraction(allocator: TorchAllocator) -> bool:
    """Whether this PyTorch reads per_process_memory_fraction from its settings (2.11 does;
    2.9 refuses the key): its CUDA allocator config header lists the keys it accepts."""
    for folder in allocator.include_dirs:
        header = Path(folder) / "c10" / "cuda" / "CUDAAllocatorConfig.h"
        try:
            return f'"{FRACTION_KEY}"' in header.read_text(errors="replace")
        except OSError:
            continue
    return False
