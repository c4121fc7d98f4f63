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
        return f"{name}{joiner}{self.value!r}: {self.detail}"


class UsageError(HipmemError):
    """The request is malformed: an unknown name, a missing or badly formed value."""

    exit_code = 2
