"""A .csv.gz inflates a piece at a time: its bounds are those of the plain file."""

from __future__ import annotations

import sys
import zlib
from pathlib import Path

from tests.bounded import run_bounded

HIPMEM = [sys.executable, "-m", "hipmem.cli.main"]


def test_a_gigabyte_line_in_a_megabyte_of_gzip_stops_at_the_line_bound(tmp_path: Path) -> None:
    path = tmp_path / "long-line.csv.gz"
    pack = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts = [pack.compress(b"Thread,Time,Action,Pointer,Size,Stream\n1,2,")]
    block = b"x" * (1 << 20)
    parts += [pack.compress(block) for _ in range(1024)]
    parts.append(pack.compress(b"\n") + pack.flush())
    path.write_bytes(b"".join(parts))
    assert path.stat().st_size < 2_000_000
    # Before, one 1 MiB read of compressed input inflated to 1 GB at once: 4.3 GB in all.
    # Under the default bound (2 GiB of address space, ~0.65 GiB of it Python and the
    # libraries): 1.5 GiB left no room on some runs of the whole suite.
    done = run_bounded([*HIPMEM, "log", "inspect", str(path)])
    assert done.returncode == 1, done.stderr
    assert "long-line.csv.gz:2: a line with no end after 64 MiB" in done.stderr
    assert "internal error" not in done.stderr


def test_out_of_memory_is_one_line_saying_so_not_an_internal_error() -> None:
    """Where a machine's memory ends before a bound does, the user reads what happened."""
    from hipmem.cli.error_boundary import describe

    code, message, _ = describe(MemoryError())
    assert code == 1 and message is not None
    assert message.startswith("out of memory:") and "internal error" not in message
