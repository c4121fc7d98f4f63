"""Run the installed `hipmem` as a user would: piped, or on a pseudo-terminal of a given
width, and read back what the user would see."""

from __future__ import annotations

import functools
import os
import pty
import re
import select
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HIPMEM = Path(sys.executable).parent / "hipmem"
WIDTHS = (60, 80, 200)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


@dataclass(frozen=True)  # frozen: one run may be read by several tests (help_piped)
class Seen:
    returncode: int
    stdout: str
    stderr: str


def _env(columns: int, extra: dict[str, str] | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR")}
    env["COLUMNS"] = str(columns)
    env.update(extra or {})
    return env


def piped(*args: str, columns: int = 80, env: dict[str, str] | None = None) -> Seen:
    """`hipmem ARGS` with stdout and stderr redirected (as in CI logs)."""
    done = subprocess.run(
        [str(HIPMEM), *args], capture_output=True, text=True, cwd=REPO,
        env=_env(columns, env), timeout=300,
    )  # fmt: skip
    return Seen(done.returncode, done.stdout, done.stderr)


@functools.cache
def help_piped(command: tuple[str, ...], columns: int = 80) -> Seen:
    """`hipmem COMMAND --help` piped at `columns`, run once per test process and shared by
    the tests that read it (test_fits_80_columns.py, test_terminal_cli.py,
    test_cli_documented.py): it is the same text whichever test asks (the width decides it,
    not HIPMEM_TORCH or PATH), and those tests ran it 69 times for 28 commands."""
    return piped(*command, "--help", columns=columns)


def on_terminal(*args: str, columns: int = 80, env: dict[str, str] | None = None) -> Seen:
    """`hipmem ARGS` with stdout on a pseudo-terminal `columns` wide (stderr piped).

    Colours and styles are stripped from what is returned: the text is what the user reads.
    """
    return command_on_terminal([str(HIPMEM), *args], columns=columns, env=_env(columns, env))


def command_on_terminal(
    argv: list[str], *, columns: int, env: dict[str, str], cwd: Path = REPO
) -> Seen:
    """Any command (`argv`, in `cwd`, with exactly `env`) with stdout on a pseudo-terminal
    `columns` wide and stderr piped; colours and styles stripped, as in `on_terminal`."""
    leader, follower = _terminal(columns)
    process = subprocess.Popen(argv, stdout=follower, stderr=subprocess.PIPE, cwd=cwd, env=env)
    os.close(follower)
    shown = _shown(leader, process, timeout_s=300)
    stderr = process.stderr.read().decode() if process.stderr else ""
    process.wait(timeout=60)
    return Seen(process.returncode, shown, stderr)


def stderr_on_terminal(
    argv: list[str], *, columns: int, env: dict[str, str], cwd: Path = REPO
) -> Seen:
    """The other way round: stderr (where progress bars are drawn) on a pseudo-terminal and
    stdout piped; `stderr` is what the terminal showed, without colours."""
    leader, follower = _terminal(columns)
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=follower, cwd=cwd, env=env)
    os.close(follower)
    shown = _shown(leader, process, timeout_s=600)
    stdout = process.stdout.read().decode() if process.stdout else ""
    process.wait(timeout=60)
    return Seen(process.returncode, stdout, shown)


def _terminal(columns: int) -> tuple[int, int]:
    """A pseudo-terminal (leader, follower) `columns` wide."""
    import fcntl
    import struct
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    return leader, follower


def _shown(leader: int, process: subprocess.Popen[bytes], timeout_s: float) -> str:
    """What the terminal showed until the process closed it or ended, colours stripped."""
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.2)
        if ready:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        elif process.poll() is not None:
            break
    os.close(leader)
    text = b"".join(chunks).decode(errors="replace").replace("\r\n", "\n")
    return _ANSI.sub("", text)


def both(*args: str, columns: int) -> list[Seen]:
    """The same command piped and on a terminal."""
    return [piped(*args, columns=columns), on_terminal(*args, columns=columns)]


def unwrapped(text: str) -> str:
    """What a wrapped message says, whatever the width it was wrapped at: line breaks and
    runs of spaces made one space (a status line naming a long path puts the path on a line
    of its own: tests/cli/test_any_home.py)."""
    return " ".join(text.split())


def whole_on_a_line(value: str, text: str) -> bool:
    """`value` appears inside one line of `text` (not folded or cut)."""
    return any(value in line for line in text.splitlines())


# The 80-column rule (tests/cli/test_fits_80_columns.py says why these may be wider).
WIDTH = 80
ONE_LINE_BY_RULE = ("Error: ", "Warning: ", "FAIL ", "ok ", "export ", "# ")


def too_wide(text: str, width: int = WIDTH) -> list[str]:
    """The lines of `text` wider than `width` that are not one unsplittable word alone."""
    return [
        line
        for line in text.splitlines()
        if len(line) > width and len(line.split()) > 1 and not line.startswith(ONE_LINE_BY_RULE)
    ]


def width_problems(seen: Seen | subprocess.CompletedProcess[str], where: str) -> list[str]:
    """Lines past the rule, and anything cut with an ellipsis, in what a command printed."""
    text = seen.stdout + seen.stderr
    problems = [f"{where}: {len(line)} columns: {line}" for line in too_wide(text)]
    if "…" in text:
        problems.append(f"{where}: cut with '…'")
    return problems
