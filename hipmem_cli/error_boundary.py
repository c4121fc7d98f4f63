"""What an exception means to the user: its exit code and its one line.

Usage errors of the command line (typer's), of the libraries (`UsageError`,
`ReplayUsageError`) and of input files are 2; every other failure is 1; Ctrl-C is 130.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

import typer

from hipmem._core.errors import MAX_SHOWN_CHARS, HipmemError, shown_value

try:  # recent typer carries its own copy of click; older ones use click itself
    click_exceptions = importlib.import_module("typer._click.exceptions")
except ImportError:  # pragma: no cover
    click_exceptions = importlib.import_module("click.exceptions")


def report(err: BaseException) -> int:
    """Say what `err` means (one line on stderr; a traceback too with --debug); the exit code.

    `hipmem` or `hipmem log` alone print the help on stderr with exit 2, as click does.
    """
    from . import output

    if isinstance(err, click_exceptions.NoArgsIsHelpError):
        output.block(err.format_message(), err=True)
        return 2
    code, message, traceback_helps = describe(err)
    if output.state.debug and traceback_helps:
        output.traceback_of(err)
    if message is not None:
        output.error(message)
    return code


def describe(err: BaseException) -> tuple[int, str | None, bool]:
    """(exit code, the line to print or None, whether --debug should show a traceback)."""
    if isinstance(err, typer.Exit):
        return err.exit_code, None, False
    if isinstance(err, click_exceptions.UsageError):
        return 2, _usage_line(err), False
    if isinstance(err, click_exceptions.ClickException):
        return err.exit_code, err.format_message(), False
    if isinstance(err, typer.Abort):
        return 1, "aborted", False
    if isinstance(err, HipmemError):
        return err.exit_code, cli_message(err), True
    if isinstance(err, BrokenPipeError):  # `hipmem ... | head`: the reader left; say nothing
        return 1, None, False
    if isinstance(err, OSError) and _raised_in_output(err):  # `--json > full-disk/x.json`
        return 1, f"cannot write the standard output: {err.strerror or err}", True
    if isinstance(err, MemoryError):  # the machine's limit, not a bug: what to do about it
        return 1, "out of memory: the input needs more memory than this process may use", True
    message = f"internal error: {type(err).__name__}: {err} (--debug shows the traceback)"
    return 1, message, True


def _raised_in_output(err: BaseException) -> bool:
    """Whether `err` was raised while hipmem_cli/output/, the one package that writes the
    standard output, was writing (files hipmem writes say their own failures: CannotWriteFile)."""
    from pathlib import Path

    from . import output

    package = str(Path(output.__file__).parent)
    frame = err.__traceback__
    while frame is not None:
        if str(Path(frame.tb_frame.f_code.co_filename).parent) == package:
            return True
        frame = frame.tb_next
    return False


# Library parameters whose flag is not simply `--` + the name with dashes.
_FLAGS = {
    "spec": "--resource",
    "compute_units": "--cus",
    "align_bytes": "--align",
    "device_memory_bytes": "--device-memory",
    "device_memory": "--device-memory",
    "snapshots": "--from-snapshot",
    "torch_build": "--for",
    "cap_bytes": "--cap",
    "settings": "--alloc-conf",  # explain's settings
}


def cli_message(err: HipmemError) -> str:
    """The error's line as the command line says it: flags, not Python parameter names.

    A parameter already named as a flag (`--device-memory`) is kept as it is, and one named
    as an environment variable (`PYTORCH_CUDA_ALLOC_CONF`) is said as a shell sets it
    (`PYTORCH_CUDA_ALLOC_CONF='x'`): neither is a Python name to turn into a flag."""
    parameter = err.parameter
    if parameter is None or _ENVIRONMENT_VARIABLE.fullmatch(parameter):
        return str(err)
    if parameter.startswith("-"):
        return err.for_flag(parameter)
    return err.for_flag(_FLAGS.get(parameter, "--" + parameter.replace("_", "-")))


_ENVIRONMENT_VARIABLE = re.compile(r"[A-Z][A-Z0-9_]*")


# A value typer quotes whole (`--backend '999...'`), shown by its start and length instead.
_LONG_QUOTED = re.compile(rf"'([^']{{{MAX_SHOWN_CHARS + 1},}})'")

# typer's wording of a bad choice, said as the libraries say theirs: `--threads 'x': not one of`
_BAD_CHOICE = re.compile(r"Invalid value for '([^']+)': (.*) is not one of (.*?)\.?$")


def _usage_line(err: Any) -> str:
    """typer's message, made one line, with where to read more."""
    message = " ".join(err.format_message().split()).replace("Value error, ", "")
    message = _LONG_QUOTED.sub(lambda found: shown_value(found[1]), message)
    choice = _BAD_CHOICE.fullmatch(message)
    if choice:
        flag, value, allowed = choice.groups()
        message = f"{flag} {value}: not one of {allowed.replace(chr(39), '')}"
    if message.startswith("No such command"):
        return f"{message} (hipmem -h lists the commands)"
    command = err.ctx.command_path if err.ctx is not None else "hipmem"
    return f"{message} ({command} -h shows the options)"
