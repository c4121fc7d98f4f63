"""The CI gate's reading of ROCBLAS_DEVICE_MEMORY_SIZE, against the C library's own strtoul,
and its verdicts against sizes from the real libraries through the virtual device."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hipmem.sizing.rocm.locator import locate
from hipmem.sizing.session import SessionResult, SizingSession
from hipmem.sizing.workspace_check import (
    ULONG_MAX,
    AmbiguousValue,
    IncompleteSizing,
    NotANumber,
    check,
    read_environment_setting,
    read_setting,
    strtoul,
)

CALLS = ["rocsolver_dgetrf:m=1024,n=1024", "rocsolver_dgetrs:n=1024,nrhs=1"]

_libc = ctypes.CDLL(None)
_libc.strtoul.restype = ctypes.c_ulong
_libc.strtoul.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p), ctypes.c_int]


def libc_strtoul(text: str) -> tuple[int, int]:
    """(value, bytes read) from this machine's glibc `strtoul(text, &end, 0)`."""
    buffer = ctypes.create_string_buffer(text.encode())
    end = ctypes.c_char_p()
    value = _libc.strtoul(buffer, ctypes.byref(end), 0)
    consumed = ctypes.cast(end, ctypes.c_void_p).value - ctypes.addressof(buffer)  # type: ignore[operator]
    return value, consumed


def consumed_bytes(text: str, consumed_chars: int) -> int:
    return len(text[:consumed_chars].encode())


# The characters that matter to strtoul, plus anything at all.
_NUMBERISH = st.text(alphabet=" \t\n\v\f\r+-0123456789abcdefxXbBM", max_size=30)
_ANY = st.text(max_size=30).filter(lambda s: "\x00" not in s)


@pytest.mark.parametrize(
    ("text", "value", "ignored"),
    [
        ("128M", 128, "M"),
        ("0x10", 16, ""),
        ("010", 8, ""),
        ("  42", 42, ""),
        ("-1", ULONG_MAX, ""),
        ("+5", 5, ""),
        ("0x", 0, "x"),
        ("08", 0, "8"),
        ("4732160 bytes", 4732160, " bytes"),
        ("99999999999999999999999", ULONG_MAX, ""),
        ("-99999999999999999999999", ULONG_MAX, ""),
    ],
)
def test_known_inputs_read_as_glibc_reads_them(text: str, value: int, ignored: str) -> None:
    result = strtoul(text)
    assert (result.value, result.ignored) == (value, ignored)
    assert libc_strtoul(text) == (value, consumed_bytes(text, result.consumed))


@pytest.mark.parametrize("text", ["", "   ", "abc", "-", "+x", "M128"])
def test_no_number_reads_nothing(text: str) -> None:
    result = strtoul(text)
    assert not result.is_number
    assert libc_strtoul(text) == (0, 0)


@settings(max_examples=2000, deadline=None)
@given(st.one_of(_NUMBERISH, _ANY))
def test_matches_libc_strtoul(text: str) -> None:
    ours = strtoul(text)
    assert libc_strtoul(text) == (ours.value, consumed_bytes(text, ours.consumed))


def _sid_strtoul(texts: list[str]) -> list[list[int]]:
    """`__isoc23_strtoul` of the glibc the offline rocBLAS was built against, run through its
    own loader (the host glibc predates C23's 0b prefix)."""
    libraries = locate()
    if libraries.loader is None:
        pytest.skip("the rocBLAS found here runs on the host glibc; no C23 strtoul to compare")
    script = (
        "import ctypes, json, sys\n"
        "libc = ctypes.CDLL('libc.so.6')\n"
        "f = libc.__isoc23_strtoul\n"
        "f.restype = ctypes.c_ulong\n"
        "f.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p), ctypes.c_int]\n"
        "out = []\n"
        "for text in json.load(sys.stdin):\n"
        "    buf = ctypes.create_string_buffer(text.encode())\n"
        "    end = ctypes.c_char_p()\n"
        "    value = f(buf, ctypes.byref(end), 0)\n"
        "    out.append([value, ctypes.cast(end, ctypes.c_void_p).value - ctypes.addressof(buf)])\n"
        "print(json.dumps(out))\n"
    )
    command = [str(libraries.loader), "--library-path", str(libraries.lib_dir)]
    command += [os.path.realpath(sys.executable), "-I", "-S", "-c", script]
    done = subprocess.run(
        command, input=json.dumps(texts), capture_output=True, text=True, check=True
    )
    answers: list[list[int]] = json.loads(done.stdout)
    return answers


