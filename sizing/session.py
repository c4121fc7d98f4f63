"""Size-query sessions: the public Python API of hipmem's sizing.

    from .session import SizingSession

    with SizingSession(device="MI210") as session:
        session.size("rocsolver_dgetrf:m=1024,n=1024")
        session.size("rocsolver_dgetrs", n=1024, nrhs=1)
        print(session.session_bytes)        # what one handle needs for all of them

Each call is sized alone (its own start/stop query) and the session size is asked of the
library itself: every successful call again inside one query on one handle, whose running
maximum rocBLAS keeps. Identical calls are sized once and counted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hipmem._core.progress import ProgressCallback

from .call_answers import CallAnswers
from .calls.result import CallResult
from .calls.spec import Call, Value, make_call, parse_call
from .device_choice import choose_device
from .errors import SizingError, SizingUsageError, WorkerCrashed
from .minimum import MinimumFinder
from .rocm.catalog import Catalog, load_catalog
from .rocm.locator import Libraries, MixedReleases, locate
from .rocm.releases import rocm_of_rocblas, rocm_of_rocsolver
from .sweeps.plan import SweptCall, plan_sweep
from .sweeps.range import DEFAULT_MAX_POINTS, Sweep
from .sweeps.result import SweepResult
from .sweeps.sweep import run_sweep
from .worker.process import Crash, WorkerInfo, WorkerProcess
from .worker.virtual_device import Device

MAX_COUNT = 2**63 - 1  # how often one call may be counted (an int64, as JSON readers hold it)
Counted = tuple[Call | str, int]


@dataclass
class LibraryInfo:
    rocm: str | None  # the ROCm release that answered, e.g. "7.2"
    rocblas_path: str
    rocsolver_path: str | None
    found_in: str
    versions: dict[str, str]
    optional_symbols: dict[str, bool]
    handle_default_bytes: int  # what a rocBLAS-managed handle allocates at creation
    place: str = ""  # where the libraries came from, as an answer says it (Libraries.place)

    def as_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


@dataclass
class SessionResult:
    calls: list[CallResult]
    session_bytes: int
    device: Device
    library: LibraryInfo
    failed: list[CallResult] = field(default_factory=list)
    sweeps: list[SweepResult] = field(default_factory=list)  # each one's maximum is in calls

    @property
    def session_minimum_bytes(self) -> int | None:
        """The largest minimum (a call whose minimum is unknown counts with its query), or
        None when minimums were not asked for."""
        if not any(result.minimum is not None for result in self.calls):
            return None
        sizes = [result.minimum_or_query_bytes for result in self.calls]
        return max((size for size in sizes if size is not None), default=0)

    def as_dict(self) -> dict[str, Any]:
        payload = {
            "session_bytes": self.session_bytes,
            "calls": [result.as_dict() for result in self.calls],
            "library": self.library.as_dict(),
            "device": self.device.as_dict(),
        }
        if self.sweeps:
            payload["sweeps"] = [swept.as_dict() for swept in self.sweeps]
        if self.session_minimum_bytes is not None:
            payload["session_minimum_bytes"] = self.session_minimum_bytes
        return payload


class SizingSession:
    """Size calls against the real libraries for one device. Close it (or use `with`)."""

    def __init__(
        self,
        device: str | Device | None = None,
        *,
        compute_units: int | None = None,
        rocm_dir: Path | None = None,
        catalog: Catalog | None = None,
        call_deadline_s: float | None = None,
        rocm: str | None = None,
        libraries: Libraries | None = None,
    ) -> None:
        """`rocm="7.2"` asks for that release; without it the local install answers, else
        the newest release in the cache (see sizing/rocm/locator.py). `call_deadline_s`: how
        long one call may take before the worker is killed and the call reported as timed out
        (default: HIPMEM_CALL_DEADLINE_S, else 60 s)."""
        self.device = choose_device(device, compute_units)
        self.libraries: Libraries = libraries or locate(rocm_dir, rocm)
        self.catalog = catalog or load_catalog(self.libraries.rocm)
        self._worker = WorkerProcess(self.libraries, self.device, call_deadline_s=call_deadline_s)
        self._answers = CallAnswers(
            self.catalog, self.libraries, self.device, self._worker.info.versions
        )
        self._results: dict[tuple[Any, ...], CallResult] = {}
        # Sweeps (sizing/sweeps/): every point's answer by its full argument values (bytes,
        # or the failed CallResult), and each sweep's result in the order sized.
        self._point_answers: dict[tuple[Any, ...], int | CallResult] = {}
        self._sweeps: list[SweepResult] = []
        self._minimum_finder: MinimumFinder | None = None
        try:
            _check_one_release(self.libraries, self._worker.info.versions)
        except SizingError:
            self.close()
            raise

    # -- context management -----------------------------------------------------------------
    def __enter__(self) -> SizingSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the workers; safe to call twice."""
        self._worker.close()
        if self._minimum_finder is not None:
            self._minimum_finder.close()

    # -- sizing -----------------------------------------------------------------------------
    def call(self, routine: str, **args: Value) -> Call:
        """A Call from a routine name and keyword arguments (`call("dgetrf", m=8, n=8)`)."""
        return make_call(routine, args, self.catalog)

    def size(self, call: Call | str, **args: Value) -> CallResult:
        """Size one call: a Call, `"dgetrf:m=8,n=8"`, or a name plus keyword arguments."""
        if isinstance(call, str):
            call = make_call(call, args, self.catalog) if args else parse_call(call, self.catalog)
        return self.size_many([call])[0]

    def size_many(
        self, calls: Iterable[Call | str | Counted], progress: ProgressCallback | None = None
    ) -> list[CallResult]:
        """Size calls in order; identical calls are sized once (their count goes up).

        An item may be `(call, count)`: a call made `count` times, counted as an integer (a
        log of a long run says 30,000,000 times; nothing is repeated that often here)."""
        pairs = [_counted(item, self.catalog) for item in calls]
        fresh: dict[tuple[Any, ...], Call] = {}
        fresh_counts: dict[tuple[Any, ...], int] = {}
        for call, count in pairs:
            key = call.key()
            if key in self._results:
                self._results[key].count = _add_counts(self._results[key].count, count, call)
            else:
                fresh.setdefault(key, call)
                fresh_counts[key] = _add_counts(fresh_counts.get(key, 0), count, call)
        self._size_fresh(list(fresh.values()), progress)
        for key, count in fresh_counts.items():
            self._results[key].count = count
        return [self._results[call.key()] for call, _ in pairs]

    def measure_minimum(
        self, results: Iterable[CallResult] | None = None, progress: ProgressCallback | None = None
    ) -> None:
        """Find each sized call's minimum and optimal workspace (`CallResult.minimum`) by
        executing it on the virtual device (sizing/minimum.py); calls that failed are left."""
        todo = [r for r in (self.results if results is None else results) if r.error is None]
        todo = [r for r in todo if r.minimum is None and r.bytes is not None]
        if self._minimum_finder is None:
            self._minimum_finder = MinimumFinder(self.libraries, self.device, self.catalog)
        for done, result in enumerate(todo, start=1):
            assert result.bytes is not None
            if progress is not None:  # a bisection takes up to ~30 executions: say which
                progress(done - 1, len(todo), f"measuring the minimum of {result.call.label}")
            result.minimum = self._minimum_finder.find(result.call, result.bytes)
            if progress is not None:
                progress(done, len(todo), "minimums measured")

    def _size_fresh(self, calls: list[Call], progress: ProgressCallback | None) -> None:
        encoded = [self._answers.request(call) for call in calls]
        answers = self._worker.size(encoded)
        for done, (call, answer) in enumerate(zip(calls, answers, strict=True), start=1):
            self._results[call.key()] = self._answers.result(call, answer)
            if progress is not None and (done % 256 == 0 or done == len(calls)):
                progress(done, len(calls), "")

    def status_name(self, status: int) -> str:
        return self._answers.status_name(status)

    # -- sweeps -----------------------------------------------------------------------------
    def sweep(
        self,
        call: str,
        *sweeps: str | Sweep,
        count: int = 1,
        max_points: int = DEFAULT_MAX_POINTS,
        progress: ProgressCallback | None = None,
        **args: Value,
    ) -> SweepResult:
        """Size a call at every point of a grid: `sweep("dtrsm_batched:m=64,n=64",
        "batch_count=1..64")`, or `sweep("dgetrf", "n=1..4096:64", m=4096)`. Sweeps are
        `ARG=RANGE` (`1..64`, `1..4096:64`, `1..65536*2`, `1,8,20,64`); several form a grid
        of at most `max_points` points. The point of the largest need joins the session's
        calls (so `result()`, `recommend` and `check` cover it)."""
        plan = plan_sweep(
            call, sweeps, self.catalog, given=args, count=count, max_points=max_points
        )
        return self.size_sweep(plan, progress)

    def size_sweep(self, plan: SweptCall, progress: ProgressCallback | None = None) -> SweepResult:
        """Size an already checked sweep (`hipmem.sizing.sweeps.plan.plan_sweep`). Points
        this session answered before (sized alone or in another sweep) are not asked again;
        the sweep keeps the answers it gets for the next one."""
        swept = run_sweep(
            plan,
            self._worker,
            self._answers,
            sized=self._results,
            point_answers=self._point_answers,
            progress=progress,
        )
        for joined in (swept.max_result(), swept.first_failure()):
            if joined is None:
                continue
            key = joined.call.key()
            if key in self._results:
                self._results[key].count = _add_counts(
                    self._results[key].count, joined.count, joined.call
                )
            else:
                self._results[key] = joined
        self._sweeps.append(swept)
        return swept

    @property
    def sweeps(self) -> list[SweepResult]:
        return list(self._sweeps)

    # -- results ----------------------------------------------------------------------------
    @property
    def results(self) -> list[CallResult]:
        return list(self._results.values())

    @property
    def versions(self) -> dict[str, str]:
        return self._worker.info.versions

    @property
    def session_bytes(self) -> int:
        """The library's running maximum over every call sized so far without error."""
        sized = [r.call for r in self._results.values() if r.error is None]
        if not sized:
            return 0
        answer = self._worker.session([self._answers.request(call) for call in sized])
        if isinstance(answer, Crash):
            raise WorkerCrashed(f"the vendor library {answer.how} during the session query")
        return int(answer["bytes"])

    def library_info(self) -> LibraryInfo:
        info: WorkerInfo = self._worker.info
        return LibraryInfo(
            rocm=self.libraries.rocm,
            rocblas_path=str(self.libraries.rocblas),
            rocsolver_path=str(self.libraries.rocsolver) if self.libraries.rocsolver else None,
            found_in=self.libraries.found_in,
            versions=info.versions,
            place=self.libraries.place,
            optional_symbols=info.optional_symbols,
            handle_default_bytes=info.handle_default_bytes,
        )

    def result(self) -> SessionResult:
        """Everything sized so far, with the session size."""
        results = self.results
        return SessionResult(
            calls=results,
            session_bytes=self.session_bytes,
            device=self.device,
            library=self.library_info(),
            failed=[r for r in results if r.error is not None],
            sweeps=self.sweeps,
        )


