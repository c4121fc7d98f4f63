"""The replay driver is built with the std::string ABI of the allocator it drives
(replay/virtual/build.py: string_abi_flags). PyTorch 2.4.1's wheel uses the pre-C++11 ABI;
built with the default one, the driver crashed reading the allocator's state at a refusal
("free(): invalid pointer", a segfault in `explain`), which the recorded-conditions inference
of every out-of-memory snapshot does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hipmem.replay.virtual.build import string_abi_flags
from tests.cli_run import hipmem
from tests.snapshot_reference import SNAPSHOTS

REPO = Path(__file__).resolve().parents[3]


def test_the_oldest_release_is_built_with_the_old_abi_and_the_newest_with_the_new(
    torch_allocators: dict[str, Any],
) -> None:
    oldest, newest = torch_allocators["oldest"], torch_allocators["newest"]
    assert string_abi_flags(oldest.lib_dir / "libc10.so") == ["-D_GLIBCXX_USE_CXX11_ABI=0"]
    assert string_abi_flags(newest.lib_dir / "libc10.so") == []


def test_the_oldest_release_reads_its_state_at_a_refusal(torch_allocators: dict[str, Any]) -> None:
    version = torch_allocators["oldest"].version
    done = hipmem("explain", str(SNAPSHOTS / "oom.pickle.gz"), "--device", "MI300X",
                  "--torch", version, cwd=REPO, COLUMNS="200")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Refused: " in done.stdout and "recorded-failed" in done.stdout
