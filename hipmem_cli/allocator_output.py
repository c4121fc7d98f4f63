"""What `recommend --from-snapshot` and `check --from-snapshot` print: PyTorch's allocator
settings, replayed on the virtual GPU. Rendering only; the figures come from
hipmem.replay.settings.recommend and hipmem.replay.settings.check."""

from __future__ import annotations

from hipmem._core.devices import DEVICES

from ..replay.settings.candidate import Candidate
from ..replay.settings.check import AllocatorCheck, SnapshotVerdict
from ..replay.settings.grid import FRACTION_KEY, cap_bytes
from ..replay.settings.recommend import AllocatorRecommendation
from ..replay.virtual.devices import Device
from . import output

NUMBER_COLUMNS = (
    "reserved peak",
    "fragmentation",
    "segment allocations",
    "refused",
    "device memory",
)
COLUMNS_NOTE = (
    "reserved peak: the allocator's reserved_bytes.all.peak (the largest over the snapshots); "
    "fragmentation: reserved over requested at that peak; segment allocations: cudaMalloc/"
    "hipMalloc calls for segments, summed over the snapshots (expandable segments map pages "
    "instead: 0); device memory: the smallest GPU on which every snapshot replays with no "
    "refused allocation, bisected to 2 MiB (cap: the setting caps the process there, and is "
    "recommended only with --allow-cap). None of it counts the memory a real GPU keeps for "
    "the CUDA/HIP context and libraries (several hundred MiB)."
)


def bytes_text(n_bytes: int | None) -> str:
    """`654.0 MiB (685,768,704 bytes)`: the unit to read, the exact figure to copy."""
    if n_bytes is None:
        return "n/a"
    return f"{output.human_bytes(n_bytes)} ({n_bytes:,} bytes)"


def settings_text(settings: str) -> str:
    return settings if settings else "(PyTorch's defaults)"


def device_text(device: Device) -> str:
    """`a virtual MI300X (206,158,430,208 bytes)`, or `a virtual GPU of 80.0 GiB (...)`."""
    if device.name in DEVICES:
        return f"a virtual {device.name} ({device.memory_bytes:,} bytes)"
    return f"a virtual GPU of {bytes_text(device.memory_bytes)}"


def render_recommendation(advice: AllocatorRecommendation) -> None:
    """The grid as a table, the recommendation, and what each figure means."""
    snapshots = ", ".join(advice.snapshots)
    table = output.Table(
        f"PyTorch {advice.torch_version}'s allocator on {device_text(advice.device)}: {snapshots}",
        ["", *NUMBER_COLUMNS, "settings"],
        right=NUMBER_COLUMNS,
    )
    for candidate in advice.candidates:
        table.add_row(*_row(candidate, candidate is advice.recommended))
    output.print_table(table)
    _render_choice(advice)
    if advice.capacity == "recommended":
        output.note("device memory: searched for the recommended setting and the defaults only "
                    "(--capacity all searches for every setting)")  # fmt: skip
    for candidate in advice.candidates:
        if candidate.error:
            output.note(f"{settings_text(candidate.settings)}: {candidate.error}")
    _render_inferred(advice)
    for note in advice.notes:
        output.note(note)
    output.note(COLUMNS_NOTE)
    output.note(f"the allocator is {advice.allocator_source}")


def _row(candidate: Candidate, recommended: bool) -> list[output.Cell]:
    mark: output.Cell = output.Styled("*", "bold green") if recommended else ""
    settings: output.Cell = settings_text(candidate.settings)
    if recommended:
        settings = output.Styled(str(settings), "bold")
    if candidate.error:
        refused: output.Cell = output.Styled("setting refused", "red")
        return [mark, "", "", "", refused, "", settings]
    peak = candidate.peak_reserved_bytes
    refused = f"{candidate.refused_count:,}"
    if candidate.refused_count:
        refused = output.Styled(refused, "red")
    fragmentation = candidate.fragmentation
    return [
        mark,
        output.human_bytes(peak) if peak is not None else "",
        "" if fragmentation is None else f"{fragmentation:.3f}",
        f"{candidate.segment_allocations:,}",
        refused,
        _device_cell(candidate),
        settings,
    ]


def _device_cell(candidate: Candidate) -> str:
    """The smallest device, or for a setting that caps the process, its cap."""
    if candidate.entry.cap_bytes is not None:
        return f"cap {output.human_bytes(candidate.entry.cap_bytes)}"
    return "" if candidate.capacity_bytes is None else output.human_bytes(candidate.capacity_bytes)