def size_calls(
    calls: Iterable[Call | str | Counted | SweptCall],
    device: str | Device | None = None,
    *,
    compute_units: int | None = None,
    rocm_dir: Path | None = None,
    progress: ProgressCallback | None = None,
    rocm: str | None = None,
    libraries: Libraries | None = None,
    minimum: bool = False,
) -> SessionResult:
    """Open a session, size every call (and every point of each SweptCall), and return the
    result (`rocm="7.2"`: that release). `minimum=True` also measures each call's minimum
    and optimal workspace (of a sweep, at its largest point)."""
    libraries = libraries or locate(rocm_dir, rocm)
    catalog = load_catalog(libraries.rocm)
    items = list(calls)
    swept = [item for item in items if isinstance(item, SweptCall)]
    pairs = [_counted(item, catalog) for item in items if not isinstance(item, SweptCall)]
    totals: dict[tuple[Any, ...], int] = {}
    for call, count in pairs:  # a count overflow is said before any library is loaded
        totals[call.key()] = _add_counts(totals.get(call.key(), 0), count, call)
    with SizingSession(device, compute_units=compute_units, libraries=libraries) as session:
        session.size_many(pairs, progress)
        for plan in swept:  # after the plain calls: points equal to one of them are not asked
            session.size_sweep(plan, progress)
        if minimum:
            session.measure_minimum(progress=progress)
        return session.result()


