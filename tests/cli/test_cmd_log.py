"""`hipmem log inspect` driven as a user would (tests/cli_run.py): exact exit codes and output."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.cli_run import hipmem as run_hipmem
from tests.log_reference import DATA_LOGS, REAL_LOGS, figures, read_rows
from tests.terminal import unwrapped

REPO = Path(__file__).parents[2]


def hipmem(*args: str) -> subprocess.CompletedProcess[str]:
    return run_hipmem(*args, cwd=REPO)


@pytest.mark.parametrize("path", REAL_LOGS, ids=lambda p: p.name)
def test_json_has_the_promised_keys_and_figures(path: Path) -> None:
    done = hipmem("log", "inspect", str(path), "--json")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    report = json.loads(done.stdout)  # stdout is JSON and nothing else
    rows, _ = read_rows(path)
    expected = figures(rows)
    assert report["events"] == len(rows)
    assert report["allocate_rows"] == sum(r.action == "allocate" for r in rows)
    assert report["free_rows"] == sum(r.action == "free" for r in rows)
    assert report["failure_rows"] == sum(r.action == "allocate failure" for r in rows)
    assert report["peak_live_bytes"] == expected.peak_bytes
    assert report["peak"]["line"] == expected.peak_line
    assert report["live_at_end"] == {
        "count": expected.live_end_count,
        "bytes": expected.live_end_bytes,
    }
    assert report["zero_byte_allocations"] == expected.zero_byte_allocations
    assert report["threads"] == len({r.thread for r in rows})
    assert report["streams"] == len({r.stream for r in rows})
    assert report["anomalies"] == {
        name: len(expected.anomalies.get(name, [])) for name in report["anomalies"]
    }
    assert report["skipped_rows"] == {"count": 0, "first": []}


def test_human_summary_names_peak_and_leaks() -> None:
    path = DATA_LOGS / "anomalies.csv"
    done = hipmem("log", "inspect", str(path))
    assert done.returncode == 0, done.stderr
    out = " ".join(done.stdout.split())  # prose wraps at 80 columns, piped too
    assert f"peak live: 9.8 KiB (10,000 B) at {path}:9 " in out
    assert "live at end (never freed): 1 allocation(s), 6.8 KiB (7,000 B)" in out
    assert "zero-byte allocations: 2 (1 never freed; not counted above)" in out
    assert "free_unknown_pointer" in out and "3, 12" in out


def test_lenient_warns_once_on_stderr_and_strict_fails() -> None:
    path = DATA_LOGS / "bad_rows.csv"
    lenient = hipmem("log", "inspect", str(path), "--json")
    assert lenient.returncode == 0
    assert lenient.stderr == (
        f"Warning: 9 unreadable entries skipped: {path}:3: size 'abc' is not a non-negative "
        f"integer; {path}:4: size '-5' is not a non-negative integer; {path}:5: pointer "
        "'0xZZ00' is not hex (0x...) or (nil); and 6 more (--strict makes this an error)\n"
    )
    report = json.loads(lenient.stdout)
    assert report["skipped_rows"]["count"] == 9
    assert [r["line"] for r in report["skipped_rows"]["first"]] == [3, 4, 5, 6, 7, 8, 10, 11, 12]
    strict = hipmem("log", "inspect", str(path), "--strict")
    assert strict.returncode == 1
    assert strict.stdout == ""
    assert strict.stderr == (
        f"Error: {path}:3: size 'abc' is not a non-negative integer (and 8 more bad rows)\n"
    )


def test_missing_file_is_exit_2(tmp_path: Path) -> None:
    done = hipmem("log", "inspect", str(tmp_path / "nope.csv"))
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"Error: log file '{tmp_path / 'nope.csv'}' does not exist\n"


def test_not_gzip_is_exit_1(tmp_path: Path) -> None:
    path = tmp_path / "log.csv.gz"
    path.write_bytes((DATA_LOGS / "anomalies.csv").read_bytes())
    done = hipmem("log", "inspect", str(path))
    assert (done.returncode, done.stderr) == (1, f"Error: {path}: named .gz but is not gzip data\n")


def test_bad_plot_suffix_is_rejected_before_loading(tmp_path: Path) -> None:
    plot = str(tmp_path / "x.jpg")
    done = hipmem("log", "inspect", str(tmp_path / "missing.csv"), "--plot", plot)
    assert done.returncode == 2
    assert done.stderr == (
        f"Error: --plot '{tmp_path / 'x.jpg'}': must end in .png or .svg (the suffix picks it)\n"
    )


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_plot_is_written_in_the_format_of_its_suffix(tmp_path: Path, suffix: str) -> None:
    target = tmp_path / f"timeline{suffix}"
    log = next(p for p in REAL_LOGS if p.name == "serve.csv.gz")
    done = hipmem("log", "inspect", str(log), "--plot", str(target), "--per-stream")
    assert done.returncode == 0, done.stderr
    # a status line, apart from the report
    assert f"plot written to {target}" in unwrapped(done.stderr)
    data = target.read_bytes()
    if suffix == ".png":
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        text = data.decode()
        assert text.startswith("<?xml") and "<svg" in text
        assert "peak" in text  # the peak is annotated
        assert "0x7f5f24003110" in text  # one line per stream, labelled
    assert [p.name for p in tmp_path.iterdir()] == [target.name]  # no temp file left behind


def test_several_files_and_device_naming(tmp_path: Path) -> None:
    for name in ("model.dev0.csv", "model.dev1.csv"):
        (tmp_path / name).write_bytes((DATA_LOGS / name).read_bytes())
    done = hipmem("log", "inspect", str(tmp_path / "model.csv"), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["sources"] == [str(tmp_path / "model.dev0.csv"), str(tmp_path / "model.dev1.csv")]
    rows = read_rows(DATA_LOGS / "model.dev0.csv")[0] + read_rows(DATA_LOGS / "model.dev1.csv")[0]
    assert report["events"] == len(rows)
    assert report["peak_live_bytes"] == figures(rows).peak_bytes


def test_sample_log_inspects() -> None:
    sample = REPO / "samples" / "serve-first-2000.csv.gz"
    done = hipmem("log", "inspect", str(sample), "--json")
    assert done.returncode == 0, done.stderr
    rows, bad = read_rows(sample)
    assert (len(rows), bad) == (2000, [])
    assert json.loads(done.stdout)["peak_live_bytes"] == figures(rows).peak_bytes
