"""The worker's answers to size queries, read as CallResults in the words of one session's
libraries and device: the request a call is sent as, and what each answer (a size, a status
the library rejected the call with, a missing symbol, a crash) says about the call.

A session and its sweeps read answers through one object, so that a point of a sweep fails
with the same words as the call sized alone."""

from __future__ import annotations

from typing import Any

from .calls.result import SIZE_STATUSES, WRAPPED_BYTES, CallResult
from .calls.spec import Call
from .errors import ImplausibleSize, MissingSymbol, VendorStatus, WorkerCrashed, WorkerTimedOut
from .rocm.catalog import Catalog
from .rocm.locator import Libraries
from .rocm.releases import RELEASES
from .worker.process import Crash
from .worker.virtual_device import Device


class CallAnswers:
    """Requests for the worker, and its answers as CallResults, for one session."""

    def __init__(
        self, catalog: Catalog, libraries: Libraries, device: Device, versions: dict[str, str]
    ) -> None:
        self.catalog = catalog
        self.libraries = libraries
        self.device = device
        self.versions = versions  # what the loaded libraries say of themselves
        self._status_names = {
            value: name for name, value in catalog.enums["rocblas_status"].items()
        }
        # The statuses with which a library answers a size (rocBLAS's size query says
        # `size_unchanged` or `success`, rocSOLVER's may differ): by number, for sweeps.
        self.sized_codes = frozenset(
            code for code, name in self._status_names.items() if name in SIZE_STATUSES
        )

    def request(self, call: Call) -> dict[str, Any]:
        """The call as the worker reads it (enums by number, defaults filled in)."""
        return {
            "function": call.routine.name,
            "library": call.routine.library,
            "args": call.worker_args(self.catalog),
        }

    def status_name(self, status: int) -> str:
        return self._status_names.get(status, f"unknown_{status}")

    def result(self, call: Call, answer: dict[str, Any] | Crash) -> CallResult:
        """What one answer says about `call`."""
        if isinstance(answer, Crash):
            message = f"{call.label}: the vendor library {answer.how}"
            message += f": {answer.last_words}" if answer.last_words else ""
            if answer.timed_out:
                return CallResult(call, None, "timed_out", WorkerTimedOut(message))
            return CallResult(call, None, "crashed", WorkerCrashed(message + self._hint(call)))
        if "missing_symbol" in answer:
            missing = MissingSymbol(
                f"{call.label}: the installed {call.routine.library} "
                f"({self.versions.get(call.routine.library, '?')}) has no {call.routine.name}"
            )
            return CallResult(call, None, "missing_symbol", missing)
        status = self.status_name(answer["status"])
        if status not in SIZE_STATUSES:
            error = VendorStatus(
                f"{call.label}: {call.routine.library} rejected the call: "
                f"rocblas_status_{status} ({answer['status']})"
            )
            return CallResult(call, None, status, error)
        size_bytes = int(answer["bytes"])
        if size_bytes >= WRAPPED_BYTES:
            return CallResult(call, None, "implausible", ImplausibleSize(
                f"{call.label}: {call.routine.library} answered {size_bytes:,} bytes, a size "
                "that wrapped around inside the library (2**63 or more): no answer"
            ))  # fmt: skip
        return CallResult(
            call, size_bytes, status, fits_device=size_bytes <= self.device.memory_bytes
        )

    def _hint(self, call: Call) -> str:
        tensile = self.libraries.tensile_dir
        if call.routine.family.startswith("gemm") and tensile is not None:
            arch = self.device.arch.name
            if not any(tensile.glob(f"*_{arch}.dat")):
                release = self.libraries.rocm
                return (
                    f" (the rocBLAS of ROCm {release or '(unknown release)'} has no gemm data "
                    f"for {arch} in {tensile}{gemm_data_fix(arch, release)}"
                )
        return ""


def gemm_data_fix(arch: str, release: str | None) -> str:
    """How to get gemm data for `arch` with the release that failed (`release`), or, where
    Debian's build of that release has none, which releases' builds do."""
    having = [known.name for known in RELEASES if arch in known.gemm_archs]
    if release in having:
        return f"; `hipmem rocm fetch --rocm {release} --arch {arch}` brings it)"
    if not having:
        return "; no ROCm release Debian builds has it)"
    which = f"ROCm {release}" if release else "this release"
    return (
        f"; Debian's build of {which} has none for {arch}, no fetch brings it: "
        f"ROCm {', '.join(having)} {'has' if len(having) == 1 else 'have'} it)"
    )