def _counted(item: Call | str | Counted, catalog: Catalog) -> tuple[Call, int]:
    call, count = item if isinstance(item, tuple) else (item, 1)
    if isinstance(call, str):
        call = parse_call(call, catalog)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_COUNT:
        raise SizingUsageError(
            f"{call.label}: count {count!r} is not a whole number 1..{MAX_COUNT}"
        )
    return call, count


def _add_counts(total: int, count: int, call: Call) -> int:
    if total + count > MAX_COUNT:
        raise SizingUsageError(
            f"{call.label}: counted more than {MAX_COUNT:,} times in all (2**63 - 1)"
        )
    return total + count


def _check_one_release(libraries: Libraries, versions: dict[str, str]) -> None:
    """What the loaded libraries report of themselves must be one release (belt and braces
    beside the locator's check of the files)."""
    rocblas = rocm_of_rocblas(versions.get("rocblas", ""))
    rocsolver = rocm_of_rocsolver(versions.get("rocsolver", ""))
    if rocblas and rocsolver and rocblas != rocsolver:
        raise MixedReleases(
            f"{libraries.lib_dir}: rocBLAS {versions['rocblas']} is ROCm {rocblas} but rocSOLVER "
            f"{versions['rocsolver']} is ROCm {rocsolver}; one release per directory"
        )
