"""One call's answer: its workspace, or why there is none. Sessions make them and sweeps
join theirs to a session, so this sits below both."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import SizingError
from ..minimum import Minimum
from .spec import Call

SIZE_STATUSES = ("size_increased", "size_unchanged", "success")
# A size_t the library computed of 2**63 or more has wrapped (no device is near it).
WRAPPED_BYTES = 2**63


@dataclass
class CallResult:
    """One distinct call: its workspace, or why there is none."""

    call: Call
    bytes: int | None  # the minimum workspace the library asks for; None on error
    status: str  # the library's status by name, or "crashed" / "missing_symbol"
    error: SizingError | None = None
    count: int = 1  # how many times the request contained this call
    fits_device: bool = True  # False: more than the device's memory (unsatisfiable there)
    minimum: Minimum | None = None  # minimum vs optimal, when asked for (sizing/minimum.py)

    @property
    def minimum_or_query_bytes(self) -> int | None:
        """The least workspace known to work: the measured minimum, else the query."""
        if self.minimum is not None and self.minimum.minimum_bytes is not None:
            return self.minimum.minimum_bytes
        return self.bytes

    def as_dict(self) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "routine": self.call.routine.name,
            "args": self.call.args,
            "bytes": self.bytes,
            "status": self.status,
            "count": self.count,
            "fits_device": self.fits_device,
        }
        if self.error is not None:
            payload["error"] = str(self.error)
        if self.minimum is not None:
            payload |= self.minimum.as_dict()
        return payload
