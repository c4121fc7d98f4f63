"""The wheel users get, for the distribution's tests (test_packaging.py, test_docs_installed.py):
built once per test run, whichever test and whichever test worker asks first."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run_building(*command: str | Path, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """`command`, captured, with byte-compiling on (it is part of a build and of an install)."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": ""}
    return subprocess.run(
        [str(c) for c in command], capture_output=True, text=True, env=env, **kwargs
    )  # type: ignore[call-overload]


@contextmanager
def one_build_at_a_time(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A build of the checkout makes its sdist in a folder of the checkout itself: two at once
    (two test workers) take each other's files. The lock is in the folder the workers share."""
    lock = tmp_path_factory.getbasetemp().parent / "hipmem-build.lock"
    with lock.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of this test run that every test worker sees (under xdist, the parent of the
    workers' own folders; without it, the run's own folder: its parent outlives the run)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist first, then the wheel from it (build's default): what a user's pip does, and
    no stale `build/` folder of the checkout (an older layout's modules) can leak in.

    One build per run (about 8 s of a core, and two modules each built one): the first worker
    to get the lock builds, checks and then publishes the wheel in the run's shared folder; a
    worker that comes later finds it there. A build that fails its checks publishes nothing,
    so each worker that needs the wheel fails the same way."""
    shared = _run_folder(tmp_path_factory) / "hipmem-wheel"
    with one_build_at_a_time(tmp_path_factory):
        published = sorted(shared.glob("hipmem-*.whl"))
        if published:
            (found,) = published
            return found
        out = tmp_path_factory.mktemp("dist")
        done = run_building(sys.executable, "-m", "build", "-o", out, REPO, cwd=REPO)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        warnings = [
            line for line in (done.stdout + done.stderr).splitlines() if "warning" in line.lower()
        ]
        assert not warnings, "\n".join(warnings)
        (built,) = out.glob("hipmem-*.whl")
        shared.mkdir()
        return Path(shutil.copy2(built, shared / built.name))
