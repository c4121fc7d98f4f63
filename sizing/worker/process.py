"""Start and talk to the size-query worker (`sizing/worker/worker.py`), and survive its crashes.

The worker is started with the virtual device's stand-in HIP runtime first on its library
path (unless the device is real), and through the offline libraries' own dynamic loader when
they need a newer glibc than the host's. When a vendor library aborts or segfaults, the
worker dies; `size()` reports that call as crashed and starts a fresh worker for the rest.

Every answer has a deadline (`call_deadline_s`, default `DEFAULT_CALL_DEADLINE_S`, or
`HIPMEM_CALL_DEADLINE_S`): a worker that does not answer in time (a vendor deadlock, a
stopped process) is killed and restarted, and that call is reported as timed out, naming
it, while the other calls are still answered. The default is far above the slowest real
call (a first hipBLASLt heuristic takes about 1 s on a loaded 2-core machine).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ..errors import SizingError, SizingUsageError, WorkerCrashed
from ..rocm.locator import Libraries
from .shim_build import build_shim
from .virtual_device import Device

WORKER_SCRIPT = Path(__file__).with_name("worker.py")
DEFAULT_CALL_DEADLINE_S = 60.0
DEADLINE_ENV = "HIPMEM_CALL_DEADLINE_S"
_START_DEADLINES = 5  # loading the libraries may take several call deadlines
_PIPE_BYTES = 1 << 20
_FEW_ANSWERS, _GATHER_S = 256, 0.002  # sweeps: read answers in batches, not one by one
_MAX_ANSWER_BYTES = 64 << 20  # a line from the worker longer than this is not an answer
_USER_WORKSPACE_VARIABLES = ("ROCBLAS_DEVICE_MEMORY_SIZE", "ROCBLAS_STREAM_ORDER_ALLOC")
# hipBLASLt reads its solution data from here instead of `hipblaslt/library` beside itself:
# a user's setting would make it read another build's data than the one hipmem checked and names.
_USER_DATA_PATH_VARIABLES = ("HIPBLASLT_TENSILE_LIBPATH",)


@dataclass(frozen=True)
class Crash:
    """The worker died while a call ran: how, and what it printed last."""

    how: str  # e.g. "aborted (SIGABRT)"
    last_words: str  # the last line the vendor library printed, if any
    timed_out: bool = False  # no answer within the deadline: killed, not crashed


@dataclass(frozen=True)
class WorkerInfo:
    versions: dict[str, str]
    optional_symbols: dict[str, bool]
    handle_default_bytes: int


class _NoAnswer(Exception):
    """The worker did not answer within the deadline."""


def deadline_from_environment() -> float:
    """HIPMEM_CALL_DEADLINE_S when set (a positive number of seconds), else the default."""
    text = os.environ.get(DEADLINE_ENV, "").strip()
    if not text:
        return DEFAULT_CALL_DEADLINE_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < float("inf"):
        raise SizingUsageError(f"{DEADLINE_ENV}={text!r}: expected a positive number of seconds")
    return seconds


def _widen_pipe(pipe: IO[str] | None) -> None:
    """Let the worker write a whole sweep chunk's answers (~300 KB) while the parent builds
    the next chunk: 1 MiB, the most an unprivileged Linux process may ask. Elsewhere, or
    refused, the pipe keeps its size (the worker then waits for the parent sooner)."""
    set_size = getattr(fcntl, "F_SETPIPE_SZ", None)
    if pipe is None or set_size is None:
        return
    with contextlib.suppress(OSError):
        fcntl.fcntl(pipe.fileno(), set_size, _PIPE_BYTES)


class WorkerProcess:
    """One running worker; `size()` transparently restarts it after a crash."""

    def __init__(
        self,
        libraries: Libraries,
        device: Device,
        *,
        call_deadline_s: float | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.libraries = libraries
        self.device = device
        self.extra_env = extra_env or {}  # e.g. ROCBLAS_TENSILE_LIBPATH for executed calls
        self.call_deadline_s = call_deadline_s or deadline_from_environment()
        self._command, self._env = self._launch_spec()
        self._proc: subprocess.Popen[str] | None = None
        self._stderr: IO[str] | None = None
        self._unread = b""  # bytes from the worker after the last full line
        self.info = self._start()

    def _launch_spec(self) -> tuple[list[str], dict[str, str]]:
        # The user's own workspace settings would change what a fresh handle allocates,
        # which the worker reports as the library default: leave them out.
        left_out = (*_USER_WORKSPACE_VARIABLES, *_USER_DATA_PATH_VARIABLES)
        env = {k: v for k, v in os.environ.items() if k not in left_out}
        search = [str(self.libraries.lib_dir)]
        if self.device.virtual:
            if self.libraries.include_dir is None:
                raise SizingError(
                    "no HIP headers to build the virtual device with; run `hipmem rocm fetch`"
                )
            shim = build_shim(self.libraries.include_dir, self.libraries.hip_soname)
            search.insert(0, str(shim))
            env |= self.device.environment()
        env |= self.extra_env
        script = [
            str(WORKER_SCRIPT),
            str(self.libraries.rocblas),
            str(self.libraries.rocsolver or ""),
        ]
        # -I -S: no site-packages, no PYTHON* variables: the worker needs only the stdlib.
        python = [os.path.realpath(sys.executable), "-I", "-S"]
        if self.libraries.loader is not None:
            return [
                str(self.libraries.loader),
                "--library-path",
                ":".join(search),
                *python,
                *script,
            ], env
        env["LD_LIBRARY_PATH"] = ":".join([*search, env.get("LD_LIBRARY_PATH", "")]).rstrip(":")
        return [*python, *script], env

    def _start(self) -> WorkerInfo:
        # Lives as long as the worker: closed in close(). It keeps the vendor's last words.
        self._stderr = tempfile.TemporaryFile("w+")  # noqa: SIM115
        self._proc = subprocess.Popen(
            self._command,
            env=self._env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            bufsize=1,
        )
        self._unread = b""
        _widen_pipe(self._proc.stdout)
        try:
            hello = self._read(self.call_deadline_s * _START_DEADLINES)
        except _NoAnswer:
            self._kill()
            raise WorkerCrashed(
                "the vendor libraries did not load within "
                f"{self.call_deadline_s * _START_DEADLINES:g} s ({DEADLINE_ENV} sets the deadline)"
            ) from None
        if hello is None or not hello.get("ready"):
            crash = self._crash()
            detail = hello.get("error") if hello else f"{crash.how}: {crash.last_words}"
            raise WorkerCrashed(f"the vendor libraries could not be loaded: {detail}")
        return WorkerInfo(
            hello["versions"], hello["optional_symbols"], hello["handle_default_bytes"]
        )

    def _read(self, deadline_s: float | None = None) -> dict[str, Any] | None:
        """The next answer, None when the worker died; _NoAnswer past the deadline.

        Reads the pipe's bytes itself (select, then os.read) so that waiting has a deadline."""
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        give_up = time.monotonic() + (deadline_s or self.call_deadline_s)
        while b"\n" not in self._unread:
            remaining = give_up - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise _NoAnswer
            data = os.read(fd, 1 << 16)
            if not data:
                return None
            self._unread += data
            if len(self._unread) > _MAX_ANSWER_BYTES:
                return None  # not the worker's protocol: treat it as dead
        line, _, self._unread = self._unread.partition(b"\n")
        return json.loads(line)

    def _kill(self) -> None:
        """Kill a worker that stopped answering (SIGKILL works on a stopped one too)."""
        assert self._proc is not None
        self._proc.kill()
        self._proc.wait()

    def _timed_out(self, what: str) -> Crash:
        self._kill()
        self.info = self._start()
        how = f"did not answer within {self.call_deadline_s:g} s and was killed"
        return Crash(
            how=how, last_words=f"{DEADLINE_ENV} sets the deadline ({what})", timed_out=True
        )

    def _send(self, request: dict[str, Any]) -> bool:
        assert self._proc is not None and self._proc.stdin is not None
        try:
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
        except BrokenPipeError:
            return False
        return True

    def _crash(self) -> Crash:
        """Reap the dead worker and describe its death."""
        assert self._proc is not None and self._stderr is not None
        code = self._proc.wait()
        self._stderr.seek(0)
        lines = [line.strip() for line in self._stderr.read().splitlines() if line.strip()]
        if code < 0:
            name = signal.Signals(-code).name
            how = {"SIGABRT": "aborted", "SIGSEGV": "crashed"}.get(
                name, "was killed"
            ) + f" ({name})"
        else:
            how = f"exited with code {code}"
        # rocBLAS says why in an "error" line, then lists files; prefer that line.
        errors = [line for line in lines if "error" in line.lower()]
        return Crash(how=how, last_words=(errors or lines or [""])[-1])

    def size(self, calls: list[dict[str, Any]]) -> Iterator[dict[str, Any] | Crash]:
        """One answer per call, in order; a Crash for a call during which the worker died."""
        return self._one_by_one(len(calls), lambda first: {"op": "size", "calls": calls[first:]})

    def _one_by_one(
        self, count: int, request: Callable[[int], dict[str, Any]]
    ) -> Iterator[dict[str, Any] | Crash]:
        """Send `request(first)` for the items from `first` on, then one answer per item, in
        order; for the item during which the worker died (or ran past its deadline), a Crash,
        and a fresh worker gets the items after it."""
        index = 0
        while index < count:
            self._send(request(index))
            while index < count:
                try:
                    answer = self._read()
                except _NoAnswer:
                    index += 1
                    yield self._timed_out("per call")
                    break
                if answer is None:
                    crash = self._crash()
                    self.info = self._start()  # before yielding: the caller may stop reading
                    index += 1
                    yield crash
                    break
                yield answer
                index += 1

    def size_points(
        self, call: dict[str, Any], slots: list[int], points: list[list[Any]]
    ) -> Iterator[dict[str, Any] | Crash]:
        """`size` for one call at many points (a sweep): the call is sent once with the
        values that change at each point, and the answers are read in bulk. The request goes
        out now, so the caller can prepare the next one while the worker answers; then one
        answer per point, in order; a Crash for the point during which the worker died.
        Read every answer (or stop right after a Crash) before the next request."""
        self._send({"op": "size_points", "call": call, "slots": slots, "points": points})
        return self._point_answers(call, slots, points)

    def _point_answers(
        self, call: dict[str, Any], slots: list[int], points: list[list[Any]]
    ) -> Iterator[dict[str, Any] | Crash]:
        index = 0
        while index < len(points):
            if index > 0:  # the worker died: a fresh one gets the points not answered
                rest = points[index:]
                self._send({"op": "size_points", "call": call, "slots": slots, "points": rest})
            while index < len(points):
                try:
                    answers = self._read_available()
                except _NoAnswer:
                    index += 1
                    yield self._timed_out("per call")
                    break
                if answers is None:
                    crash = self._crash()
                    self.info = self._start()  # before yielding: the caller may stop reading
                    index += 1
                    yield crash
                    break
                index += len(answers)
                yield from answers
                if len(answers) < _FEW_ANSWERS and index < len(points):
                    # The worker is slower than reading (gemm_ex looks up its kernels):
                    # let answers gather instead of spinning on one at a time, which costs
                    # the CPU the worker could use.
                    time.sleep(_GATHER_S)

    def _read_available(self) -> list[dict[str, Any]] | None:
        """Every answer the worker has written so far (at least one; each had the per-call
        deadline), or None when it died before writing another."""
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        give_up = time.monotonic() + self.call_deadline_s
        while b"\n" not in self._unread:
            remaining = give_up - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise _NoAnswer
            data = os.read(fd, 1 << 20)
            if not data:
                return None
            self._unread += data
            if len(self._unread) > _MAX_ANSWER_BYTES:
                return None  # not the worker's protocol: treat it as dead
        complete, _, self._unread = self._unread.rpartition(b"\n")
        answers: list[dict[str, Any]] = json.loads(b"[" + complete.replace(b"\n", b",") + b"]")
        return answers

    def hipblaslt(
        self, library: Path, calls: list[dict[str, Any]]
    ) -> Iterator[dict[str, Any] | Crash]:
        """hipBLASLt heuristics (`op: hipblaslt` in the worker), one answer per call in order;
        a Crash for a call during which the worker died (it is restarted for the rest)."""
        return self._one_by_one(
            len(calls),
            lambda first: {"op": "hipblaslt", "library": str(library), "calls": calls[first:]},
        )

    def run(self, calls: list[dict[str, Any]]) -> list[dict[str, Any] | Crash]:
        """Make each call for real, outside a size query (so rocBLAS logs it); its status."""
        answers: list[dict[str, Any] | Crash] = []
        for call in calls:
            self._send({"op": "run", "calls": [call]})
            try:
                answer = self._read()
            except _NoAnswer:
                answers.append(self._timed_out("per call"))
                continue
            if answer is None:
                answers.append(self._crash())
                self.info = self._start()
            else:
                answers.append(answer)
        return answers

    def execute(
        self, call: dict[str, Any], workspace_bytes: int, deadline_s: float
    ) -> dict[str, Any] | Crash:
        """Make one call for real with a workspace of `workspace_bytes` (sizing/minimum.py);
        past `deadline_s` the worker is killed and restarted and a timed-out Crash returned."""
        self._send({"op": "execute", "call": call, "workspace_bytes": workspace_bytes})
        try:
            answer = self._read(deadline_s)
        except _NoAnswer:
            self._kill()
            self.info = self._start()
            how = f"did not finish within {deadline_s:g} s"
            return Crash(how=how, last_words="", timed_out=True)
        if answer is None:
            crash = self._crash()
            self.info = self._start()
            return crash
        return answer

    def rocsolver_log(self, action: str) -> int:
        """rocsolver_log_begin() / _end() in the worker ("begin" or "end"): its status."""
        self._send({"op": "rocsolver_log", "action": action})
        try:
            answer = self._read()
        except _NoAnswer:
            raise WorkerCrashed(
                f"rocsolver_log_{action}: {self._timed_out('per call').how}"
            ) from None
        if answer is None:
            raise WorkerCrashed(f"the vendor library {self._crash().how} in rocsolver_log_{action}")
        return int(answer["status"])

    def session(self, calls: list[dict[str, Any]]) -> dict[str, Any] | Crash:
        """All calls inside one library size query: the library's own running maximum."""
        self._send({"op": "session", "calls": calls})
        try:  # every call again: a deadline for each
            answer = self._read(self.call_deadline_s * max(1, len(calls)))
        except _NoAnswer:
            return self._timed_out("the session query")
        if answer is None:
            crash = self._crash()
            self.info = self._start()
            return crash
        return answer

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._send({"op": "exit"})
            try:
                self._proc.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.communicate()
        if self._stderr is not None:
            self._stderr.close()
        self._proc = None