def test_c23_mode_matches_the_glibc_rocblas_was_built_against() -> None:
    texts = ["0b101", "0B11", "-0b1", "0b", "0b2", "0x1f", "017", " 42", "128M", "0b1M", ""]
    texts += [f"{sign}0{p}{d}" for sign in ("", "-", " +") for p in "bBxX" for d in "019fz"]
    for text, (value, consumed) in zip(texts, _sid_strtoul(texts), strict=True):
        ours = strtoul(text, c23=True)
        assert (ours.value, consumed_bytes(text, ours.consumed)) == (value, consumed), text


def test_read_setting_notes_ignored_suffix_and_negative() -> None:
    setting = read_setting("128M", source="--value")
    assert setting.bytes == 128
    assert setting.notes == [
        "--value '128M' is read as 128 bytes: strtoul stops at 'M' "
        "(no unit suffixes; write plain decimal bytes)"
    ]
    assert read_setting("-1").bytes == ULONG_MAX
    assert "negative" in read_setting("-1").notes[0]


@pytest.mark.parametrize("text", [None, "", "  ", "0", "000", "0x0"])
def test_unset_empty_or_zero_means_managed(text: str | None) -> None:
    assert read_setting(text).managed


def test_the_environment_is_read_as_rocblas_reads_it_and_named_as_a_shell_does() -> None:
    setting = read_environment_setting({"ROCBLAS_DEVICE_MEMORY_SIZE": "128M"})
    assert setting.bytes == 128
    assert setting.notes[0].startswith("$ROCBLAS_DEVICE_MEMORY_SIZE '128M' is read as 128 bytes")
    assert read_environment_setting({}).managed
    with pytest.raises(NotANumber, match=r"^\$ROCBLAS_DEVICE_MEMORY_SIZE 'abc' is not a number"):
        read_environment_setting({"ROCBLAS_DEVICE_MEMORY_SIZE": "abc"})


def test_read_setting_refuses_non_numbers_and_ambiguous_values() -> None:
    with pytest.raises(NotANumber, match=r"^--value 'abc' is not a number"):
        read_setting("abc", source="--value")
    with pytest.raises(AmbiguousValue, match=r"reads as 5 .* and as 0 in older ones"):
        read_setting("0b101")


@pytest.fixture(scope="module")
def session(rocm: object) -> SessionResult:
    with SizingSession(device="MI210") as sizing:
        sizing.size_many(CALLS)
        return sizing.result()


def test_passes_at_exactly_the_session_size(session: SessionResult) -> None:
    outcome = check(read_setting(str(session.session_bytes)), session)
    assert outcome.passed
    assert outcome.needed_bytes == session.session_bytes
    assert outcome.misfits == []


def test_fails_one_byte_short_naming_the_largest_call(session: SessionResult) -> None:
    largest = max(session.calls, key=lambda r: r.bytes or 0)
    assert largest.bytes == session.session_bytes  # the session is its largest call
    value = session.session_bytes - 1
    outcome = check(read_setting(str(value)), session)
    assert not outcome.passed
    assert outcome.misfits == [largest]
    assert outcome.reason == (
        f"ROCBLAS_DEVICE_MEMORY_SIZE={value} is too small: {largest.call.label} needs "
        f"{largest.bytes:,} bytes (1 more)"
    )


def test_a_suffixed_value_fails_every_call_that_needs_more(session: SessionResult) -> None:
    outcome = check(read_setting("8MiB"), session)  # strtoul reads 8 bytes
    needing_more = [r for r in session.calls if (r.bytes or 0) > 8]
    assert not outcome.passed
    assert sorted(r.call.label for r in outcome.misfits) == sorted(
        r.call.label for r in needing_more
    )
    assert outcome.reason.endswith(f"; {len(needing_more) - 1} more call(s) do not fit either")


def test_managed_passes_and_more_than_the_device_fails(session: SessionResult) -> None:
    assert check(read_setting(None), session).passed
    too_big = session.device.memory_bytes + 1
    outcome = check(read_setting(str(too_big)), session)
    assert not outcome.passed
    assert "rocBLAS would try to allocate that much when a handle is created" in outcome.reason


def test_unsized_calls_give_no_verdict(session: SessionResult) -> None:
    broken = SessionResult(
        session.calls, session.session_bytes, session.device, session.library, session.calls[:1]
    )
    with pytest.raises(IncompleteSizing):
        check(read_setting("1"), broken)
