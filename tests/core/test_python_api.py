"""`import hipmem` is the documented Python API, and the concepts both libraries share exist
once (hipmem._core: errors, byte_sizes, cache_root, atomic_write, progress)."""

from __future__ import annotations

import ast
import os
import stat
from pathlib import Path

import pytest

import hipmem
from hipmem._core.atomic_write import write_text_atomically
from hipmem._core.cache_root import CacheUnusable, cache_dir
from hipmem.replay.engine import native
from hipmem.replay.errors import ReplayError, ReplayUsageError
from hipmem.sizing.errors import SizingError, SizingUsageError
from tests.log_reference import DATA_LOGS, REAL_LOGS_DIR

REPO = Path(__file__).resolve().parents[2]


def test_load_log_takes_one_path_as_a_str_or_a_path() -> None:
    path = DATA_LOGS / "anomalies.csv"
    for given in (str(path), path, [path]):
        log = hipmem.load_log(given)
        assert log.sources == [str(path)]
        assert len(log.events) == 11


def test_sizing_and_replay_from_python(rocm: Path) -> None:
    with hipmem.SizingSession("MI210") as session:
        session.size("rocsolver_dgetrf:m=1024,n=1024")
        result = session.result()
    advice = hipmem.recommend(result)
    assert advice.rocblas_device_memory_size_bytes == result.session_bytes > 0
    log = hipmem.load_log(REAL_LOGS_DIR / "serve.csv.gz")
    report = hipmem.replay_log(log, hipmem.parse_spec("host"))
    assert report.peak_requested_bytes == hipmem.analyze(log).peak_live_bytes


def test_one_error_root_with_one_exit_code_scheme() -> None:
    assert issubclass(SizingError, hipmem.HipmemError)
    assert issubclass(ReplayError, hipmem.HipmemError)
    for usage in (SizingUsageError, ReplayUsageError):
        assert issubclass(usage, hipmem.UsageError) and usage("x").exit_code == 2
    assert SizingError("x").exit_code == ReplayError("x").exit_code == 1


def test_library_errors_name_parameters_not_flags() -> None:
    with pytest.raises(hipmem.UsageError) as caught:
        hipmem.ReplayOptions(threads="many").check()
    assert str(caught.value) == "threads='many': not one of logged, single"
    assert caught.value.for_flag("--threads") == "--threads 'many': not one of logged, single"


def test_one_cache_variable_for_everything_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HIPMEM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HIPMEM_CACHE", str(tmp_path / "other"))  # the replay core's old one
    assert cache_dir() == tmp_path / "cache"
    assert native._cache_dir() == tmp_path / "cache" / "replay-core"
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("HIPMEM_CACHE_DIR", str(tmp_path / "file"))
    with pytest.raises(CacheUnusable, match="is not a directory"):
        cache_dir()


def test_atomic_writes_follow_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        write_text_atomically(tmp_path / "out.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "out.txt").stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


# Each shared concept has one home; a second definition anywhere else is the drift this
# project had (two error roots, two byte grammars, four atomic writers, five progress types).
SHARED = {
    "parse_bytes": "hipmem/_core/byte_sizes.py",
    "format_bytes": "hipmem/_core/byte_sizes.py",
    "cache_dir": "hipmem/_core/cache_root.py",
    "atomic_output": "hipmem/_core/atomic_write.py",
    "ProgressCallback": "hipmem/_core/progress.py",
    "HipmemError": "hipmem/_core/errors.py",
}


def test_no_shared_concept_is_written_twice() -> None:
    folders = ("hipmem", "hipmem_cli", "sizing", "replay")
    found = (p for d in folders for p in (REPO / d).rglob("*.py"))
    # Each file has one path (the repository holds no links); resolve() keeps it so.
    sources = sorted({p.resolve() for p in found})
    for path in sources:
        tree = ast.parse(path.read_text())
        relative = path.relative_to(REPO.resolve()).as_posix()
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in SHARED:
                assert relative == SHARED[node.name], f"{relative} defines {node.name} again"
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "mkstemp":
                assert relative == "hipmem/_core/atomic_write.py", (
                    f"{relative} writes atomically again"
                )
            # cache_root.py names XDG_CACHE_HOME (platformdirs reads it) in its messages
            named_by_the_root = (getattr(node, "value", None), relative) == (
                "XDG_CACHE_HOME",
                SHARED["cache_dir"],
            )
            if (
                isinstance(node, ast.Constant)
                and node.value in ("HIPMEM_CACHE", "XDG_CACHE_HOME")
                and not named_by_the_root
            ):
                raise AssertionError(f"{relative} reads a second cache variable")


def test_the_replay_package_is_a_package_and_replay_log_the_function() -> None:
    # No package doubles as a function: a fresh process asking for `hipmem.replay` before
    # importing it hears where the function is; once imported it is the package.
    import subprocess
    import sys

    asked = subprocess.run(
        [sys.executable, "-c", "import hipmem; hipmem.replay"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert asked.returncode == 1
    assert "the replay function is hipmem.replay_log" in asked.stderr
    import hipmem.replay.engine.run

    assert not callable(hipmem.replay)
    assert hipmem.replay_log is hipmem.replay.engine.run.replay_log
