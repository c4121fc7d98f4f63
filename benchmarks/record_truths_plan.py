"""What `gpu_record_truths.py` runs: the scripts of tests/data/record/scripts/ under each
setting, and the two searches whose next run depends on the last one's figures (the GPT's
batch sizes around the largest that fits, and the per-process cap at which PyTorch's defaults
run out of memory).

A search is a generator: it yields a Run, is sent that run's Result, and yields the next.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCRIPTS_DIR = Path(__file__).resolve().parents[1] / "tests" / "data" / "record" / "scripts"
# script -> modules it needs beyond torch
SCRIPTS: dict[str, tuple[str, ...]] = {
    "gpt_train.py": (),
    "resnet_amp.py": ("torchvision",),
    "llama_ckpt.py": ("transformers",),
    "kv_generate.py": (),
    "encoder_varlen.py": (),
    "oom_device.py": (),
    "oom_cap.py": (),
}
USUAL = ("gpt_train.py", "resnet_amp.py", "llama_ckpt.py", "kv_generate.py", "encoder_varlen.py")
EXPANDABLE = "expandable_segments:True"
GiB = 1 << 30

# The GPT's batch sizes when its two calibration runs give no figures (a dry run, a failure):
# from the memory arithmetic of GPT-2 small at 1024 tokens under bf16 autocast, ~1.15 GB per
# sequence at the start of the backward pass (activations ~28 KB per token and layer, the
# logits' bf16, fp32 and log-softmax copies and the first gradient ~0.8 MB per token) over
# ~2 GB of weights, gradients and AdamW state: about 70 sequences fit on an 80 GB H100.
FALLBACK_BATCHES = tuple(range(36, 116, 8))
CALIBRATION_BATCHES = (16, 32)
SWEEP_SIZES = 10
# Memory beside the allocator's while the GPT runs (cuBLAS's handle workspaces, kernels
# loaded on first use): kept out of the free memory when predicting what fits.
OUTSIDE_ALLOCATOR_BYTES = 1 * GiB
# oom_cap.py's cap when its uncapped runs give no figures: ~8.5 GB of an H100, under the
# ~20 GB its longest step needs (batch 16 x up to 1024 tokens, ~1.15 GB per 1024 tokens).
FALLBACK_CAP_FRACTION = "0.1"
# Settings also run at the chosen cap, so that every verdict of `hipmem explain` on the
# capped snapshot has a real run to agree with.
CAP_SETTINGS = (EXPANDABLE, "garbage_collection_threshold:0.6",
                "garbage_collection_threshold:0.8", "roundup_power2_divisions:4")  # fmt: skip


@dataclass(frozen=True)
class Run:
    """One script run in a fresh process: `name` is unique and names its files."""

    name: str
    script: str
    setting: str  # what the summary shows: "defaults #1", "BATCH=40", "cap 0.1 expandable"
    alloc_conf: str = ""
    env: dict[str, str] = field(default_factory=dict)

    @property
    def needs(self) -> tuple[str, ...]:
        return SCRIPTS[self.script]


@dataclass
class Result:
    run: Run
    status: str  # ok, oom, failed, skipped, not run
    lane: int | None = None
    wall_s: float | None = None
    stats: dict[str, Any] = field(default_factory=dict)
    note: str = ""

    def figure(self, key: str) -> int | None:
        value = self.stats.get(key)
        return value if isinstance(value, int) else None


Search = Generator[Run, Result, None]


def setting_name(alloc_conf: str) -> str:
    return {"": "defaults", EXPANDABLE: "expandable"}.get(alloc_conf, alloc_conf)


def usual_runs() -> list[Run]:
    """Each usual script with the defaults twice (is it deterministic?) and expandable
    segments once; then the device-memory OOM under both. The slower scripts go first."""
    runs = []
    for script in ("kv_generate.py", "llama_ckpt.py", "resnet_amp.py", "gpt_train.py",
                   "encoder_varlen.py"):  # fmt: skip
        stem = script.removesuffix(".py")
        runs.append(Run(f"{stem}-defaults-1", script, "defaults #1"))
        runs.append(Run(f"{stem}-expandable", script, "expandable", EXPANDABLE))
    for script in USUAL:
        stem = script.removesuffix(".py")
        runs.append(Run(f"{stem}-defaults-2", script, "defaults #2"))
    runs.append(Run("oom_device-defaults", "oom_device.py", "defaults"))
    runs.append(Run("oom_device-expandable", "oom_device.py", "expandable", EXPANDABLE))
    return runs


def batch_search() -> Search:
    """gpt_train.py at two batch sizes, then ten sizes around the largest predicted to fit,
    smallest first, stopping one run after the first that runs out of memory."""
    calibration = []
    for batch in CALIBRATION_BATCHES:
        calibration.append((yield _batch_run(batch, "calibration")))
    sizes = sweep_sizes(calibration) or list(FALLBACK_BATCHES)
    past_oom = False
    for batch in sizes:
        result = yield _batch_run(batch, "sweep")
        if past_oom:
            return
        past_oom = result.status == "oom"


def _batch_run(batch: int, role: str) -> Run:
    return Run(f"gpt_train-b{batch}", "gpt_train.py", f"BATCH={batch} ({role})",
               env={"BATCH": str(batch)})  # fmt: skip


def sweep_sizes(calibration: list[Result]) -> list[int] | None:
    """Ten batch sizes whose fifth is the middle of two predictions of the largest that fits:
    the reserved peak growing as between the calibration runs (the allocator's rounding and
    cache included), and the allocated peak alone (a pressed allocator frees its cache and
    retries). The step spans that range in about four sizes. None without the figures."""
    (low, high) = calibration
    batches = [int(r.run.env["BATCH"]) for r in (low, high)]
    free = low.figure("device_free_bytes_at_start")
    predictions = []
    for key in ("reserved_bytes_peak", "allocated_bytes_peak"):
        peaks = [r.figure(key) for r in (low, high)]
        if free is None or peaks[0] is None or peaks[1] is None or peaks[1] <= peaks[0]:
            return None
        per_batch = (peaks[1] - peaks[0]) / (batches[1] - batches[0])
        fixed = peaks[0] - per_batch * batches[0]
        predictions.append(int((free - OUTSIDE_ALLOCATOR_BYTES - fixed) // per_batch))
    fits_reserved, fits_allocated = predictions
    middle = (fits_reserved + fits_allocated) // 2
    step = max(2, math.ceil(abs(fits_allocated - fits_reserved) / 4), round(middle * 0.03))
    first = max(batches[1] + step, middle - 4 * step)
    return [first + index * step for index in range(SWEEP_SIZES)]


def cap_search() -> Search:
    """oom_cap.py uncapped under the defaults and expandable segments, then capped at the
    expandable run's reserved peak (where expandable segments surely fit); if the defaults fit
    there too, lower, halfway to the allocated peak, then just under it (nothing fits). At the
    first cap where the defaults run out of memory, the other settings of CAP_SETTINGS."""
    defaults = yield _cap_run("1", "")
    expandable = yield _cap_run("1", EXPANDABLE)
    total = defaults.figure("device_total_bytes")
    allocated = defaults.figure("allocated_bytes_peak")
    expandable_peak = expandable.figure("reserved_bytes_peak")
    if total is None or allocated is None or expandable_peak is None:
        chosen = FALLBACK_CAP_FRACTION
        yield _cap_run(chosen, "")
    else:
        caps = (expandable_peak, (allocated + expandable_peak) // 2, allocated * 97 // 100)
        for cap in caps:
            chosen = f"{math.ceil(cap / total * 1e6) / 1e6:.6f}"
            if (yield _cap_run(chosen, "")).status != "ok":
                break
    for alloc_conf in CAP_SETTINGS:
        yield _cap_run(chosen, alloc_conf)


def _cap_run(fraction: str, alloc_conf: str) -> Run:
    setting = setting_name(alloc_conf)
    label = "uncapped" if fraction == "1" else f"cap {fraction}"
    slug = setting.replace(":", "-").replace(",", "+").replace("_", "-")
    return Run(f"oom_cap-{label.replace(' ', '')}-{slug}", "oom_cap.py", f"{label} {setting}",
               alloc_conf, {"CAP_FRACTION": fraction})  # fmt: skip
