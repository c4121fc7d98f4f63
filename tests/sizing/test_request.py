"""The sizing request (sizing/request.py): the one function `hipmem size`, `recommend` and
`check` call, run here directly on the real libraries through the virtual device."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import hipmem
from hipmem._core.progress import ProgressCallback, no_progress
from hipmem.sizing.errors import SizingUsageError
from hipmem.sizing.request import Purpose, SizingRequest, size_request
from hipmem.sizing.say import Say
from tests.cli_run import hipmem as run_hipmem

REPO = Path(__file__).resolve().parents[2]
WORKLOAD = REPO / "samples" / "workload.yaml"
BENCH_LOG = REPO / "samples" / "rocblas-bench.log"


class Heard:
    """A `Say` that keeps what the library said, in order."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def say(self) -> Say:
        @contextmanager
        def bar(title: str) -> Iterator[ProgressCallback]:
            self.lines.append(f"bar: {title}")
            yield no_progress

        return Say(
            info=lambda text: self.lines.append(f"info: {text}"),
            warning=lambda text: self.lines.append(f"warning: {text}"),
            note=lambda text: self.lines.append(f"note: {text}"),
            progress=bar,
            transfer=bar,
        )


def test_the_api_answers_a_workload_as_the_command_line_does(rocm72: Path) -> None:
    request = hipmem.SizingRequest(workloads=[WORKLOAD], device="MI210", rocm="7.2")
    answer = hipmem.size_request(request)
    done = run_hipmem("size", "-d", "MI210", "--rocm", "7.2", "--workload", str(WORKLOAD),
                      "--json", "--offline")  # fmt: skip
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert printed.pop("distinct_calls") == len(answer.sessions[0].calls)
    # Every figure, call and name the command prints is the API's, through JSON as printed.
    assert printed == json.loads(json.dumps(answer.sessions[0].as_dict()))
    assert answer.device.arch.name == "gfx90a"
    assert [libraries.rocm for libraries in answer.releases] == ["7.2"]
    assert not answer.matmuls.any and answer.matmul_reports == []


def test_what_is_read_and_sized_is_said_in_order(rocm72: Path) -> None:
    heard = Heard()
    request = SizingRequest(from_logs=[BENCH_LOG], device="MI210", rocm="7.2")
    answer = size_request(request, heard.say())
    (session,) = answer.sessions
    assert session.calls and not session.failed
    (log,) = answer.sources.logs
    assert log.path == BENCH_LOG
    summary = [line for line in heard.lines if line.startswith("info: ")]
    assert summary[0].startswith(f"info: {BENCH_LOG}: ")
    bars = [line for line in heard.lines if line.startswith("bar: ")]
    assert bars == ["bar: reading rocblas-bench.log", "bar: sizing with ROCm 7.2"]


def test_size_answers_with_each_release_and_a_gate_with_one(rocm64: Path, rocm72: Path) -> None:
    calls = ["rocsolver_dgetrf:m=256,n=256"]
    answer = size_request(SizingRequest(calls=calls, device="MI210", rocm="6.4,7.2"))
    assert [session.library.rocm for session in answer.sessions] == ["6.4", "7.2"]
    assert all(session.session_bytes > 0 for session in answer.sessions)
    for purpose in ("check", "recommend"):
        gate = SizingRequest(calls=calls, device="MI210", rocm="6.4,7.2", purpose=purpose)
        with pytest.raises(SizingUsageError, match=f"{purpose} takes one release"):
            size_request(gate)
    (checked,) = size_request(
        SizingRequest(calls=calls, device="MI210", rocm="7.2", purpose="check")
    ).sessions
    assert checked.session_bytes == answer.sessions[1].session_bytes


def test_a_gate_hears_ready_once_the_release_is_chosen_before_any_call_is_sized(
    rocm72: Path,
) -> None:
    heard = Heard()
    request = SizingRequest(calls=["dgemm:m=64,n=64,k=64"], device="MI210", rocm="7.2",
                            purpose="recommend")  # fmt: skip
    answer = size_request(request, heard.say(), ready=lambda: heard.lines.append("ready"))
    assert heard.lines == ["ready", "bar: sizing"]
    assert len(answer.sessions) == 1


