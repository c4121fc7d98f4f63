"""Errors raised by the replay library (log loading, analysis, replay).

As in `sizing.errors`, each error carries the exit code a front end should use.
"""

from __future__ import annotations


class ReplayError(Exception):
    """Base class: something the user should read as one line."""

    exit_code = 1


class ReplayUsageError(ReplayError):
    """The request is malformed (bad option value)."""

    exit_code = 2


class LogFormatError(ReplayError):
    """A log file cannot be read; the message names the file and line."""
