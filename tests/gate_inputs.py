"""Damaged and hostile inputs for the gate tests, generated from the committed snapshots and
logs, and the in-process `hipmem` the tests drive (no cold interpreter per call)."""

from __future__ import annotations

import gzip
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.cli_run import hipmem as run_hipmem
from tests.snapshot_reference import SNAPSHOTS, load

# PyTorch's allocator variables: unset in every call, so the environment cannot change a verdict.
_ALLOC_CONF_VARIABLES = ("PYTORCH_HIP_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")


@dataclass
class Ran:
    code: int
    stdout: str
    stderr: str


def hipmem(*args: str, **env: str) -> Ran:
    """`hipmem ARGS` in this process, through the same entry point and error boundary as the
    console script (tests/cli_run.py): its exit code and what it printed."""
    done = run_hipmem(*args, unset=_ALLOC_CONF_VARIABLES, **env)
    return Ran(done.returncode, done.stdout, done.stderr)


def assert_named_failure(ran: Ran, *, codes: tuple[int, ...] = (1, 2)) -> str:
    """One `Error: ...` line (codes 1 or 2), never an internal error or a traceback; the line."""
    assert ran.code in codes, (ran.code, ran.stdout[-500:], ran.stderr[-2000:])
    assert "internal error" not in ran.stderr, ran.stderr
    assert "Traceback" not in ran.stderr + ran.stdout
    lines = [line for line in ran.stderr.splitlines() if line.startswith("Error: ")]
    assert len(lines) == 1, ran.stderr
    return lines[0]


def snapshot(name: str = "oom") -> dict[str, Any]:
    """A committed snapshot as plain Python objects, to damage."""
    return load(SNAPSHOTS / f"{name}.pickle.gz")


def write_snapshot(path: Path, data: object) -> Path:
    with gzip.open(path, "wb") as out:
        pickle.dump(data, out)
    return path


def tracked_entries(data: dict[str, Any], device: int = 0) -> list[int]:
    """Indexes (0-based) of the trace entries the replay reads (alloc, free_completed, ...)."""
    tracked = {"alloc", "free_completed", "oom", "segment_alloc", "segment_free",
               "segment_map", "segment_unmap"}  # fmt: skip
    trace = data["device_traces"][device]
    return [i for i, entry in enumerate(trace) if entry.get("action") in tracked]


def readme_fail_example(tmp_path: Path) -> Path:
    """The README's FAIL example (train-default under expandable segments on 560 MiB), with
    the one allocation it refuses stored with a float size, in its alloc and its frees: read
    leniently, that allocation vanishes and the FAIL turns into ok."""
    data = snapshot("train-default")
    trace = data["device_traces"][0]
    refused = trace[2002]  # entry 2003, the allocation the README names
    assert refused["action"] == "alloc" and refused["size"] == 135_680_000
    for entry in trace[2002:2010]:
        if entry["addr"] == refused["addr"] and entry["size"] == refused["size"]:
            entry["size"] = float(entry["size"])
    return write_snapshot(tmp_path / "float-size.pickle.gz", data)


def raw_pickle(path: Path, body: bytes) -> Path:
    """A hand-written pickle (protocol 4) `body`, for what `pickle.dump` never writes."""
    path.write_bytes(b"\x80\x04" + body + b".")
    return path


def deeply_nested_size(depth: int) -> bytes:
    """A snapshot pickle whose one alloc entry has a size nested `depth` lists deep (built
    with EMPTY_LIST/APPEND, so pickling it costs no recursion)."""

    def text(value: str) -> bytes:
        return b"\x8c" + bytes([len(value)]) + value.encode()

    nested = b"]" * depth + b"a" * (depth - 1)
    entry = (b"}(" + text("action") + text("alloc") + text("addr") + b"K\x01" + text("size")
             + nested + text("stream") + b"K\x00" + text("time_us") + b"K\x01u")  # fmt: skip
    return b"}(" + text("device_traces") + b"](](" + entry + b"eeu"


def compressed_csv(path: Path, text: str) -> Path:
    path.write_bytes(gzip.compress(text.encode()) if path.suffix == ".gz" else text.encode())
    return path


CSV_HEADER = "Thread,Time,Action,Pointer,Size,Stream\n"


def csv_rows(count: int, *, size: str | None = None) -> str:
    """`count` allocate rows (a `size` of another form makes every one unreadable)."""
    return "".join(
        f"1,10:00:00.{i:06d},allocate,{0x1000 * (i + 1):#x},{size or 4096},0x0\n"
        for i in range(count)
    )