def _render_choice(advice: AllocatorRecommendation) -> None:
    chosen = advice.recommended
    if chosen is None or chosen.driving is None:
        return
    driving = chosen.driving
    several = f" on {driving.snapshot}, which drives it" if len(advice.snapshots) > 1 else ""
    output.line(
        f"Recommended: {settings_text(chosen.settings)}: reserved peak "
        f"{bytes_text(chosen.peak_reserved_bytes)}{several}, "
        f"{chosen.fragmentation or 0:.3f} x the requested peak "
        f"({driving.peak_requested_bytes:,} bytes)."
    )
    if chosen.capacity_bytes is not None:
        where = f" ({chosen.capacity_snapshot})" if len(advice.snapshots) > 1 else ""
        output.line(f"Device memory it needs: {bytes_text(chosen.capacity_bytes)}{where}; "
                    f"on the {advice.device.name}, {bytes_text(advice.headroom_bytes)} "
                    "free at its reserved peak.")  # fmt: skip
    elif advice.headroom_bytes is not None and advice.cap_bytes is not None:
        output.line(f"Under the inferred cap's low end ({advice.cap_bytes:,} bytes), "
                    f"{bytes_text(advice.headroom_bytes)} free at its reserved peak.")  # fmt: skip
    elif advice.headroom_bytes is not None:
        output.line(f"On the {advice.device.name}, {bytes_text(advice.headroom_bytes)} free at "
                    "its reserved peak.")  # fmt: skip
    fraction = dict(_pairs(chosen.settings)).get(FRACTION_KEY)
    if fraction is not None:
        cap = cap_bytes(fraction, advice.device.memory_bytes)
        output.line(
            f"Its {FRACTION_KEY} is a share of the GPU's memory: {fraction} of the "
            f"{advice.device.name} caps the process at {bytes_text(cap)}, where garbage "
            "collection acts, and a run that needs more is refused; on another GPU the share "
            "is another cap. Recommend again for another GPU."
        )
    default = advice.default
    if chosen is not default and default.peak_reserved_bytes is not None:
        output.line(f"PyTorch's defaults: reserved peak {bytes_text(default.peak_reserved_bytes)}"
                    + (f", device memory {bytes_text(default.capacity_bytes)}"
                       if default.capacity_bytes is not None else "") + ".")  # fmt: skip


def _render_inferred(advice: AllocatorRecommendation) -> None:
    """How the grid was judged under conditions inferred from a recorded error."""
    found = advice.inferred
    if found is None:
        return
    twice = " twice over (the recording ended at its error)" if found.passes == 2 else ""
    if found.kind == "cap":
        ends = " and ".join(f"{end:,}" for end in found.ends)
        output.note(f"each setting replayed{twice} under the inferred cap at both its ends "
                    f"({ends} bytes); no device memory is searched under a cap")  # fmt: skip
    elif twice:
        output.note(f"each setting replayed{twice}")
    uncertain = [settings_text(c.settings) for c in advice.candidates if c.uncertain]
    if uncertain:
        output.note(f"uncertain, never recommended (served every request at one end of the "
                    f"cap only): {', '.join(uncertain)}")  # fmt: skip


def _pairs(settings: str) -> list[tuple[str, str]]:
    from hipmem._core.alloc_conf import settings_pairs

    return settings_pairs(settings)


def render_no_fit(advice: AllocatorRecommendation) -> str:
    """The error line when no setting of the grid replays every snapshot."""
    default = advice.default
    refused = next((run.first_refused for run in default.runs if run.first_refused), None)
    where = f", the defaults first at {refused}" if refused is not None else ""
    found = advice.inferred
    if found is not None and found.kind == "cap":
        return (
            f"no setting of the grid replays every snapshot under the cap inferred from its "
            f"recorded out-of-memory error, at both its ends ({found.lo_bytes:,} and "
            f"{found.hi_bytes - 1:,} bytes), without a refused allocation{where}: the job "
            "needs a larger cap or less memory (hipmem explain says whose memory it was)"
        )
    return (
        f"no setting of the grid replays every snapshot on {device_text(advice.device)} "
        f"without a refused allocation{where}; try a larger --device or --device-memory"
    )


def render_check(check: AllocatorCheck) -> None:
    """`ok ...` on stdout, or `FAIL ...` naming the first refused allocation, then notes; the
    setting string named by where it came from (`--alloc-conf`, `$PYTORCH_CUDA_ALLOC_CONF`)."""
    source = check.source
    shown = f"{source} '{check.settings}'" if check.settings else f"{source}: PyTorch's defaults"
    on = device_text(check.device)
    found = check.inferred
    if found is not None and found.kind == "cap":
        ends = " and ".join(f"{end:,}" for end in found.ends)
        on += f" under the inferred cap at both its ends ({ends} bytes)"
    failed = check.first_failure
    if failed is None:
        peak = max(check.verdicts, key=lambda v: v.peak_reserved_bytes or 0)
        have = check.device.memory_bytes if found is None or found.cap_bytes is None else (
            found.cap_bytes)  # fmt: skip
        free = have - (peak.peak_reserved_bytes or 0)
        output.ok(f"{shown} fits on {on}: reserved peak {bytes_text(peak.peak_reserved_bytes)} "
                  f"({peak.snapshot}), {output.human_bytes(free)} free")  # fmt: skip
    else:
        output.fail(f"{shown} does not fit on {on}: {_refusal(failed)}")
    output.note(f"the allocator is {check.allocator_source}", err=failed is not None)


def _refusal(verdict: SnapshotVerdict) -> str:
    refused = verdict.first_refused
    assert refused is not None
    text = (
        f"the first refused allocation is {refused.where} "
        f"({output.human_bytes(refused.size_bytes)} asked with "
        f"{output.human_bytes(refused.live_bytes)} live)"
    )
    if verdict.frame is not None:
        text += f", allocated at {verdict.frame}"
    return text
