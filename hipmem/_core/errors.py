"""The one root of every error hipmem's libraries raise.

Each error carries the process exit code a front end should use: 2 when the request itself is
malformed (usage), 1 for everything else (missing libraries, damaged files, vendor failures).

An error about one parameter names it as the Python API spells it (`threads='x': ...`); the CLI
names its flag instead (`--threads 'x': ...`) through `HipmemError.for_flag`, so neither the
library nor its messages know about command-line flags.
"""

from __future__ import annotations

_NO_VALUE = object()


class HipmemError(Exception):
    """Something the user should read as one line."""

    exit_code = 1

    def __init__(
        self, message: str, *, parameter: str | None = None, value: object = _NO_VALUE
    ) -> None:
        self.detail = message
        self.parameter = parameter
        self.value = value
        super().__init__(self._render(parameter, "="))

    def for_flag(self, flag: str) -> str:
        """The message as a command line says it, naming `flag` instead of the parameter."""
        return self._render(flag, " ")

    def _render(self, name: str | None, joiner: str) -> str:
        if name is None:
            return self.detail
        if self.value is _NO_VALUE:
            return f"{name}: {self.detail}"
        return f"{name}{joiner}{shown_value(self.value)}: {self.detail}"


MAX_SHOWN_CHARS = 200  # a path or spec is shown whole; a 5,000-digit value is not


def shown_value(value: object) -> str:
    """`value` as a message shows it: its repr (escaped, quoted), or for a text longer than
    MAX_SHOWN_CHARS its first 40 characters and its length, so that one line stays one line."""
    if isinstance(value, str) and len(value) > MAX_SHOWN_CHARS:
        return f"{value[:40]!r}... ({len(value):,} characters)"
    return repr(value)


class UsageError(HipmemError):
    """The request is malformed: an unknown name, a missing or badly formed value."""

    exit_code = 2
