"""A file that cannot be written to the end (a full disk, a quota, a file-size limit) is one
line naming the file and the system's reason, exit 1, and leaves nothing behind: no partial
file, no temporary file, the old file as it was (hipmem/_core/atomic_write.py).

The failures are real ones, made without filling the machine's disk: a file-size limit
(RLIMIT_FSIZE) on the hipmem process makes the kernel refuse every write past it (EFBIG,
"File too large"; Python ignores SIGXFSZ, so the write fails rather than the process), and
where user namespaces are allowed, a 16 KiB tmpfs mounted in one gives a real ENOSPC ("No
space left on device")."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_run import environment

REPO = Path(__file__).resolve().parents[2]
LOG = REPO / "samples" / "serve-first-2000.csv.gz"  # 2,000 rows: its CSV is ~100 KB
SNAPSHOT = REPO / "tests" / "data" / "snapshots" / "multistream.pickle.gz"
FSIZE_BYTES = 4096  # every output below is larger
OLD = b"the file as it was before\n"

# (the arguments before the output, the output's name)
WRITERS: list[tuple[list[str], str]] = [
    (["log", "convert", str(LOG), "-o"], "out.csv"),
    (["log", "convert", str(LOG), "-o"], "out.csv.gz"),
    (["log", "inspect", str(LOG), "--plot"], "peak.png"),
    (["log", "inspect", str(LOG), "--html"], "page.html"),
    (["replay", str(LOG), "-r", "host", "--plot"], "replay.svg"),
]


def _hipmem_under_fsize_limit(args: list[str]) -> subprocess.CompletedProcess[str]:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (FSIZE_BYTES, FSIZE_BYTES))

    return subprocess.run(
        [sys.executable, "-m", "hipmem.cli.main", *args],
        capture_output=True, text=True, env=environment(), cwd=REPO, timeout=300,
        preexec_fn=limit, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module", autouse=True)
def _font_cache() -> None:
    """matplotlib's font cache made here, so that the limited process only reads it."""
    pytest.importorskip("matplotlib.font_manager")


@pytest.mark.parametrize(("before", "name"), WRITERS, ids=[w[1] for w in WRITERS])
def test_a_write_refused_midway_names_the_file_and_keeps_the_old_one(
    tmp_path: Path, before: list[str], name: str
) -> None:
    out = tmp_path / name
    out.write_bytes(OLD)
    done = _hipmem_under_fsize_limit([*before, str(out)])
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines()[-1] == f"Error: cannot write {str(out)!r}: File too large"
    assert "internal error" not in done.stderr
    assert out.read_bytes() == OLD  # the old file whole
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no temporary file left


def test_a_new_file_refused_midway_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "new.csv"
    done = _hipmem_under_fsize_limit(["log", "convert", str(SNAPSHOT), "-o", str(out)])
    assert done.returncode == 1
    assert "File too large" in done.stderr
    assert list(tmp_path.iterdir()) == []  # not one .devN file, not one temporary


def _can_mount_tmpfs() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs none /mnt"],
                           capture_output=True, check=False)  # fmt: skip
    return probe.returncode == 0


@pytest.mark.skipif(not _can_mount_tmpfs(), reason="no user namespaces to mount a tmpfs in")
@pytest.mark.parametrize("name", ["out.csv", "peak.png"])
def test_a_full_disk_is_said_as_the_system_says_it(tmp_path: Path, name: str) -> None:
    full = tmp_path / "full"
    full.mkdir()
    out = full / name
    option = "-o" if name.endswith(".csv") else "--plot"
    command = "log convert" if option == "-o" else "log inspect"
    script = (
        f"mount -t tmpfs -o size=16k none {full} && "
        f'exec "{sys.executable}" -m hipmem.cli.main {command} {LOG} {option} {out}'
    )
    done = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script],
        capture_output=True, text=True, env=environment(), cwd=REPO, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines()[-1] == (
        f"Error: cannot write {str(out)!r}: No space left on device"
    )


def _hipmem_to(stdout: Path | None, args: list[str]) -> subprocess.CompletedProcess[str]:
    """`hipmem ARGS` with stdout to the file `stdout`, or to a pipe (None)."""
    with Path(os.devnull if stdout is None else stdout).open("w") as sink:
        return subprocess.run(
            [sys.executable, "-m", "hipmem.cli.main", *args],
            stdout=subprocess.PIPE if stdout is None else sink,
            stderr=subprocess.PIPE, text=True, env=environment(), cwd=REPO, timeout=300,
            check=False,
        )  # fmt: skip


def test_the_standard_output_on_a_full_disk_is_named() -> None:
    done = _hipmem_to(Path("/dev/full"), ["log", "inspect", str(LOG), "--json"])
    assert done.returncode == 1
    assert done.stderr == "Error: cannot write the standard output: No space left on device\n"


def test_an_answer_written_to_a_full_disk_is_not_kept_as_the_answer(rocm72: Path) -> None:
    # A repeated size is answered from the cache of answers: what the full disk made of the
    # first one (exit 1, an error line) must not become the answer to the next.
    args = ["size", "--rocm", "7.2", "-d", "MI300X", "rocsolver_dgetrf:m=777,n=333"]
    for _ in range(2):
        full = _hipmem_to(Path("/dev/full"), args)
        assert full.returncode == 1
        assert full.stderr.endswith(
            "Error: cannot write the standard output: No space left on device\n"
        )
    piped = _hipmem_to(None, args)
    assert (piped.returncode, piped.stderr) == (0, ""), piped.stderr
    assert "rocsolver_dgetrf" in piped.stdout
