"""Minimum versus optimal workspace: run a call with less than it asks for, and see.

rocBLAS's size query returns what a call wants, which for some routines is the optimal size:
given less, trsm returns `perf_degraded` and runs a slower algorithm, and f16/bf16 `gemm_ex`
with f32 compute quietly picks a kernel that needs no workspace. So for the routines in
`sizing/calls/executed_routines.py`, hipmem executes the call on the virtual device (kernels launch
as no-ops and are recorded by name) with a user workspace of S bytes and bisects S:

- `minimum_bytes`: the least S with status success or perf_degraded;
- `optimal_bytes`: the least S with success and the same kernels as with ample workspace;
- between them the call runs degraded: `perf_degraded`, or `slower_kernel` (gemm: success,
  other kernels).

Honesty over coverage: a run that reports a HIP error (a kernel not found, a bad handle),
launches nothing, or returns anything but success at ample workspace makes the answer
"unknown" with the reason, never a size. A workspace of exactly 0 cannot be set
(`rocblas_set_workspace(h, p, 0)` hands the memory back to rocBLAS): 1 byte stands for none,
and a call that runs with 1 byte has a minimum of 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hipmem._core.bisection import least_holding
from hipmem._core.byte_sizes import MiB

from .calls.executed_routines import buffers, execution_reason
from .calls.spec import Call
from .rocm.catalog import Catalog
from .rocm.code_objects import TENSILE_PATH_VARIABLE, placeholder_library
from .rocm.locator import Libraries
from .worker.process import Crash, WorkerProcess
from .worker.virtual_device import Device

STATUS_SUCCESS = 0
STATUS_MEMORY_ERROR = 5
STATUS_INTERNAL_ERROR = 6
STATUS_PERF_DEGRADED = 7
RUNNABLE = (STATUS_SUCCESS, STATUS_PERF_DEGRADED)
DEFAULT_EXECUTE_DEADLINE_S = 30.0  # one executed call; the slowest seen took 0.26 s
_AMPLE_EXTRA_BYTES = 1 * MiB


@dataclass(frozen=True)
class Minimum:
    """A call's least workable and least optimal workspace, or why they are not known."""

    method: str  # "measured", "query" (not executed: the query is the minimum) or "unknown"
    minimum_bytes: int | None
    optimal_bytes: int | None
    between_status: str | None  # how it runs from minimum to optimal; None when they are equal
    reason: str
    executions: int = 0  # calls made to find it

    def as_dict(self) -> dict[str, Any]:
        return {
            "minimum_bytes": self.minimum_bytes,
            "optimal_bytes": self.optimal_bytes,
            "between_status": self.between_status,
            "minimum_method": self.method,
            "minimum_reason": self.reason,
        }


@dataclass(frozen=True)
class Run:
    """One executed call: its status and the kernels it launched."""

    status: int
    kernels: tuple[str, ...]


class Unknown(Exception):
    """An inner failure showed: no size can be trusted."""


