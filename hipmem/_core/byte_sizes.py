"""The one byte grammar and the one byte formatter of hipmem.

A size is whole bytes (`4096`) or a number with an IEC unit (`64KiB`, `1.5 GiB`, any letter case).
Units that half of all readers take as powers of ten and half as powers of two (`M`, `MB`, `8GB`)
are refused with the fix, never guessed: a workspace sized 5% too small fails at run time.
"""

from __future__ import annotations

import re
from fractions import Fraction

from hipmem._core.errors import UsageError

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
TiB = 1 << 40

# What every size must fit: the C side keeps sizes in int64/size_t, and 2**63 or more is a
# wrapped value rather than a size.
MAX_BYTES = (1 << 63) - 1

_MAX_DIGITS = 40
_IEC_UNITS = {"": 1, "b": 1, "kib": KiB, "mib": MiB, "gib": GiB, "tib": TiB, "pib": 1 << 50}
# ASCII digits only: `str.isdigit` and `\d` accept fullwidth and other scripts' digits.
_SIZE = re.compile(r"[ \t]*([0-9]+(?:\.[0-9]+)?)[ \t]*([A-Za-z]*)[ \t]*")


class BadSize(UsageError):
    """A size is malformed, ambiguous, fractional in bytes, or too large."""


def parse_bytes(text: str | int, *, name: str = "size") -> int:
    """Whole bytes from `4096`, `64KiB`, `2 MiB` or `1.5GiB`; `name` says where it came from.

    Integers pass through (never negative). `8GB`, `128M` and friends are refused with the IEC
    spelling to use instead; fractions must come to whole bytes.
    """
    if isinstance(text, bool):
        raise BadSize("expected a size", parameter=name, value=text)
    if isinstance(text, int):
        return _checked(text, name, text)
    match = _SIZE.fullmatch(text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _IEC_UNITS:
        raise BadSize(f"not a size{_hint(match, unit)}", parameter=name, value=text)
    if len(match.group(1)) > _MAX_DIGITS:  # Python refuses int() of thousands of digits
        digits = len(match.group(1))
        raise BadSize(f"{digits} digits, more than {MAX_BYTES:,} bytes", parameter=name)
    value = _value(match, unit)
    if value.denominator != 1:
        raise BadSize("not a whole number of bytes", parameter=name, value=text)
    return _checked(int(value), name, text)


def parse_rounded_bytes(text: str, *, name: str = "size") -> tuple[int, bool]:
    """Whole bytes from a size as `parse_bytes` reads it, or from the decimal IEC forms hipmem
    prints (`1.4 GiB`, `13.9GiB`), rounded down to whole bytes: for a device's memory or a
    cap, where a byte less is no harm and the printed figure is what a user copies. Returns
    the bytes and whether they were rounded (the caller says so: `--cap 1.4GiB is ...`)."""
    match = _SIZE.fullmatch(text)
    unit = match.group(2).lower() if match else ""
    if (
        match is None
        or unit in ("", "b")
        or unit not in _IEC_UNITS
        or len(match.group(1)) > _MAX_DIGITS
    ):
        return parse_bytes(text, name=name), False  # bytes are whole; errors said as everywhere
    value = _value(match, unit)
    return _checked(int(value), name, text), value.denominator != 1


def _value(match: re.Match[str], unit: str) -> Fraction:
    return Fraction(match.group(1)) * _IEC_UNITS[unit]


def _hint(match: re.Match[str] | None, unit: str) -> str:
    examples = "whole bytes or an IEC size such as 4096, 64KiB, 2MiB"
    if match is not None and unit[:1] in ("k", "m", "g", "t", "p"):
        number, letter = match.group(1), unit[0].upper()
        return (
            f" ({unit!r} is ambiguous: write {number}{letter}iB for {number}×2^"
            f"{10 * ('kmgtp'.index(unit[0]) + 1)}, or the exact bytes; expected {examples})"
        )
    return f" (expected {examples})"


def _checked(value: int, name: str, text: str | int) -> int:
    if value < 0:
        raise BadSize("negative", parameter=name, value=text)
    if value > MAX_BYTES:
        raise BadSize(f"more than {MAX_BYTES:,} bytes", parameter=name, value=text)
    return value


_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def format_bytes(n_bytes: int) -> str:
    """1536 -> '1.5 KiB'. Exact bytes are shown beside this wherever a user may copy the value."""
    value = float(n_bytes)
    for unit in _UNITS:
        if abs(value) < 1024 or unit == _UNITS[-1]:
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def format_bytes_exact(n_bytes: int) -> str:
    """Bytes in the largest IEC unit that holds them exactly, as `parse_bytes` reads them
    back: 23068672 -> '22MiB', 4096 -> '4KiB', 1000 -> '1000'."""
    for shift, unit in ((40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")):
        if n_bytes and n_bytes % (1 << shift) == 0:
            return f"{n_bytes >> shift}{unit}"
    return str(n_bytes)
