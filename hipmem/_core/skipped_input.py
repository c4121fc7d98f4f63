"""Input that could not be read: said the same way by every command that reads a log or a
snapshot, and refused by the gates (`check`, `recommend`) unless the caller accepts it.

A lenient reader skips what it cannot read and keeps going, which is right for looking at a
log (`log inspect`, `replay` warn and go on) and wrong for a gate: an answer given from part
of the input is an answer the skipped part could change (one allocation's size stored as a
float turns a FAIL into ok). So a gate answers about the whole input or not at all:
`SkippedInputError` (exit 1) unless told to accept what was skipped, and then the answer
says how much was. Input of which nothing could be read is `NothingToAnswer` (exit 1)
everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hipmem._core.errors import HipmemError

# Places named in full in one line; the rest are counted.
SHOWN_PLACES = 3


@dataclass(frozen=True)
class SkippedPlace:
    """One place that could not be read: `FILE:LINE` or `FILE#devN:ENTRY`, and why."""

    where: str
    reason: str

    def __str__(self) -> str:
        return f"{self.where}: {self.reason}"


@dataclass(frozen=True)
class SkippedInput:
    """How much of an input was skipped: the count, and the first places in full."""

    count: int = 0
    first: tuple[SkippedPlace, ...] = ()

    def __add__(self, other: SkippedInput) -> SkippedInput:
        return SkippedInput(self.count + other.count, self.first + other.first)

    def describe(self) -> str:
        return describe_skipped(self.count, self.first)

    def as_dict(self) -> dict[str, object]:
        return skipped_json(self.count, self.first)


def describe_skipped(count: int, first: Sequence[SkippedPlace]) -> str:
    """`3 unreadable entries skipped: run.pickle#dev0:12: why; ...; and 1 more`: the one
    wording every command uses (`first` holds at least the first place when count > 0)."""
    noun = "entry" if count == 1 else "entries"
    shown = list(first[:SHOWN_PLACES])
    text = f"{count:,} unreadable {noun} skipped: " + "; ".join(str(p) for p in shown)
    rest = count - len(shown)
    return text + (f"; and {rest:,} more" if rest > 0 else "")


def skipped_json(count: int, first: Sequence[SkippedPlace]) -> dict[str, object]:
    """The machine-readable form: `{"count": N, "first": [{"where": ..., "reason": ...}]}`."""
    return {"count": count, "first": [{"where": p.where, "reason": p.reason} for p in first]}


class SkippedInputError(HipmemError):
    """A gate's answer could change with input that could not be read: no answer."""

    def __init__(self, count: int, first: Sequence[SkippedPlace]) -> None:
        self.count, self.first = count, list(first)
        super().__init__(
            f"{describe_skipped(count, first)}; no answer from part of the input",
            parameter="accept_skipped",
        )

    def _render(self, name: str | None, joiner: str) -> str:
        # The option goes last, as the way out: `...; no answer ... (--accept-skipped answers
        # from the rest)`.
        return f"{self.detail} ({name} answers from the readable rest)"


class NothingToAnswer(HipmemError):
    """Every row or entry of the input was unreadable: there is nothing to answer about."""

    def __init__(self, count: int, first: Sequence[SkippedPlace]) -> None:
        self.count, self.first = count, list(first)
        super().__init__(f"nothing to answer: {describe_skipped(count, first)}, none readable")


def refuse_skipped(count: int, first: Sequence[SkippedPlace], *, accept: bool) -> None:
    """The gate's rule: skipped input is an error unless `accept`."""
    if count and not accept:
        raise SkippedInputError(count, first)
