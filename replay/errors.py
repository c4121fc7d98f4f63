"""Errors raised by the replay library (log loading, analysis, replay), under hipmem's one
error root (`hipmem._core.errors`): exit code 2 for a malformed request, 1 for everything else."""

from __future__ import annotations

from hipmem._core import errors


class ReplayError(errors.HipmemError):
    """Base class of the replay library's errors."""


class ReplayUsageError(ReplayError, errors.UsageError):
    """The request is malformed (bad option value)."""


class LogFormatError(ReplayError):
    """A log file cannot be read; the message names the file and line."""
