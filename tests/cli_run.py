"""`hipmem ARGS` for the tests: the one way they run the command line.

`hipmem(...)` runs it in this process, through the console script's own entry and error
boundary (`hipmem.cli.main._run`), as a piped subprocess would run it: stdout and stderr are
files at the file-descriptor level (what a library or a child process writes lands there too,
in order), neither is a terminal, the environment and working folder are the ones given, and
the exit code is what the process would exit with. It saves a cold interpreter per call (about
a second of imports each, some 150 calls in the suite).

`hipmem_process(...)` runs a real `python -m hipmem.cli.main` subprocess, for the tests where the
process boundary is the thing tested: a crash or a signal and its exit code, what the vendor
libraries or the caches do to a fresh process (damaged files found on first use, a build
checked once per process), the answers cache that answers before typer is imported, a timeout.

Both take the environment as `**env` on top of this process's (minus the names in `unset`)
and return a `subprocess.CompletedProcess[str]` (`returncode`, `stdout`, `stderr`).
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path


def environment(unset: Iterable[str] = (), **env: str) -> dict[str, str]:
    """This process's environment without the names in `unset`, plus `env`."""
    dropped = set(unset)
    return {k: v for k, v in os.environ.items() if k not in dropped} | env


def hipmem(
    *args: str, cwd: Path | str | None = None, unset: Iterable[str] = (), **env: str
) -> subprocess.CompletedProcess[str]:
    """`hipmem ARGS` in this process, piped: (exit code, stdout, stderr) as a subprocess's."""
    from hipmem.cli import output
    from hipmem.cli.main import _run
    from hipmem.sizing.rocm import tree_check

    tree_check.forget_checked()  # a fresh process has checked no fetched tree yet

    with (
        _environ(environment(unset, **env)),
        _cwd(cwd),
        _captured(1, "stdout") as out,
        _captured(2, "stderr") as err,
        _stdin_empty(),
        _interpreter_warnings(),
    ):
        output.state.consoles.clear()  # consoles made for another stream or width
        try:
            code = _run(list(args))
        except SystemExit as done:  # what the interpreter would make of it
            code = _exit_code(done.code)
        finally:
            output.state.consoles.clear()
            output.state.debug = False
    return subprocess.CompletedProcess(["hipmem", *args], code, out.text, err.text)


def hipmem_process(
    *args: str,
    cwd: Path | str | None = None,
    unset: Iterable[str] = (),
    timeout: float | None = 600,
    **env: str,
) -> subprocess.CompletedProcess[str]:
    """`hipmem ARGS` in a subprocess of its own, piped."""
    return subprocess.run(
        [sys.executable, "-m", "hipmem.cli.main", *args],
        capture_output=True, text=True, env=environment(unset, **env), cwd=cwd, timeout=timeout,
    )  # fmt: skip


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


@contextlib.contextmanager
def _environ(env: dict[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _cwd(cwd: Path | str | None) -> Iterator[None]:
    saved = Path.cwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(saved)


@contextlib.contextmanager
def _interpreter_warnings() -> Iterator[None]:
    """Warnings as a fresh interpreter shows them (its default filters, printed on stderr),
    not as pytest records them."""
    with warnings.catch_warnings():
        warnings.resetwarnings()  # also forgets which warnings were already shown
        for category in (ImportWarning, PendingDeprecationWarning, ResourceWarning):
            warnings.simplefilter("ignore", category)
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")
        warnings.showwarning = _show_warning
        yield


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: object = None,
    line: str | None = None,
) -> None:
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


@contextlib.contextmanager
def _stdin_empty() -> Iterator[None]:
    """stdin as a subprocess of the tests has it: /dev/null (pytest's own stdin)."""
    saved = sys.stdin
    with Path(os.devnull).open() as nothing:
        sys.stdin = nothing
        try:
            yield
        finally:
            sys.stdin = saved


class _Seen:
    text = ""


@contextlib.contextmanager
def _captured(fd: int, name: str) -> Iterator[_Seen]:
    """File descriptor `fd` and sys.`name` both write to one temporary file (UTF-8, strict, as
    a piped interpreter's), restored after; what was written is `.text`."""
    seen = _Seen()
    saved_fd, saved_stream = os.dup(fd), getattr(sys, name)
    saved_stream.flush()
    with tempfile.TemporaryFile() as file:
        os.dup2(file.fileno(), fd)
        raw = open(fd, "wb", buffering=0, closefd=False)  # noqa: SIM115
        stream = io.TextIOWrapper(raw, encoding="utf-8", errors="strict", write_through=True)
        setattr(sys, name, stream)
        try:
            yield seen
        finally:
            stream.flush()
            setattr(sys, name, saved_stream)
            os.dup2(saved_fd, fd)
            os.close(saved_fd)
            file.seek(0)
            # Decoded as subprocess.run(text=True) decodes: strict, universal newlines.
            seen.text = io.TextIOWrapper(io.BytesIO(file.read()), encoding="utf-8").read()
