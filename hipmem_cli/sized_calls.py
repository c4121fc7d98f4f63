"""What `size`, `recommend` and `check` share around the sizing library's one request
(sizing/request.py): how it speaks on the command line (`say`), every call that could not be
sized said (and a gate's command ended), and the log lines an answer did without
(--accept-skipped) said."""

from __future__ import annotations

from pathlib import Path

import typer

from ..sizing.calls.sources import CallSources, accepted_skipped_lines
from ..sizing.errors import SizingUsageError
from ..sizing.say import Say
from ..sizing.session import SessionResult
from . import output


def say() -> Say:
    """How the sizing library speaks on the command line: lines and bars on stderr."""
    return Say(
        info=output.info,
        warning=output.warning,
        note=lambda text: output.note(text, err=True),
        progress=lambda title: output.progress(title),
        transfer=lambda title: output.progress(title, transfer=True),
    )


def end_if_failed(result: SessionResult) -> None:
    """Every call that could not be sized, said; one ends a gate's command (exit 1)."""
    output.summarised_errors([str(failed.error) for failed in result.failed])
    if result.failed:
        raise typer.Exit(1)


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
        raise SizingUsageError(
            "--accept-skipped is about lines and entries of files that cannot be read: give "
            "--from-log or --from-snapshot, or drop it"
        )
