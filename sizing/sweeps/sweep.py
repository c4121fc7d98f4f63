"""Sizing a sweep: one call sized at every point of its grid, in one worker session.

    with SizingSession("MI210") as session:
        swept = session.sweep("rocblas_dtrsm_batched:m=64,n=64", "batch_count=1..64")
    swept.max_bytes, swept.max_text(), swept.steps()

The plan (`plan.py`) is checked first; this module asks the worker, `result.py` holds what
it answered.

Speed: the call is checked once, at the grid's first point. At each point only the swept
arguments and the defaults that depend on them (`lda = max(1, n)`, ...) are recomputed
(`points.py`), and the worker is sent the call once, then only the values that change
(`size_points`). A point is asked once per session: answers are kept by the call's full
argument values, so overlapping sweeps, and calls sized before, are not asked again.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Mapping
from itertools import islice
from typing import Any

from hipmem._core.progress import ProgressCallback

from ..call_answers import CallAnswers
from ..calls.result import WRAPPED_BYTES, CallResult
from ..calls.spec import Value
from ..worker.process import Crash, WorkerProcess
from .plan import SweptCall
from .points import PointMaker
from .range import grid_points
from .result import KEPT_FAILURES, MAX_CRASHES, NOT_SIZED, SweepResult

_CHUNK_POINTS = 8192  # points per worker request: bounded memory, and progress to show
KEPT_ANSWERS = 2_000_000  # point answers a session keeps to avoid asking twice
_UNSETTLED = ("crashed", "timed_out")  # answers never kept: asking again may succeed

# A point's answer kept by its full argument values: its bytes, or the failed CallResult.
PointAnswers = dict[tuple[Any, ...], int | CallResult]


class _Recorder:
    """Fills a SweepResult as answers come."""

    def __init__(self, plan: SweptCall, memory_bytes: int, maker: PointMaker) -> None:
        total = plan.point_count
        self.result = SweepResult(
            plan=plan,
            device_memory_bytes=memory_bytes,
            bytes_at=array("q", [NOT_SIZED]) * total,
            status_at=array("H", [0]) * total,
            statuses=["not_sized"],
            point_maker=maker,
        )
        self._status_index = {"not_sized": 0}

    def sized(self, index: int, n_bytes: int, status: str) -> None:
        self.result.bytes_at[index] = n_bytes
        self.result.status_at[index] = self._status(status)

    def failed(self, index: int, failure: CallResult) -> None:
        self.result.status_at[index] = self._status(failure.status)
        self.result.failed_count += 1
        if len(self.result.failures) < KEPT_FAILURES:
            self.result.failures[index] = failure

    def _status(self, name: str) -> int:
        if name not in self._status_index:
            self._status_index[name] = len(self.result.statuses)
            self.result.statuses.append(name)
        return self._status_index[name]


class _Known:
    """What the session already knows of a point: answers of earlier sweeps' points
    (`point_answers`, kept up to KEPT_ANSWERS), and calls sized alone (`sized`)."""

    def __init__(
        self, sized: Mapping[tuple[Any, ...], CallResult], point_answers: PointAnswers
    ) -> None:
        self.sized = sized
        self.point_answers = point_answers

    def get(self, maker: PointMaker, key: tuple[Any, ...], values: dict[str, Value]) -> Any:
        known = self.point_answers.get(key)
        if known is None and self.sized:
            earlier = self.sized.get(maker.call_key(values))
            if earlier is not None and earlier.status not in _UNSETTLED:
                known = earlier.bytes if earlier.error is None else earlier
        return known

    def remember(self, key: tuple[Any, ...], answer: int | CallResult) -> None:
        """Keep a point's answer for the session, up to KEPT_ANSWERS points (about 200 bytes
        each); past that, a point asked again is asked again rather than memory growing."""
        if len(self.point_answers) < KEPT_ANSWERS:
            self.point_answers[key] = answer


def run_sweep(
    plan: SweptCall,
    worker: WorkerProcess,
    answers: CallAnswers,
    *,
    sized: Mapping[tuple[Any, ...], CallResult],
    point_answers: PointAnswers,
    progress: ProgressCallback | None = None,
) -> SweepResult:
    """Size every point of `plan` in `worker`, reading its answers with `answers` (see the
    module's docstring). `sized`: the session's calls sized alone, by `Call.key()`;
    `point_answers`: the session's answers of earlier sweeps' points, which this one adds to.

    Chunk by chunk; while the worker answers one chunk, the next one is built."""
    maker = PointMaker(plan, answers.catalog)
    recorder = _Recorder(plan, answers.device.memory_bytes, maker)
    known = _Known(sized, point_answers)
    template = answers.request(plan.corner)
    points = enumerate(grid_points(plan.sweeps))
    crashes = done = 0
    chunk = list(islice(points, _CHUNK_POINTS))
    asked = _known_or_asked(known, maker, recorder, chunk)
    while chunk:
        replies = _send(worker, maker, recorder, template, asked)
        following = list(islice(points, _CHUNK_POINTS))
        next_asked = _known_or_asked(known, maker, recorder, following)
        crashes += _collect(answers, known, maker, recorder, asked, replies, MAX_CRASHES - crashes)
        done += len(chunk)
        if progress is not None:
            progress(done, plan.point_count, "points sized")
        if crashes >= MAX_CRASHES:
            _give_up(recorder)
            break
        chunk, asked = following, next_asked
    return recorder.result


_Asked = list[tuple[int, tuple[Any, ...], dict[str, Value]]]


def _known_or_asked(
    known: _Known,
    maker: PointMaker,
    recorder: _Recorder,
    chunk: list[tuple[int, tuple[int, ...]]],
) -> _Asked:
    """Record the points already answered in this session; return the others to ask."""
    asked: _Asked = []
    for index, point in chunk:
        values = maker.values(point)
        key = maker.key(values)
        answer = known.get(maker, key, values)
        if answer is None:
            asked.append((index, key, values))
        elif isinstance(answer, int):
            recorder.sized(index, answer, "success")
        else:
            recorder.failed(index, answer)
    return asked


def _send(
    worker: WorkerProcess,
    maker: PointMaker,
    recorder: _Recorder,
    template: dict[str, Any],
    asked: _Asked,
) -> Iterator[dict[str, Any] | Crash]:
    """Send the points to the worker; their answers, to read with `_collect`."""
    if not asked:
        return iter(())
    recorder.result.asked_count += len(asked)
    encoded = [maker.encoded(values) for _, _, values in asked]
    return worker.size_points(template, maker.slots, encoded)


def _collect(
    answers: CallAnswers,
    known: _Known,
    maker: PointMaker,
    recorder: _Recorder,
    asked: _Asked,
    replies: Iterator[dict[str, Any] | Crash],
    crashes_allowed: int,
) -> int:
    """Record the answers; the number of crashes (it stops at `crashes_allowed`)."""
    sized_codes = answers.sized_codes
    crashes = 0
    for (index, key, values), answer in zip(asked, replies, strict=True):
        # A sized point's status is "success" (the library's own answers a size either way).
        if isinstance(answer, dict) and answer.get("status") in sized_codes:
            n_bytes = answer["bytes"]
            if n_bytes < WRAPPED_BYTES:
                recorder.sized(index, n_bytes, "success")
                known.remember(key, n_bytes)
                continue
        failure = answers.result(maker.call(values), answer)  # the session's own wording
        recorder.failed(index, failure)
        if failure.status in _UNSETTLED:
            crashes += 1
            if crashes >= crashes_allowed:
                break  # the worker was restarted with nothing pending: safe to stop here
        else:
            known.remember(key, failure)
    return crashes


def _give_up(recorder: _Recorder) -> None:
    """After MAX_CRASHES crashes the points never asked stay `not_sized`, counted as failed."""
    result = recorder.result
    result.gave_up = True
    result.failed_count += sum(1 for status in result.status_at if status == 0)
