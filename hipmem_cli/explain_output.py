"""What `hipmem explain` (and `check --explain`) prints. Rendering only; the figures come from
hipmem.replay.explain.explanation."""

from __future__ import annotations

from ..replay.explain.explanation import Explanation
from ..replay.settings.candidate import Candidate
from . import output
from .allocator_output import bytes_text, device_text, settings_text

SETTING_COLUMNS = ("reserved peak", "segment allocations", "refused")


def render_explanation(found: Explanation) -> None:
    """The refusal, the allocator's state, whose memory it was, and what avoids it."""
    cap = "" if found.cap_bytes is None else f", capped at {found.cap_bytes:,} bytes"
    output.heading(
        f"{found.snapshot} on {device_text(found.device)}{cap}, PyTorch {found.torch_version}, "
        f"settings: {settings_text(found.settings)}"
    )
    if found.refused is None:
        served = f" (the {found.recorded_ooms:,} recorded out-of-memory requests included)"
        output.ok(
            f"every request was served{served if found.recorded_ooms else ''}: nothing "
            "to explain under these conditions"
        )
        if found.recorded_oom_not_reproduced:
            output.warning(_not_reproduced(found))
        return
    refused, state = found.refused, found.state
    recorded = (
        "; it ran out of memory when recorded too (recorded-failed)"
        if refused.recorded_failed
        else "; it was served when recorded"
    )
    output.line(
        f"Refused: {refused.where} asked for {bytes_text(refused.size_bytes)}{recorded}.",
        style="bold red",
    )
    output.line(f"Why: {found.reason}.")
    if state is not None:
        table = output.Table(
            "PyTorch's allocator at the refusal (its snapshot())",
            ["", "bytes"],
            right=("bytes",),
            header=False,
        )
        large, small = state.largest_free_bytes(large=True), state.largest_free_bytes(large=False)
        for label, cell in (
            ("reserved", bytes_text(state.reserved_bytes)),
            ("allocated", bytes_text(state.allocated_bytes)),
            ("reserved but unallocated", bytes_text(state.unallocated_bytes)),
            (
                "segments (large / small pool)",
                f"{state.segment_count(large=True):,} / {state.segment_count(large=False):,}",
            ),
            ("largest free block, large pool", bytes_text(large)),
            ("largest free block, small pool", bytes_text(small)),
            (
                "inactive split blocks",
                f"{state.inactive_split_blocks:,} ({bytes_text(state.inactive_split_bytes)})",
            ),
        ):
            table.add_row(label, cell)
        output.print_table(table)
    if found.live is not None:
        live = found.live
        table = output.Table(
            f"Live at the refusal: {live.count:,} allocations, {bytes_text(live.live_bytes)}",
            ["bytes", "allocations", "made at"],
            right=("bytes", "allocations"),
        )
        for group in live.groups:
            table.add_row(bytes_text(group.live_bytes), f"{group.count:,}", group.where)
        output.print_table(table)
    _render_avoiding(found)


def render_inferred(found: Explanation) -> None:
    """The conditions inferred from the recording (or why none were), one line on stderr, and
    a release that its fields exclude."""
    for note in found.release_notes:
        output.warning(note)
    if found.conditions is not None:
        output.info(found.conditions.sentence())
    elif found.inferred is not None:
        output.warning(found.inferred.sentence())


def _render_avoiding(found: Explanation) -> None:
    avoiding = found.avoiding
    where = f"the same {found.limit_name} ({found.have_bytes:,} bytes)"
    ends = found.conditions.ends if found.conditions is not None else ()
    if found.cap_bytes is not None and len(ends) == 2:
        where = f"the inferred cap at both its ends ({ends[0]:,} and {ends[1]:,} bytes)"
    tried = len(found.candidates)
    if not avoiding:
        output.line(
            f"Nothing in the grid avoids it: none of its {tried} settings serves every "
            f"request under {where}.",
            style="bold",
        )
    else:
        table = output.Table(
            f"What avoids it: settings that served every request, the whole trace replayed"
            f"{_twice(found)} under {where}, best first",
            ["", *SETTING_COLUMNS, "settings"],
            right=SETTING_COLUMNS,
        )
        for candidate in avoiding:
            table.add_row(*_row(candidate, candidate is found.recommended))
        output.print_table(table)
        for candidate in avoiding:
            why = found.why_not_recommended(candidate)
            if why:
                output.note(f"{settings_text(candidate.settings)}: not recommended: {why}")
        output.note(
            f"{tried - len(avoiding)} of the {tried} settings of the grid were refused "
            "a request too (--json lists them)"
        )
    _render_uncertain(found)
    _render_needed(found)
    advice = found.variables
    if advice is not None and advice.line is not None:
        for warning in advice.warnings:
            output.warning(warning)
        output.line(advice.line)
        for note in advice.notes:
            output.note(note)


def _twice(found: Explanation) -> str:
    if found.conditions is None or found.conditions.passes == 1:
        return ""
    return " twice over (the recording ended at its out-of-memory error: the job went on)"


def _render_uncertain(found: Explanation) -> None:
    uncertain = found.uncertain
    if uncertain:
        names = ", ".join(settings_text(c.settings) for c in uncertain)
        output.line(
            f"Uncertain, not a fix: {names}: served every request at one end of the inferred "
            "cap only (give --cap to decide)."
        )


def _render_needed(found: Explanation) -> None:
    current = f"'{found.settings}'" if found.settings else "PyTorch's defaults"
    if found.needed_bytes is None:
        output.note(
            f"{current}: no {found.limit_name} up to 64 times the reserved peak serves "
            "every request"
        )
        return
    missing = found.missing_bytes or 0
    more = f": {missing:,} bytes more" if missing > 0 else ""
    output.line(
        f"With {current}, every request is served with a {found.limit_name} of "
        f"{found.needed_bytes:,} bytes{more} (bisected to 2 MiB; a real GPU also keeps memory "
        "for its context)."
    )


def _row(candidate: Candidate, recommended: bool) -> list[output.Cell]:
    mark: output.Cell = output.Styled("*", "bold green") if recommended else ""
    return [
        mark,
        bytes_text(candidate.peak_reserved_bytes),
        f"{candidate.segment_allocations:,}",
        f"{candidate.refused_count:,}",
        settings_text(candidate.settings),
    ]


def _not_reproduced(found: Explanation) -> str:
    """Why a recorded out-of-memory error may not come back in the replay."""
    why = (
        f"{found.pre_recording_allocations:,} allocation(s) were made before the trace's "
        "first entry (recording started mid-run, or max_entries dropped the oldest "
        "entries), so the allocator's state then is not known"
        if found.pre_recording_allocations
        else "check that the device memory and cap are the recorded ones"
    )
    return (
        f"the recording ran out of memory {found.recorded_ooms:,} time(s) and this replay "
        f"refused nothing: it does not reproduce the recording; {why}"
    )
