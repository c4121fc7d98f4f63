"""Start and talk to the size-query worker (`sizing/worker.py`), and survive its crashes.

The worker is started with the virtual device's stand-in HIP runtime first on its library
path (unless the device is real), and through the offline libraries' own dynamic loader when
they need a newer glibc than the host's. When a vendor library aborts or segfaults, the
worker dies; `size()` reports that call as crashed and starts a fresh worker for the rest.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from sizing.errors import SizingError, WorkerCrashed
from sizing.library_locator import Libraries
from sizing.shim_build import build_shim
from sizing.virtual_device import Device

WORKER_SCRIPT = Path(__file__).with_name("worker.py")
_USER_WORKSPACE_VARIABLES = ("ROCBLAS_DEVICE_MEMORY_SIZE", "ROCBLAS_STREAM_ORDER_ALLOC")


@dataclass(frozen=True)
class Crash:
    """The worker died while a call ran: how, and what it printed last."""

    how: str  # e.g. "aborted (SIGABRT)"
    last_words: str  # the last line the vendor library printed, if any


@dataclass(frozen=True)
class WorkerInfo:
    versions: dict[str, str]
    optional_symbols: dict[str, bool]
    handle_default_bytes: int


class WorkerProcess:
    """One running worker; `size()` transparently restarts it after a crash."""

    def __init__(self, libraries: Libraries, device: Device) -> None:
        self.libraries = libraries
        self.device = device
        self._command, self._env = self._launch_spec()
        self._proc: subprocess.Popen[str] | None = None
        self._stderr: IO[str] | None = None
        self.info = self._start()

    def _launch_spec(self) -> tuple[list[str], dict[str, str]]:
        # The user's own workspace settings would change what a fresh handle allocates,
        # which the worker reports as the library default: leave them out.
        env = {k: v for k, v in os.environ.items() if k not in _USER_WORKSPACE_VARIABLES}
        search = [str(self.libraries.lib_dir)]
        if self.device.virtual:
            if self.libraries.include_dir is None:
                raise SizingError(
                    "no HIP headers to build the virtual device with; run `hipmem rocm fetch`"
                )
            shim = build_shim(self.libraries.include_dir, self.libraries.hip_soname)
            search.insert(0, str(shim))
            env |= self.device.environment()
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
        hello = self._read()
        if hello is None or not hello.get("ready"):
            crash = self._crash()
            detail = hello.get("error") if hello else f"{crash.how}: {crash.last_words}"
            raise WorkerCrashed(f"the vendor libraries could not be loaded: {detail}")
        return WorkerInfo(
            hello["versions"], hello["optional_symbols"], hello["handle_default_bytes"]
        )

    def _read(self) -> dict[str, Any] | None:
        assert self._proc is not None and self._proc.stdout is not None
        line = self._proc.stdout.readline()
        return json.loads(line) if line else None

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
        index = 0
        while index < len(calls):
            self._send({"op": "size", "calls": calls[index:]})
            while index < len(calls):
                answer = self._read()
                if answer is None:
                    crash = self._crash()
                    self.info = self._start()  # before yielding: the caller may stop reading
                    index += 1
                    yield crash
                    break
                yield answer
                index += 1

    def run(self, calls: list[dict[str, Any]]) -> list[dict[str, Any] | Crash]:
        """Make each call for real, outside a size query (so rocBLAS logs it); its status."""
        answers: list[dict[str, Any] | Crash] = []
        for call in calls:
            self._send({"op": "run", "calls": [call]})
            answer = self._read()
            if answer is None:
                answers.append(self._crash())
                self.info = self._start()
            else:
                answers.append(answer)
        return answers

    def rocsolver_log(self, action: str) -> int:
        """rocsolver_log_begin() / _end() in the worker ("begin" or "end"): its status."""
        self._send({"op": "rocsolver_log", "action": action})
        answer = self._read()
        if answer is None:
            raise WorkerCrashed(f"the vendor library {self._crash().how} in rocsolver_log_{action}")
        return int(answer["status"])

    def session(self, calls: list[dict[str, Any]]) -> dict[str, Any] | Crash:
        """All calls inside one library size query: the library's own running maximum."""
        self._send({"op": "session", "calls": calls})
        answer = self._read()
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
