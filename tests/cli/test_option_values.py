"""Values a hostile or careless user gives options and variables (5,000 digits, names the
system refuses, escape sequences, NaN and friends, files where folders belong): each is one
line naming the option or variable and what is wrong, exit 2 for usage and 1 otherwise,
never an internal error, never a raw escape, never the 5,000 characters echoed back."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest

from hipmem._core.errors import MAX_SHOWN_CHARS
from hipmem.sizing.workspace_check import ULONG_MAX, strtoul
from tests.cli_run import hipmem

REPO = Path(__file__).resolve().parents[2]
LOG = str(REPO / "samples" / "serve-first-2000.csv.gz")
SNAPSHOT = str(REPO / "tests" / "data" / "snapshots" / "oom.pickle.gz")
CALL = "rocsolver_dgetrf:m=64,n=64"
DIGITS = "9" * 5000
ESC = "a\x1b[31mred"
LONG_NAME = "/tmp/" + "x" * 300  # one name past the system's 255 bytes
ALLOC_VARIABLES = ("PYTORCH_HIP_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")


class Case(NamedTuple):
    args: list[str]
    env: dict[str, str]
    code: int
    line: str  # how the one line starts, after "Error: "


# Each case is made in the test's own folder (some need a file where a folder belongs).
CASES: dict[str, Callable[[Path], Case]] = {
    "--torch digits": lambda _: Case(
        ["replay", LOG, "-r", "torch", "--torch", DIGITS],
        {},
        2,
        "--torch: 5,000 characters is not a release (at most 40; a release looks like 2.14",
    ),
    "HIPMEM_TORCH digits": lambda _: Case(
        ["replay", LOG, "-r", "torch"],
        {"HIPMEM_TORCH": DIGITS},
        2,
        "HIPMEM_TORCH: 5,000 characters is not a release",
    ),
    "HIPMEM_TORCH nan": lambda _: Case(
        ["replay", LOG, "-r", "torch"],
        {"HIPMEM_TORCH": "nan"},
        2,
        "HIPMEM_TORCH='nan': not a PyTorch version (e.g. 2.14 or 2.14.1)",
    ),
    "HIPMEM_TORCH too old": lambda _: Case(
        ["replay", LOG, "-r", "torch"],
        {"HIPMEM_TORCH": "0"},
        2,
        "HIPMEM_TORCH='0': hipmem drives PyTorch 2.4.0 and newer",
    ),
    "torch fetch --torch digits": lambda _: Case(
        ["torch", "fetch", "--torch", DIGITS], {}, 2, "--torch: 5,000 characters"
    ),
    "torch fetch HIPMEM_TORCH digits": lambda _: Case(
        ["torch", "fetch"], {"HIPMEM_TORCH": DIGITS}, 2, "HIPMEM_TORCH: 5,000 characters"
    ),
    "--torch escape": lambda _: Case(
        ["torch", "fetch", "--torch", ESC], {}, 2, "--torch 'a\\x1b[31mred': not a PyTorch"
    ),
    "--rmm digits": lambda _: Case(
        ["replay", LOG, "-r", "pool", "--backend", "virtual", "--rmm", DIGITS],
        {},
        2,
        "--rmm: 5,000 characters is not a release (at most 40; a release looks like 25.4",
    ),
    "rmm fetch --rmm digits": lambda _: Case(
        ["rmm", "fetch", "--rmm", DIGITS], {}, 2, "--rmm: 5,000 characters"
    ),
    "--rocm digits": lambda _: Case(
        ["routines", "--rocm", DIGITS], {}, 2, "--rocm: 5,000 characters is not a release"
    ),
    "HIPMEM_ROCM digits": lambda _: Case(
        ["routines"], {"HIPMEM_ROCM": DIGITS}, 2, "HIPMEM_ROCM: 5,000 characters"
    ),
    "HIPMEM_ROCM unknown": lambda _: Case(
        ["routines"],
        {"HIPMEM_ROCM": "99.2"},
        2,
        "HIPMEM_ROCM='99.2': hipmem has catalogs of ROCm",
    ),
    "--headroom digits": lambda _: Case(
        ["recommend", "-d", "MI210", CALL, "--headroom", DIGITS],
        {},
        2,
        "--headroom '9999999999999999999999999999999999999999'... (5,000 characters): a "
        "number needs a unit",
    ),
    "HIPMEM_ROCM_LIBDIR too long": lambda _: Case(
        ["size", "-d", "MI210", CALL],
        {"HIPMEM_ROCM_LIBDIR": LONG_NAME},
        1,
        f"HIPMEM_ROCM_LIBDIR={LONG_NAME[:40]!r}... (305 characters): no librocblas there",
    ),
    "log name too long": lambda _: Case(
        ["log", "inspect", LONG_NAME],
        {},
        2,
        f"log file {LONG_NAME[:40]!r}... (305 characters): File name too long",
    ),
    "--output name too long": lambda _: Case(
        ["log", "convert", LOG, "-o", LONG_NAME + ".csv"],
        {},
        2,
        f"--output {LONG_NAME[:40]!r}... (309 characters): cannot be written: File name too",
    ),
    "--plot name too long": lambda _: Case(
        ["replay", LOG, "-r", "host", "--plot", LONG_NAME + ".png"],
        {},
        2,
        f"--plot {LONG_NAME[:40]!r}... (309 characters): cannot be written",
    ),
    "HIPMEM_SNAPSHOT_READER": lambda _: Case(
        ["log", "inspect", SNAPSHOT],
        {"HIPMEM_SNAPSHOT_READER": ESC},
        2,
        "HIPMEM_SNAPSHOT_READER='a\\x1b[31mred': expected 'python' or 'native'",
    ),
    "explain --cap 0": lambda _: Case(
        ["explain", SNAPSHOT, "--cap", "0"], {}, 2, "--cap 0: must be more than 0"
    ),
    "explain --alloc-conf": lambda _: Case(
        ["explain", SNAPSHOT, "--alloc-conf", "max_split_size_mb:1e400"],
        {},
        2,
        "--alloc-conf 'max_split_size_mb:1e400': max_split_size_mb: '1e400' is not a whole "
        "number of MiB",
    ),
    "check --alloc-conf": lambda _: Case(
        ["check", "--from-snapshot", SNAPSHOT, "--alloc-conf", "backend:" + ESC],
        {},
        2,
        "--alloc-conf 'backend:a\\x1b[31mred': expected PyTorch's allocator settings",
    ),
    "PYTORCH_CUDA_ALLOC_CONF": lambda _: Case(
        ["check", "--from-snapshot", SNAPSHOT],
        {"PYTORCH_CUDA_ALLOC_CONF": "garbage_collection_threshold:inf"},
        2,
        "PYTORCH_CUDA_ALLOC_CONF='garbage_collection_threshold:inf': "
        "garbage_collection_threshold: 'inf' is not a number between 0 and 1",
    ),
    "-r torch:max_split_size": lambda _: Case(
        ["replay", SNAPSHOT, "-r", "torch:max_split_size=10MiB"],
        {},
        2,
        "--resource 'torch:max_split_size=10MiB': max_split_size=10MiB: max_split_size_mb: "
        "'10' is below 21 MiB",
    ),
    "-r torch:roundup_power2_divisions": lambda _: Case(
        ["replay", SNAPSHOT, "-r", "torch:roundup_power2_divisions=-1"],
        {},
        2,
        "--resource 'torch:roundup_power2_divisions=-1': roundup_power2_divisions: '-1' is "
        "not a power of 2",
    ),
    "-r binning:min_exp digits": lambda _: Case(
        ["replay", LOG, "-r", f"binning:min_exp={DIGITS}"],
        {},
        2,
        f"--resource {('binning:min_exp=' + DIGITS)[:40]!r}... (5,016 characters): min_exp: "
        f"expected an integer, got {DIGITS[:40]!r}... (5,000 characters)",
    ),
    "--scheduler": lambda _: Case(
        ["fleet", LOG, "-r", "host", "--scheduler", "nan"],
        {},
        2,
        "--scheduler 'nan': not a Dask scheduler address (tcp://host:8786)",
    ),
    "-d digits": lambda _: Case(
        ["size", "-d", DIGITS, CALL],
        {},
        2,
        f"unknown device {DIGITS[:40]!r}... (5,000 characters) (`hipmem devices` lists them)",
    ),
    "--backend digits (typer's choice)": lambda _: Case(
        ["replay", LOG, "-r", "host", "--backend", DIGITS],
        {},
        2,
        f"--backend {DIGITS[:40]!r}... (5,000 characters): not one of auto, cuda, hip",
    ),
    "XDG_CACHE_HOME a file": lambda tmp: Case(
        ["rocm", "where"],
        {"XDG_CACHE_HOME": str(tmp / "file")},
        1,
        f"XDG_CACHE_HOME={tmp / 'file'} (the cache is $XDG_CACHE_HOME/hipmem; "
        f"HIPMEM_CACHE_DIR sets another): {tmp / 'file'} is not a directory",
    ),
    "HOME a file": lambda tmp: Case(
        ["rocm", "where"],
        {"HOME": str(tmp / "file"), "XDG_CACHE_HOME": ""},
        1,
        f"the cache folder {tmp / 'file' / '.cache' / 'hipmem'} (HOME's ~/.cache/hipmem; "
        f"HIPMEM_CACHE_DIR sets another): {tmp / 'file'} is not a directory",
    ),
    "HIPMEM_CACHE_DIR a file": lambda tmp: Case(
        ["rocm", "where"],
        {"HIPMEM_CACHE_DIR": str(tmp / "file")},
        1,
        f"HIPMEM_CACHE_DIR={tmp / 'file'} is not a directory",
    ),
    "HIPMEM_CACHE_DIR under a file": lambda tmp: Case(
        ["rocm", "where"],
        {"HIPMEM_CACHE_DIR": str(tmp / "file" / "cache")},
        1,
        f"HIPMEM_CACHE_DIR={tmp / 'file' / 'cache'}: {tmp / 'file'} is not a directory",
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_each_value_is_one_line_naming_the_option_or_variable(name: str, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("a file where a folder belongs\n")
    case = CASES[name](tmp_path)
    unset = ("HIPMEM_CACHE_DIR", "HIPMEM_TORCH", "HIPMEM_ROCM", *ALLOC_VARIABLES)
    done = hipmem(*case.args, cwd=REPO, unset=unset, HIPMEM_OFFLINE="1", **case.env)
    lines = done.stderr.splitlines()
    assert (done.returncode, len(lines)) == (case.code, 1), done.stderr
    assert lines[0].startswith("Error: " + case.line), lines[0]
    assert "\x1b" not in done.stderr and "internal error" not in done.stderr
    assert len(lines[0]) < 2 * MAX_SHOWN_CHARS + 300  # 5,000 characters never echoed


def test_strtoul_of_thousands_of_digits_saturates_without_int() -> None:
    # glibc's strtoul: past ULONG_MAX it saturates; leading zeros are only zeros.
    assert strtoul(DIGITS).value == ULONG_MAX
    assert strtoul("0" * 5000 + "7").value == 7
    assert strtoul("-" + DIGITS).value == ULONG_MAX
    assert strtoul("0x" + "f" * 5000).value == ULONG_MAX
