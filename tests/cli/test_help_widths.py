"""Every command's and subcommand's --help at 60, 80 and 120 columns, piped with COLUMNS set,
as a user reads it (issue 49): no line wider than the width, and nothing a user copies split
across lines (click broke `--find-capacity` at its hyphen and cut `docs/call-logs.md` where
the line ended).

What "split" means here: every word of the help at a width is a word of the same help drawn
with no width at all (click's FORCED_WIDTH, in this process). A word broken in two leaves a
piece that is no word of the whole help (`--find-`, `docs/call-`); the one word wrapping adds
is the shell continuation (`\\`) that breaks a long example command.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import pytest

from tests.cli_run import hipmem, hipmem_process

WIDTHS = (60, 80, 120)
_ADDED_BY_WRAPPING = {"\\"}


@functools.cache  # typer builds the whole command tree in 0.2 s: once, not once per test
def _app() -> Any:
    from typer.main import get_command

    from hipmem.cli.main import build_app

    return get_command(build_app([]))


def _paths(group: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    for name, command in sorted(getattr(group, "commands", {}).items()):
        yield from _paths(command, (*path, name))


COMMANDS = [" ".join(path) for path in _paths(_app())]


@functools.cache  # the same text for the three widths' tests
def _help_with_no_width(path: str) -> str:
    """The help of `hipmem PATH` drawn with no line limit: nothing wrapped, nothing split."""
    from typer._click import formatting

    ctx = _app().make_context("hipmem", [], resilient_parsing=True)
    for name in path.split():
        command = ctx.command.get_command(ctx, name)
        ctx = command.make_context(name, [], parent=ctx, resilient_parsing=True)
    forced = formatting.FORCED_WIDTH
    formatting.FORCED_WIDTH = 1 << 20
    try:
        return str(ctx.get_help())
    finally:
        formatting.FORCED_WIDTH = forced


def test_every_command_is_walked() -> None:
    # the top level, its commands, and the subcommands of rocm, log, torch, rmm and cache
    assert {"", "size", "replay", "fleet", "explain", "rocm fetch", "torch where",
            "log inspect", "cache list"} <= set(COMMANDS)  # fmt: skip
    assert len(COMMANDS) >= 25


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("command", COMMANDS, ids=lambda command: command or "hipmem")
def test_help_fits_the_width_and_splits_nothing(command: str, width: int) -> None:
    shown = hipmem(*command.split(), "--help", COLUMNS=str(width))
    assert shown.returncode == 0, shown.stderr
    wide = [f"{len(line)}: {line}" for line in shown.stdout.splitlines() if len(line) > width]
    assert wide == [], f"hipmem {command} --help at {width} columns"
    whole = set(_help_with_no_width(command).split()) | _ADDED_BY_WRAPPING
    pieces = [word for word in shown.stdout.split() if word not in whole]
    assert pieces == [], f"hipmem {command} --help at {width} columns: split words"
    if "Exit codes" in shown.stdout and "Options:" in shown.stdout:  # after, in every command
        assert shown.stdout.index("Exit codes") > shown.stdout.index("Options:"), command


def test_a_real_process_gets_the_same_help() -> None:
    """COLUMNS read by a fresh `hipmem` process as by the in-process runner above."""
    for width in WIDTHS:
        process = hipmem_process("replay", "--help", COLUMNS=str(width))
        assert process.returncode == 0, process.stderr
        assert process.stdout == hipmem("replay", "--help", COLUMNS=str(width)).stdout


def test_the_split_check_can_fail() -> None:
    """Click's own wrapper, which breaks at hyphens and inside long words, fails the check."""
    from textwrap import TextWrapper

    text = "with --find-capacity: see docs/call-logs.md for the grammar"
    click_like = TextWrapper(14, break_on_hyphens=True, break_long_words=True).wrap(text)
    assert {word for line in click_like for word in line.split()} - set(text.split())
