"""Sizes that wrapped inside the vendor library, sizes above the device, and options that
overflow (issue 12): never passed off as answers, never emitted, one line each. The real
libraries answer through the virtual device; runs are bounded (tests/bounded.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bounded import hipmem_bounded
from tests.conftest import cli_env

WRAPPED = "rocblas_dtrsm_strided_batched:m=2147483647,n=2147483647"
TOO_BIG = "rocblas_dtrsm:m=200000,n=200000"  # 320 GB of workspace: more than an MI210's 64 GiB
MEMORY = 8 << 30  # the worker maps the vendor libraries


def test_a_wrapped_size_is_implausible_not_an_answer(rocm: Path) -> None:
    done = hipmem_bounded("size", "-d", "MI210", WRAPPED, "--json", memory_bytes=MEMORY)
    assert done.returncode == 1
    [call] = json.loads(done.stdout)["calls"]
    assert call["status"] == "implausible" and call["bytes"] is None
    assert "a size that wrapped around inside the library (2**63 or more)" in call["error"]
    assert done.stderr.startswith(f"Error: {WRAPPED}: rocblas answered 18,446,")


def test_recommend_never_writes_a_wrapped_size(rocm: Path, tmp_path: Path) -> None:
    github_env = tmp_path / "env"
    done = hipmem_bounded(
        "recommend", "-d", "MI210", WRAPPED, "--format", "github",
        env=cli_env(GITHUB_ENV=str(github_env)), memory_bytes=MEMORY,
    )  # fmt: skip
    assert done.returncode == 1
    assert not github_env.exists() or github_env.read_text() == ""


def test_a_size_above_the_device_is_unsatisfiable_and_never_recommended(rocm: Path) -> None:
    done = hipmem_bounded("size", "-d", "MI210", TOO_BIG, "--json", memory_bytes=MEMORY)
    assert done.returncode == 0, done.stderr
    [call] = json.loads(done.stdout)["calls"]
    assert call["bytes"] == 320_204_800_000 and call["fits_device"] is False
    assert "unsatisfiable on that device" in done.stderr
    done = hipmem_bounded("recommend", "-d", "MI210", TOO_BIG, memory_bytes=MEMORY)
    assert done.returncode == 1
    assert done.stdout == ""
    assert "more than the MI210's 68,719,476,736 bytes of memory; nothing emitted" in done.stderr


def test_check_reads_a_huge_value_as_strtoul_saturates_and_fails_it(rocm: Path) -> None:
    done = hipmem_bounded(
        "check", "-d", "MI210", "dgetrf:m=64,n=64", "--value", "9" * 30, "--json",
        memory_bytes=MEMORY,
    )  # fmt: skip
    assert done.returncode == 1
    outcome = json.loads(done.stdout)
    assert outcome["value_bytes"] == 2**64 - 1
    assert "rocBLAS would try to allocate that much when a handle is created" in outcome["reason"]


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--headroom", "9223372036854775808B", "--headroom '9223372036854775808B': more than"),
        ("--headroom", "99999999999999999999999999999999999999999%", "more than 10,000%"),
        ("--align", "8589934592GiB", "--align '8589934592GiB': more than 9,223,372,036,854,7"),
        ("--align", "9" * 5000, "--align: 5000 digits, more than 9,223,372,036,854,775,807 bytes"),
    ],
)  # fmt: skip
def test_headroom_and_align_that_overflow_are_usage_errors(
    option: str, value: str, message: str
) -> None:
    done = hipmem_bounded("recommend", "-d", "MI210", "dgetrf:m=8,n=8", option, value)
    assert done.returncode == 2
    assert message in done.stderr and len(done.stderr.splitlines()) == 1


def test_github_files_are_written_both_or_neither(rocm: Path, tmp_path: Path) -> None:
    github_env = tmp_path / "env"
    github_env.write_text("EARLIER=1\n")
    done = hipmem_bounded(
        "recommend", "-d", "MI210", "dgetrf:m=64,n=64", "--format", "github",
        env=cli_env(GITHUB_ENV=str(github_env), GITHUB_OUTPUT="/dev/full"), memory_bytes=MEMORY,
    )  # fmt: skip
    assert done.returncode == 1
    assert "cannot append to $GITHUB_OUTPUT (/dev/full)" in done.stderr
    assert github_env.read_text() == "EARLIER=1\n"