class MinimumFinder:
    """Executes calls in a worker of its own (pointed at placeholder code objects)."""

    def __init__(
        self,
        libraries: Libraries,
        device: Device,
        catalog: Catalog,
        *,
        deadline_s: float = DEFAULT_EXECUTE_DEADLINE_S,
        tensile_library: Path | None = None,
    ) -> None:
        """`tensile_library`: the folder rocBLAS loads gemm kernels from; by default the
        fetched `.dat` files with placeholder code objects (sizing/rocm/code_objects.py)."""
        self.libraries = libraries
        self.tensile_library = tensile_library
        self.device = device
        self.catalog = catalog
        self.deadline_s = deadline_s
        self._worker: WorkerProcess | None = None

    def close(self) -> None:
        if self._worker is not None:
            self._worker.close()
            self._worker = None

    def _process(self) -> WorkerProcess:
        if self._worker is None:
            env = {}
            library = self.tensile_library
            if library is None and self.libraries.tensile_dir is not None:
                library = placeholder_library(self.libraries.tensile_dir)
            if library is not None:
                env[TENSILE_PATH_VARIABLE] = str(library)
            self._worker = WorkerProcess(self.libraries, self.device, extra_env=env)
        return self._worker

    def find(self, call: Call, query_bytes: int) -> Minimum:
        """The call's minimum and optimal workspace; `query_bytes` is its size query."""
        executed, reason = execution_reason(call)
        if not executed:
            return Minimum("query", query_bytes, query_bytes, None, reason)
        if not self.device.virtual:
            return Minimum("query", query_bytes, query_bytes, None,
                           "executing calls needs the virtual device")  # fmt: skip
        encoded = self._encode(call)
        runs: dict[int, Run] = {}

        def run(workspace_bytes: int) -> Run:
            if workspace_bytes not in runs:
                runs[workspace_bytes] = self._run(encoded, max(1, workspace_bytes))
            return runs[workspace_bytes]

        try:
            return self._search(run, query_bytes, reason, runs)
        except Unknown as err:
            return Minimum("unknown", None, None, None, str(err), len(runs))

    def _search(
        self, run: Callable[[int], Run], query_bytes: int, reason: str, runs: dict[int, Run]
    ) -> Minimum:
        ample = run(2 * query_bytes + _AMPLE_EXTRA_BYTES)
        if ample.status != STATUS_SUCCESS:
            hint = " (a kernel was not found)" if ample.status == STATUS_INTERNAL_ERROR else ""
            raise Unknown(
                f"with ample workspace the call returned {self._status_name(ample.status)}{hint}"
            )
        if not ample.kernels:
            if query_bytes == 0:  # a quick return (an empty matrix): nothing to run or size
                return Minimum("query", 0, 0, None, "the call launches nothing: it needs no "
                               "workspace", len(runs))  # fmt: skip
            raise Unknown("the call launched no kernel: its path was not run")

        def runnable(size: int) -> bool:
            status = run(size).status
            if status not in (*RUNNABLE, STATUS_MEMORY_ERROR):
                raise Unknown(f"with {size:,} bytes the call returned {self._status_name(status)}")
            return status in RUNNABLE

        def optimal(size: int) -> bool:
            done = run(size)
            return done.status == STATUS_SUCCESS and done.kernels == ample.kernels

        upper = query_bytes if optimal(query_bytes) else 2 * query_bytes + _AMPLE_EXTRA_BYTES
        minimum = _least(runnable, upper)
        optimum = _least(optimal, upper, lower=minimum)
        between = None
        if optimum > minimum:
            status = run(minimum).status
            between = "perf_degraded" if status == STATUS_PERF_DEGRADED else "slower_kernel"
        return Minimum("measured", minimum, optimum, between, reason, len(runs))

    def _run(self, encoded: dict[str, Any], workspace_bytes: int) -> Run:
        answer = self._process().execute(encoded, workspace_bytes, self.deadline_s)
        if isinstance(answer, Crash):
            what = "timed out" if answer.timed_out else "the vendor library " + answer.how
            raise Unknown(f"{what} when executed with {workspace_bytes:,} bytes"
                          + (f": {answer.last_words}" if answer.last_words else ""))  # fmt: skip
        if "missing_symbol" in answer or "not_virtual" in answer:
            raise Unknown("the call cannot be executed here")
        if answer["set_workspace_status"] != STATUS_SUCCESS:
            raise Unknown(f"rocblas_set_workspace({workspace_bytes:,} bytes) failed")
        if answer["hip_errors"]:
            raise Unknown(
                f"the library hit {answer['hip_errors']} HIP error(s) inside the call with "
                f"{workspace_bytes:,} bytes, first {answer['first_error']}"
            )
        return Run(int(answer["status"]), tuple(answer["kernels"]))

    def _encode(self, call: Call) -> dict[str, Any]:
        args = call.worker_args(self.catalog)
        sizes = buffers(call)
        for index, param in enumerate(call.routine.params):
            if param.kind == "pointer":
                args[index] = sizes[param.name].encoded()
        return {"function": call.routine.name, "library": call.routine.library, "args": args}

    def _status_name(self, status: int) -> str:
        names = {value: name for name, value in self.catalog.enums["rocblas_status"].items()}
        return f"rocblas_status_{names.get(status, status)}"


def _least(works: Callable[[int], bool], upper: int, *, lower: int = 0) -> int:
    """The least size in [lower, upper] for which `works` holds (it holds at `upper`);
    assumes once it holds, it holds for every larger size (what rocBLAS's sizing does)."""
    if works(lower):
        return lower
    return least_holding(works, lower, upper)