def test_a_plot_without_sweeps_is_refused_before_any_call_is_sized(rocm72: Path) -> None:
    heard = Heard()
    request = SizingRequest(calls=["dgemm:m=64,n=64,k=64"], device="MI210", rocm="7.2",
                            sweep_plot=True)  # fmt: skip
    with pytest.raises(SizingUsageError, match="--plot draws sweeps") as raised:
        size_request(request, heard.say())
    assert raised.value.parameter == "plot"
    assert not [line for line in heard.lines if line.startswith("bar: sizing")]


def test_a_bad_point_limit_is_named(rocm72: Path) -> None:
    request = SizingRequest(calls=["dgemm:m=64,n=64,k=64"], device="MI210", rocm="7.2",
                            max_points="many")  # fmt: skip
    with pytest.raises(hipmem.HipmemError) as raised:
        size_request(request)
    assert raised.value.exit_code == 2


SOLVER_LOG = REPO / "samples" / "rocsolver-bench.log"  # rocSOLVER 3.28.2, rocBLAS 4.4.1


def _log_warnings(log: Path, rocm: str, purpose: Purpose = "size") -> list[str]:
    heard = Heard()
    request = SizingRequest(from_logs=[log], device="MI210", rocm=rocm, purpose=purpose)
    size_request(request, heard.say())
    return [line for line in heard.lines if line.startswith(f"warning: {log}: written by")]


def test_a_log_written_by_another_release_is_said_with_the_nearest_one(
    rocm64: Path, rocm72: Path
) -> None:
    (said,) = _log_warnings(SOLVER_LOG, "7.2")
    assert said == (
        f"warning: {SOLVER_LOG}: written by rocSOLVER 3.28.2, rocBLAS 4.4.1 (ROCm 6.4), sized "
        "with rocSOLVER 3.32.0, rocBLAS 5.2.0 (ROCm 7.2): workspace sizes can differ between "
        "releases; --rocm 6.4 is the nearest release hipmem has"
    )
    assert _log_warnings(SOLVER_LOG, "7.2", purpose="check") == [said]
    assert _log_warnings(SOLVER_LOG, "6.4") == []  # its own release
    assert _log_warnings(SOLVER_LOG, "6.4,7.2") == []  # its own release among those compared


def test_a_release_hipmem_lacks_names_the_nearest_or_none(rocm72: Path, tmp_path: Path) -> None:
    text = SOLVER_LOG.read_text()
    rocm70 = tmp_path / "rocm70.log"  # rocSOLVER 3.30 is ROCm 7.0: 7.2 is the nearest
    rocm70.write_text(text.replace("3.28.2.", "3.30.1.").replace("Version: 4.4.1.", ""))
    (said,) = _log_warnings(rocm70, "7.2")
    assert said.endswith("(ROCm 7.0), sized with rocSOLVER 3.32.0 (ROCm 7.2): workspace sizes "
                         "can differ between releases")  # fmt: skip
    unknown = tmp_path / "unknown.log"
    unknown.write_text(
        text.replace("3.28.2.", "3.99.0.").replace("Version: 4.4.1.", "Version: 5.2.0.")
    )
    (said,) = _log_warnings(unknown, "7.2")
    assert "written by rocSOLVER 3.99.0 (ROCm unknown), sized with rocSOLVER 3.32.0" in said


def test_nearest_release_by_number() -> None:
    from hipmem.sizing.rocm.releases import nearest_release, rocm_of_library

    names = [nearest_release(r).name for r in ("5.7", "6.0", "6.4", "7.0", "7.1", "7.2", "8.0")]
    assert names == ["6.4", "6.4", "6.4", "7.2", "7.2", "7.2", "7.2"]
    assert rocm_of_library("rocSOLVER", "3.28.2") == "6.4"
    assert rocm_of_library("rocblas", "5.0.1") == "7.0"
    assert rocm_of_library("hipblaslt", "1.0") is None
