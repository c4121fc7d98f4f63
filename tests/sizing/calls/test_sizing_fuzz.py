"""The call-spec parser, the call-log readers and the workload reader never crash: arbitrary
text and mutated real inputs end in a result or in the one error each promises (naming the
input), never another exception, and every result is consistent. (User text inside a
message may hold control characters: the CLI's output choke point escapes them.)"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hipmem.sizing.calls.logs import read_call_log
from hipmem.sizing.calls.spec import parse_call
from hipmem.sizing.calls.workload_file import MAX_COUNT, read_workload
from hipmem.sizing.errors import CallLogError, SizingError, SizingUsageError, WorkloadError
from hipmem.sizing.rocm.catalog import load_catalog

REPO = Path(__file__).resolve().parents[3]
CALL_LOGS = REPO / "tests" / "data" / "call_logs"
SEED_LOGS = [
    (CALL_LOGS / name).read_bytes()
    for name in ("rocblas-bench.log", "rocblas-trace.log", "rocblas-profile.yaml",
                 "rocsolver-bench.log")
]  # fmt: skip
SEED_WORKLOAD = (REPO / "samples" / "workload.yaml").read_bytes()
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_CATALOG = load_catalog()
_ROUTINES = [*sorted(_CATALOG.routines)[::40], "dgetrf", "rocblas_gemm_ex", "dtrsm"]
_ARGS = ["m", "n", "k", "lda", "nrhs", "batch_count", "uplo", "a_type", "compute_type", "x"]
_VALUES = ["8", "-1", "0", "０", "4_000", "0x10", "1e3", "8.0", "f16_r", "i8_r", "invalid",
           "L", "", "=", "99999999999999999999999999", "(1,2)"]  # fmt: skip


def _naming(message: str, name: str) -> None:
    assert message.startswith(name)


@FUZZ
@given(st.text(max_size=200))
def test_call_specs_of_any_text(text: str) -> None:
    try:
        parse_call(text, _CATALOG)
    except SizingUsageError as err:
        assert str(err)


@FUZZ
@given(
    st.sampled_from(_ROUTINES),
    st.lists(st.tuples(st.sampled_from(_ARGS), st.sampled_from(_VALUES)), max_size=6),
)
def test_call_specs_of_real_routines_and_odd_values(routine: str, args: list[tuple[str, str]]):
    text = f"{routine}:" + ",".join(f"{name}={value}" for name, value in args)
    try:
        call = parse_call(text, _CATALOG)
    except SizingUsageError as err:
        assert str(err)
        return
    for name, value in call.args.items():  # whatever was accepted follows the rules
        if isinstance(value, int) and (name in ("m", "n", "k", "nrhs") or name.startswith("ld")):
            assert value >= 0
    assert len({name for name, _ in args}) == len(args)  # a repeated name was refused


def _read_log(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "calls.log"
        path.write_bytes(content)
        try:
            log = read_call_log(path, _CATALOG)
        except (CallLogError, SizingUsageError) as err:
            _naming(str(err), str(path))
            return
    lines = content.count(b"\n") + (0 if content.endswith(b"\n") or not content else 1)
    assert log.line_count == lines
    assert all(1 <= p.line_number <= lines and p.count >= 1 for p in log.problems)
    assert all(1 <= count <= MAX_COUNT for _, count in log.calls)
    assert len({call.key() for call, _ in log.calls}) == len(log.calls)


@FUZZ
@given(st.binary(max_size=2000))
def test_call_logs_of_arbitrary_bytes(data: bytes) -> None:
    _read_log(data)


@FUZZ
@given(
    st.sampled_from(range(len(SEED_LOGS))),
    st.lists(
        st.tuples(st.floats(0, 1), st.integers(0, 8), st.binary(max_size=12)),
        min_size=1,
        max_size=6,
    ),
)
def test_mutated_call_logs(seed: int, edits: list[tuple[float, int, bytes]]) -> None:
    data = bytearray(SEED_LOGS[seed])
    for where, cut, insert in edits:
        at = int(where * (len(data) - 1))
        data[at : at + cut] = insert
    _read_log(bytes(data))


def _read_workload(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "workload.yaml"
        path.write_bytes(content)
        try:
            calls = read_workload(path, _CATALOG)
        except WorkloadError as err:
            _naming(str(err), str(path))
            return
        except SizingError as err:  # pragma: no cover - would be a broken promise
            raise AssertionError(f"not a WorkloadError: {err!r}") from err
    assert calls and all(1 <= count <= MAX_COUNT for _, count in calls)


@FUZZ
@given(st.binary(max_size=1000))
def test_workloads_of_arbitrary_bytes(data: bytes) -> None:
    _read_workload(data)


@FUZZ
@given(
    st.lists(
        st.tuples(
            st.floats(0, 1),
            st.integers(0, 6),
            st.sampled_from(["&a ", "*a", "{5: 3}", "m: 1", "\n  - ", "count: ", "0x1", "4_0",
                             "-", ":", "[", "\xe9", "\x00", "!!python/object:os.system", "9" * 30]),
        ),
        min_size=1,
        max_size=5,
    )
)  # fmt: skip
def test_mutated_workloads(edits: list[tuple[float, int, str]]) -> None:
    data = bytearray(SEED_WORKLOAD)
    for where, cut, insert in edits:
        at = int(where * (len(data) - 1))
        data[at : at + cut] = insert.encode("utf-8", "surrogateescape")
    _read_workload(bytes(data))
