"""The CI gate: does a ROCBLAS_DEVICE_MEMORY_SIZE value cover a workload?

rocBLAS reads the variable once, when a handle is created, with `strtoul(value, NULL, 0)`:
decimal, `0x` hex or leading-0 octal, no unit suffixes (`128M` is 128 bytes), and whatever
follows the number is silently ignored. So the gate reads the value exactly as the library
will, and says so when the library would see something other than what was meant.

    setting = read_setting("4732160")
    outcome = check(setting, session_result)     # outcome.passed, outcome.reason
    setting = read_environment_setting()         # the value this process's rocBLAS would read
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .calls.result import CallResult
from .errors import SizingError, SizingUsageError
from .recommend import degraded_calls, query_kind
from .session import SessionResult

if TYPE_CHECKING:
    from .sweeps.result import SweepResult

VARIABLE = "ROCBLAS_DEVICE_MEMORY_SIZE"
ULONG_MAX = 2**64 - 1  # unsigned long on the 64-bit Linux targets ROCm supports
_C_SPACES = " \t\n\v\f\r"  # isspace() in the C locale and in UTF-8 locales
_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


class NotANumber(SizingUsageError):
    """The value has no number at its start, so strtoul would read it as 0."""


class AmbiguousValue(SizingUsageError):
    """Old and C23 strtoul read the value differently (a `0b` binary prefix)."""


class IncompleteSizing(SizingError):
    """Some calls could not be sized, so no verdict can be given."""


@dataclass(frozen=True)
class StrtoulResult:
    """What `strtoul(text, &end, 0)` returns, and how far it read."""

    text: str
    value: int
    consumed: int  # characters read (end - text); 0 when there is no number at all

    @property
    def is_number(self) -> bool:
        return self.consumed > 0

    @property
    def ignored(self) -> str:
        """What strtoul left unread after the number ("" when it read everything)."""
        return self.text[self.consumed :] if self.consumed else ""


def strtoul(text: str, *, c23: bool = False) -> StrtoulResult:
    """`strtoul(text, &end, 0)` as glibc does it, for 64-bit `unsigned long`.

    Leading C whitespace, one optional sign, then `0x`/`0X` + hex, `0` + octal, or decimal.
    A minus negates modulo 2**64 (`-1` is ULONG_MAX); overflow saturates at ULONG_MAX.
    `c23=True` adds the `0b`/`0B` binary prefix of ISO C23, which glibc ≥ 2.38 gives
    programs built with _GNU_SOURCE (as C++ is): such builds import `__isoc23_strtoul`.
    """
    position = _skip_spaces(text)
    negative = text[position : position + 1] == "-"
    if text[position : position + 1] in ("+", "-"):
        position += 1
    base, position = _base_and_start(text, position, c23)
    start = position
    while position < len(text) and _digit(text[position]) < base:
        position += 1
    if position == start:
        return StrtoulResult(text, 0, 0)  # no digits: glibc sets end back to the very start
    digits = text[start:position].lstrip("0")
    # More digits than ULONG_MAX has in base 2 is past it in any base: saturate without
    # int(), which refuses strings of thousands of digits.
    magnitude = int(digits, base) if 0 < len(digits) <= 64 else (ULONG_MAX + 1 if digits else 0)
    if magnitude > ULONG_MAX:
        value = ULONG_MAX  # ERANGE: saturates whatever the sign
    else:
        value = (-magnitude) % (ULONG_MAX + 1) if negative else magnitude
    return StrtoulResult(text, value, position)


def _skip_spaces(text: str) -> int:
    position = 0
    while position < len(text) and text[position] in _C_SPACES:
        position += 1
    return position


def _base_and_start(text: str, position: int, c23: bool) -> tuple[int, int]:
    """The base strtoul picks for base 0, and where its digits start."""
    if text[position : position + 1] != "0":
        return 10, position
    prefix = text[position + 1 : position + 2]
    following = text[position + 2 : position + 3]
    # A prefix counts only when a digit of its base follows: "0x" alone reads as 0.
    if prefix in ("x", "X") and following and _digit(following) < 16:
        return 16, position + 2
    if c23 and prefix in ("b", "B") and following in ("0", "1"):
        return 2, position + 2
    return 8, position


def _digit(char: str) -> int:
    """The value of one ASCII digit or letter, or 99 for anything else (never a digit)."""
    index = _DIGITS.find(char.lower()) if char.isascii() and char.isalnum() else -1
    return index if index >= 0 else 99


@dataclass(frozen=True)
class WorkspaceSetting:
    """What a new rocBLAS handle does with one value of ROCBLAS_DEVICE_MEMORY_SIZE."""

    text: str | None  # as the environment holds it; None when unset
    bytes: int  # what the handle allocates; 0 means rocBLAS manages the memory itself
    notes: list[str] = field(default_factory=list)
    variable: str = VARIABLE  # the variable it was read from (HIPBLAS_WORKSPACE_CONFIG, ...)

    @property
    def managed(self) -> bool:
        """rocBLAS-managed: unset, empty or 0; the handle grows on demand."""
        return self.bytes == 0


def read_setting(text: str | None, *, source: str = VARIABLE) -> WorkspaceSetting:
    """Read a value the way rocBLAS does; `source` names it in errors (`--value`, ...).

    Raises NotANumber for text with no number at its start (rocBLAS would silently fall
    back to managing memory itself), AmbiguousValue when rocBLAS builds disagree.
    """
    if text is None or not text.strip(_C_SPACES):
        return WorkspaceSetting(text, 0)  # unset or empty: rocBLAS manages the memory
    classic, modern = strtoul(text), strtoul(text, c23=True)
    if not classic.is_number:
        raise NotANumber(
            f"{source} {text!r} is not a number (write plain decimal bytes, e.g. 4732160); "
            "rocBLAS would read it as 0 and manage the memory itself"
        )
    if classic != modern:
        raise AmbiguousValue(
            f"{source} {text!r} reads as {modern.value} in rocBLAS builds on glibc ≥ 2.38 "
            f"(C23 strtoul) and as {classic.value} in older ones; write plain decimal bytes"
        )
    notes = []
    if classic.ignored:
        notes.append(
            f"{source} {text!r} is read as {classic.value} bytes: strtoul stops at "
            f"{classic.ignored!r} (no unit suffixes; write plain decimal bytes)"
        )
    if text.lstrip(_C_SPACES).startswith("-"):
        notes.append(f"{source} {text!r} is negative: strtoul wraps it to {classic.value}")
    return WorkspaceSetting(text, classic.value, notes)


def read_environment_setting(environ: Mapping[str, str] | None = None) -> WorkspaceSetting:
    """ROCBLAS_DEVICE_MEMORY_SIZE as rocBLAS reads it from `environ` (default: this process's
    environment, which a rocBLAS started from it inherits), named `$ROCBLAS_DEVICE_MEMORY_SIZE`
    in errors and notes; unset, rocBLAS manages the memory."""
    environ = os.environ if environ is None else environ
    return read_setting(environ.get(VARIABLE), source=f"${VARIABLE}")


@dataclass(frozen=True)
class CheckOutcome:
    """The verdict for one setting and one workload, with a one-line reason."""

    setting: WorkspaceSetting
    passed: bool
    needed_bytes: int  # the session size: what one handle needs for the whole workload
    reason: str
    misfits: list[CallResult]  # calls needing more than the setting, largest first
    degraded: list[str] = field(default_factory=list)  # calls that run degraded with it
    # Swept calls: where each one's need is largest, and how many points the setting misses.
    sweep_notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {
            "passed": self.passed,
            "value": self.setting.text,
            "value_bytes": self.setting.bytes,
            "managed": self.setting.managed,
            "needed_bytes": self.needed_bytes,
            "reason": self.reason,
            "misfits": [
                {"call": r.call.label, "bytes": r.bytes, "count": r.count} for r in self.misfits
            ],
            "notes": self.setting.notes,
            "degraded_calls": self.degraded,
            "sweeps": self.sweep_notes,
        }


def check(setting: WorkspaceSetting, result: SessionResult) -> CheckOutcome:
    """Pass when a handle created with `setting` can run every call of `result` (of a swept
    call, every point: its largest need is among the calls).

    Where minimums were measured (`SizingSession.measure_minimum`), a call fits from its
    minimum up; between its minimum and optimal it runs degraded, which passes with the call
    named in `degraded` (a warning)."""
    outcome = _check(setting, result)
    notes = [_sweep_note(setting, swept) for swept in result.sweeps]
    return dataclasses.replace(outcome, sweep_notes=notes)


def _sweep_note(setting: WorkspaceSetting, swept: SweepResult) -> str:
    note = swept.summary_line()
    if setting.managed or swept.max_bytes is None:
        return note
    count, first = swept.points_above(setting.bytes)
    if first is not None:
        note += f"; {count:,} points need more than {setting.bytes:,} bytes, the first at "
        note += swept.point_text(first)
    return note


def _check(setting: WorkspaceSetting, result: SessionResult) -> CheckOutcome:
    if result.failed:
        labels = ", ".join(r.call.label for r in result.failed)
        raise IncompleteSizing(f"cannot check: these calls could not be sized: {labels}")
    needed = result.session_bytes
    if result.session_minimum_bytes is not None:
        needed = result.session_minimum_bytes
    shown = _shown(setting)
    if setting.managed:
        reason = (
            f"{shown}: rocBLAS manages the memory (a default allocation that grows when a call "
            "needs more), so every call fits"
        )
        return CheckOutcome(setting, True, needed, reason, [])
    memory = result.device.memory_bytes
    if setting.bytes > memory:
        reason = (
            f"{shown} ({setting.bytes:,} bytes) is more than the {result.device.name}'s "
            f"{memory:,} bytes of memory: rocBLAS would try to allocate that much when a "
            "handle is created, and fail"
        )
        return CheckOutcome(setting, False, needed, reason, [])
    misfits = sorted(
        (r for r in result.calls if (r.minimum_or_query_bytes or 0) > setting.bytes),
        key=lambda r: -(r.minimum_or_query_bytes or 0),
    )
    if misfits:
        return CheckOutcome(
            setting, False, needed, _misfit_reason(shown, setting, misfits), misfits
        )
    if needed > setting.bytes:  # no single call is too big, but the session is
        reason = f"{shown} is {needed - setting.bytes:,} bytes short of the session's {needed:,}"
        return CheckOutcome(setting, False, needed, reason, [])
    spare = setting.bytes - needed
    degraded = degraded_calls(result.calls, setting.bytes)
    if degraded:
        reason = (
            f"{shown} runs the workload ({needed:,} bytes at least, {spare:,} spare), "
            f"{len(degraded)} call(s) degraded"
        )
        return CheckOutcome(setting, True, needed, reason, [], degraded)
    reason = f"{shown} covers the workload ({needed:,} bytes needed, {spare:,} spare)"
    return CheckOutcome(setting, True, needed, reason, [])


def _shown(setting: WorkspaceSetting) -> str:
    if setting.text is None:
        return f"{setting.variable} is unset"
    if not setting.text.strip(_C_SPACES):
        return f"{setting.variable} is empty"
    text = setting.text.strip(_C_SPACES)
    if len(text) > 40:  # one line stays one line (a value of 5,000 digits)
        text = f"{text[:20]}... ({len(text):,} characters)"
    return f"{setting.variable}={text}"


def _misfit_reason(shown: str, setting: WorkspaceSetting, misfits: list[CallResult]) -> str:
    largest = misfits[0]
    needs = largest.minimum_or_query_bytes
    assert needs is not None
    measured = largest.minimum is not None and largest.minimum.method == "measured"
    reason = (
        f"{shown} is too small: {largest.call.label} needs {needs:,} bytes "
        f"({needs - setting.bytes:,} more)"
    )
    kind = query_kind(largest.call)
    if measured:
        reason += ", its measured minimum: below it the call fails"
    elif kind is not None and not kind.minimum:
        reason += f"; that is its optimal size: {kind.why}"
    if len(misfits) > 1:
        reason += f"; {len(misfits) - 1} more call(s) do not fit either"
    return reason


_PYTORCH_CONFIG = re.compile(r"(:[0-9]{1,12}:[0-9]{1,6})+", re.ASCII)


def read_pytorch_config(text: str, *, source: str = "HIPBLAS_WORKSPACE_CONFIG") -> WorkspaceSetting:
    """PyTorch's rocBLAS workspace (`HIPBLAS_WORKSPACE_CONFIG`, after `CUBLAS_WORKSPACE_CONFIG`,
    before `ROCBLAS_WORKSPACE_CONFIG`): `:SIZE_KiB:COUNT` repeated, one workspace of
    Σ SIZE·1024·COUNT bytes per handle and stream, handed to rocBLAS with
    rocblas_set_workspace. `:0:0` gives none: rocBLAS then manages its own memory."""
    value = text.strip()
    if not _PYTORCH_CONFIG.fullmatch(value):
        raise NotANumber(
            f"{source} {text[:40]!r} is not PyTorch's :SIZE_KiB:COUNT format (e.g. :4622:1)"
        )
    numbers = [int(part) for part in value.split(":")[1:]]
    pairs = zip(numbers[::2], numbers[1::2], strict=True)
    total = sum(size_kib * 1024 * count for size_kib, count in pairs)
    return WorkspaceSetting(value, total, variable="HIPBLAS_WORKSPACE_CONFIG")
