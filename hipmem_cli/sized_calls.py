"""The calls of `recommend` and `check`, sized: the call sources gathered, sized in one
session with a progress bar, every call that could not be sized said (and the command
ended), and the log lines an answer did without (--accept-skipped) said."""

from __future__ import annotations

from pathlib import Path

import typer

from ..sizing.errors import UsageError
from ..sizing.rocm.catalog import load_catalog
from ..sizing.rocm.locator import Libraries
from ..sizing.session import SessionResult, size_calls
from ..sizing.worker.virtual_device import Device
from . import output
from .call_sources import CallSources, accepted_skipped_lines, gather_calls
from .rocm_choice import several_cached_warning


def size_sources(
    sources: CallSources,
    device: Device,
    libraries: Libraries,
    *,
    minimum: bool = False,
) -> SessionResult:
    """Size the calls; a call that cannot be sized ends the command (exit 1)."""
    several = several_cached_warning(libraries)
    if several:
        output.warning(several)
    parsed = gather_calls(sources, load_catalog(libraries.rocm))
    with output.progress("sizing") as report:
        result = size_calls(
            parsed,
            device,
            progress=report,
            libraries=libraries,
            minimum=minimum,
        )
    output.summarised_errors([str(failed.error) for failed in result.failed])
    if result.failed:
        raise typer.Exit(1)
    return result


def say_accepted(sources: CallSources) -> dict[str, object]:
    """The call-log lines an answer did without (--accept-skipped): said on stderr, and the
    JSON's `skipped_lines` (empty when none were)."""
    skipped = accepted_skipped_lines(sources)
    if skipped.count:
        output.skipped(skipped.describe(), "accepted: --accept-skipped")
    return {"skipped_lines": skipped.as_dict()} if sources.from_logs else {}


def refuse_idle_accept(accept: bool, *files: list[Path] | None) -> None:
    """--accept-skipped with no file read leniently would change nothing: say so."""
    if accept and not any(files):
        raise UsageError("--accept-skipped is about lines and entries of files that cannot be "
                         "read: give --from-log or --from-snapshot, or drop it")  # fmt: skip
