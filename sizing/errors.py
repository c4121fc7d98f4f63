"""Errors raised by the sizing library, under hipmem's one error root (`hipmem._core.errors`):
exit code 2 when the request itself is malformed (usage), 1 for everything else."""

from __future__ import annotations

from hipmem._core import errors


class SizingError(errors.HipmemError):
    """Base class of the sizing library's errors."""


class SizingUsageError(SizingError, errors.UsageError):
    """The request is malformed: unknown routine, argument or value."""


class UnknownRoutine(SizingUsageError):
    """No routine of that name is in the catalog."""


class BadArgument(SizingUsageError):
    """An argument is unknown, missing, or has a value of the wrong kind."""


class UnknownDevice(SizingUsageError):
    """The device is neither a known arch nor a known product name."""


class NoGpu(SizingError):
    """No real GPU here and no virtual device asked for: the machine lacks it (exit 1, as a
    replay with no GPU), though the fix is usually to name a device."""


class LibraryNotFound(SizingError):
    """rocBLAS or rocSOLVER could not be found in any searched place."""


class CacheDamaged(LibraryNotFound):
    """A file of a fetched tree is not what its fetch recorded: missing, of another size, or
    of another SHA256. `what` names the tree ("the cached ROCm 7.2"), `file` the first damaged
    file (relative to the tree), `repair` the command that repairs it."""

    def __init__(self, what: str, file: str, repair: str) -> None:
        self.what, self.file, self.repair = what, file, repair
        super().__init__(
            f"{what} is damaged ({file} changed since it was fetched); run `{repair}` to repair it"
        )

    @property
    def reason(self) -> str:
        """The damage without the repair, as a line that goes on to repair it says it."""
        return f"{self.what} is damaged ({self.file} changed since it was fetched)"


class MissingSymbol(SizingError):
    """The installed library version lacks a function the request needs."""


class VendorStatus(SizingError):
    """The vendor library answered with a status that is not a size."""


class ImplausibleSize(SizingError):
    """The library answered a size of 2**63 bytes or more: its arithmetic wrapped."""


class WorkerCrashed(SizingError):
    """The vendor library aborted or crashed the worker process."""


class WorkerTimedOut(SizingError):
    """The worker did not answer a call within the deadline; it was killed and restarted."""


class FetchError(SizingError):
    """Downloading or unpacking the offline ROCm libraries failed."""


class PinnedVersionGone(FetchError):
    """The archive no longer offers a version a release pins."""


class ShimBuildError(SizingError):
    """The stand-in HIP runtime could not be compiled."""


class CallLogError(SizingError):
    """A call log cannot be read, or (with --strict) holds a line that is not a call."""


class CallLogRefused(SizingUsageError):
    """A call log holds something no real log does and that is refused outright (an alias)."""


class NotACallLog(CallLogError, SizingUsageError):
    """The path named as a call log is not a file (a directory, a device such as
    /dev/urandom): a call log that cannot be read, and usage (exit 2), as every command says
    of an input that is no file."""


class WorkloadError(SizingUsageError):
    """A workload file does not follow the workload schema."""
