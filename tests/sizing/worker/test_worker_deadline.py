"""A worker that stops answering (a vendor deadlock, a stopped process) never hangs hipmem:
past the per-call deadline the call is reported as timed out, naming it, the worker is killed
and restarted, and the other calls are answered. Real libraries, a really stopped worker."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from hipmem.sizing.errors import SizingUsageError, WorkerTimedOut
from hipmem.sizing.session import SizingSession
from hipmem.sizing.worker.process import (
    DEADLINE_ENV,
    DEFAULT_CALL_DEADLINE_S,
    deadline_from_environment,
)


def test_a_stopped_worker_times_out_and_the_other_calls_are_answered(rocm: Path) -> None:
    with SizingSession("MI210", call_deadline_s=3) as session:
        first = session.size("dgetrf:m=64,n=64")
        worker = session._worker._proc
        assert worker is not None
        os.kill(worker.pid, signal.SIGSTOP)  # alive, never answering
        started = time.monotonic()
        hung, after = session.size_many(["dgetrf:m=128,n=128", "dgetrs:n=64,nrhs=1"])
        waited = time.monotonic() - started
        assert 3 <= waited < 60
        assert hung.status == "timed_out" and isinstance(hung.error, WorkerTimedOut)
        assert str(hung.error).startswith(
            "rocsolver_dgetrf:m=128,n=128: the vendor library did not answer within 3 s and "
            "was killed"
        )
        assert worker.returncode == -signal.SIGKILL
        assert after.bytes is not None and after.status != "timed_out"
        assert first.bytes is not None
        assert session.session_bytes >= first.bytes


def test_the_deadline_is_configurable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DEADLINE_ENV, raising=False)
    assert deadline_from_environment() == DEFAULT_CALL_DEADLINE_S >= 30
    monkeypatch.setenv(DEADLINE_ENV, "2.5")
    assert deadline_from_environment() == 2.5
    for bad in ("0", "-1", "soon", "inf", "nan"):
        monkeypatch.setenv(DEADLINE_ENV, bad)
        with pytest.raises(SizingUsageError, match=f"{DEADLINE_ENV}="):
            deadline_from_environment()
