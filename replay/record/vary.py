"""`--vary NAME=V1,V2,...`: one recording per value, and the largest value that fits.

A value reaches the command as `{NAME}` in its words (`--batch {BATCH}`), or, when no word
names it, as the environment variable NAME. Each value is recorded in a fresh process on the
same virtual GPU; "fits" means the command ran to the end without running out of the device's
memory. Values are tried in the order given, and all of them run: an out-of-memory error at
one value does not say that a larger one fails (a script may change its plan with the value).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hipmem._core.devices import Device

from ..errors import ReplayUsageError
from .run import Recording, RecordRequest, record

MAX_VALUES = 64  # each value is a run of the user's command: a bound a typo cannot pass
# A value goes into a file name (one snapshot per value) and a command word: no path, no quote.
_VALUE = re.compile(r"[A-Za-z0-9._:+-]{1,64}")


@dataclass(frozen=True)
class Variation:
    """The name varied and its values, in the order given."""

    name: str
    values: tuple[str, ...]


@dataclass(frozen=True)
class VariedRecordings:
    variation: Variation
    recordings: tuple[Recording, ...]  # one per value, in order

    def fits(self, recording: Recording) -> bool:
        return recording.exit_code == 0 and not recording.out_of_memory

    @property
    def largest_fitting(self) -> Recording | None:
        """The run of the last value given that fits (values are given smallest first)."""
        fitting = [r for r in self.recordings if self.fits(r)]
        return fitting[-1] if fitting else None

    def by_device(self) -> list[DeviceAnswer]:
        """For each device of the fits table: the last value given whose snapshot replays there
        with no refusal. A value that ran out of memory on the recorded device has no whole
        snapshot, so a larger device's answer stops short of it (`bounded`)."""
        ran = [(value, r) for value, r in zip(self.variation.values, self.recordings,
                                              strict=True) if r.fits_table]  # fmt: skip
        if not ran:
            return []
        recorded = self.recordings[0].request.device
        ran_out = any(r.out_of_memory for r in self.recordings)
        answers = []
        for k, fit in enumerate(ran[0][1].fits_table):
            fitting = [(value, r) for value, r in ran
                       if len(r.fits_table) > k and r.fits_table[k].fits]  # fmt: skip
            value, best = fitting[-1] if fitting else (None, None)
            peak = None if best is None else best.fits_table[k].peak_reserved_bytes
            bounded = ran_out and fit.device.memory_bytes > recorded.memory_bytes
            answers.append(DeviceAnswer(fit.device, value, peak, bounded))
        return answers


@dataclass(frozen=True)
class DeviceAnswer:
    """The largest value that fits on one device of the fits table (None: none given fits)."""

    device: Device
    value: str | None
    peak_reserved_bytes: int | None
    bounded: bool  # a larger value ran out of memory on the (smaller) recorded device


def parse_variation(text: str) -> Variation:
    """`BATCH=8,16,32` -> Variation("BATCH", ("8", "16", "32")); a usage error names --vary."""
    name, equals, listed = text.partition("=")
    values = tuple(v.strip() for v in listed.split(","))
    if not equals or not name.isidentifier():
        raise ReplayUsageError("give NAME=V1,V2,... (e.g. BATCH=8,16,32)", parameter="vary",
                               value=text)  # fmt: skip
    if any(not v for v in values):
        raise ReplayUsageError("a value is missing between commas", parameter="vary", value=text)
    odd = next((v for v in values if not _VALUE.fullmatch(v)), None)
    if odd is not None:
        raise ReplayUsageError(f"the value {odd[:64]!r} is not letters, digits and ._:+- (at "
                               "most 64)", parameter="vary", value=text[:80])  # fmt: skip
    if len(values) > MAX_VALUES:
        raise ReplayUsageError(f"{len(values):,} values; at most {MAX_VALUES} runs",
                               parameter="vary", value=text[:80])  # fmt: skip
    return Variation(name, values)


def record_varied(
    request: RecordRequest,
    variation: Variation,
    *,
    notice: Callable[[str], None] | None = None,
    started: Callable[[str], None] | None = None,
) -> VariedRecordings:
    """Record the request's command once per value; `started(value)` before each run."""
    done = []
    for value in variation.values:
        if started is not None:
            started(value)
        done.append(record(_for_value(request, variation.name, value), notice=notice))
    return VariedRecordings(variation, tuple(done))


def _for_value(request: RecordRequest, name: str, value: str) -> RecordRequest:
    marker = "{" + name + "}"
    command = [word.replace(marker, value) for word in request.command]
    environment = dict(request.environment)
    if command == request.command:  # no word names it: the environment does
        environment[name] = value
    output = None if request.output is None else snapshot_path(request.output, name, value)
    return dataclasses.replace(request, command=command, environment=environment, output=output)


def snapshot_path(output: Path, name: str, value: str) -> Path:
    """Where one value's snapshot goes: run.pickle.gz -> run-BATCH-16.pickle.gz."""
    suffixes = "".join(output.suffixes)
    return output.with_name(f"{output.name.removesuffix(suffixes)}-{name}-{value}{suffixes}")
