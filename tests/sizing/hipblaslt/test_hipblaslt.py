"""hipBLASLt through the virtual device: the real libhipblaslt 7.1.1 (sid, HIP 6) and 7.2.4
(experimental, HIP 7), fetched by `hipmem rocm fetch`, answering
hipblasLtMatmulAlgoGetHeuristic on a virtual gfx90a (MI210) and gfx1100 (RX 7900 XTX).
Known answers are keyed by hipBLASLt version, arch and CU count."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from hipmem.sizing.hipblaslt.matmul import (
    PYTORCH_DEFAULT_CAP_BYTES,
    changed_by_cap,
    parse_matmul,
    recommended_hipblaslt_kib,
    size_matmuls,
    with_cap,
)
from hipmem.sizing.rocm.locator import locate
from hipmem.sizing.worker.virtual_device import resolve
from tests.cli_run import hipmem as run_hipmem

DECODE = "hipblaslt_matmul:m=8192,n=16,k=8192,transA=T,a_type=bf16_r"
GEMV = "hipblaslt_matmul:m=4096,n=1,k=14336,transA=T,a_type=bf16_r"
SQUARE = "hipblaslt_matmul:m=4096,n=4096,k=4096,a_type=f16_r"
LONG_K = "hipblaslt_matmul:m=1024,n=16,k=65536,transA=T,a_type=f16_r"

# (hipBLASLt, ROCm tree, device, CUs) -> bytes of the first algorithm under PyTorch's cap
KNOWN = {
    ("7.1.1", "6.4", "gfx90a", 104): {DECODE: 7864320, GEMV: 7987200, SQUARE: 0, LONG_K: 7864320},
    ("7.2.4", "7.2", "gfx90a", 104): {DECODE: 7864320, GEMV: 7987200, SQUARE: 0, LONG_K: 7864320},
    ("7.1.1", "6.4", "gfx90a", 64): {DECODE: 7864320, LONG_K: 1966080},
    ("7.1.1", "6.4", "gfx1100", 96): {DECODE: 0, GEMV: 0, SQUARE: 0, LONG_K: 1622016},
    ("7.2.4", "7.2", "gfx1100", 96): {DECODE: 0, GEMV: 0, SQUARE: 0, LONG_K: 1622016},
}


def hipmem(*args: str) -> subprocess.CompletedProcess[str]:
    return run_hipmem(*args)


@pytest.mark.parametrize("key", list(KNOWN), ids=lambda k: "-".join(map(str, k)))
def test_known_answers(hipblaslt: dict[str, Path], key: tuple[str, str, str, int]) -> None:
    version, rocm, arch, cus = key
    if version not in hipblaslt:
        pytest.skip(f"hipBLASLt {version} could not be fetched")
    specs = list(KNOWN[key])
    report = size_matmuls([parse_matmul(s) for s in specs], resolve(arch, cus), locate(rocm=rocm))
    assert report.hipblaslt_version == version
    got = {spec: result.bytes for spec, result in zip(specs, report.results, strict=True)}
    assert got == KNOWN[key]
    assert all(r.cap_changed_choice is False for r in report.results)


def test_cap_below_first_choice_changes_it(hipblaslt: dict[str, Path]) -> None:
    calls = [parse_matmul(DECODE), parse_matmul(DECODE + ",max_workspace=0")]
    report = size_matmuls(calls, resolve("MI210"), locate(rocm="6.4"))
    full, capped = report.results
    assert (full.bytes, full.cap_changed_choice) == (7864320, False)
    assert (capped.bytes, capped.cap_changed_choice) == (0, True)
    assert capped.uncapped is not None and capped.uncapped.workspace_bytes == 7864320


def test_recommend_check_round_trip(hipblaslt: dict[str, Path]) -> None:
    """The recommended KiB leaves every first choice unchanged; one KiB less changes the
    call that needs it, and only that one."""
    calls = [parse_matmul(s) for s in (DECODE, GEMV, SQUARE)]
    device, libraries = resolve("MI210"), locate(rocm="7.2")
    kib = recommended_hipblaslt_kib(size_matmuls(calls, device, libraries))
    assert kib == -(-7987200 // 1024)
    assert changed_by_cap(size_matmuls(with_cap(calls, kib * 1024), device, libraries)) == []
    worse = changed_by_cap(size_matmuls(with_cap(calls, (kib - 1) * 1024), device, libraries))
    assert [r.call.shape_label() for r in worse] == [parse_matmul(GEMV).shape_label()]


def test_from_python_through_hipmem(hipblaslt: dict[str, Path]) -> None:
    import hipmem

    report = hipmem.size_matmul_specs([DECODE, GEMV], "MI210", rocm="7.2")
    assert report.hipblaslt_version == "7.2.4"
    assert hipmem.recommended_hipblaslt_kib(report) == -(-7987200 // 1024)


def test_cli_json_every_algorithm_and_version(hipblaslt: dict[str, Path]) -> None:
    done = hipmem("size", "--rocm", "7.2", "--device", "MI210", "--json", DECODE + ",algorithms=4")
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)["hipblaslt"]
    assert payload["hipblaslt"] == "7.2.4"
    (call,) = payload["calls"]
    assert call["args"]["max_workspace"] == PYTORCH_DEFAULT_CAP_BYTES
    assert 1 <= len(call["algorithms"]) <= 4
    assert call["bytes"] == call["algorithms"][0]["workspace_bytes"] == 7864320
    assert call["cap_changed_first_choice"] is False


def test_gfx942_has_no_data_one_line_others_answered(hipblaslt: dict[str, Path]) -> None:
    done = hipmem(
        "size", "--rocm", "7.2", "--device", "MI300X", DECODE, "rocsolver_dgetrf:m=1024,n=1024"
    )
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(errors) == 1, done.stderr
    assert "hipBLASLt 7.2.4 (Debian) has no solution data for gfx942" in errors[0]
    assert "TensileLibrary_lazy_gfx942.dat" in errors[0]
    assert "4,732,160" in done.stdout  # the rocSOLVER call is still answered


def test_side_by_side_names_both_versions(hipblaslt: dict[str, Path]) -> None:
    done = hipmem("size", "--rocm", "6.4,7.2", "--device", "gfx1100", LONG_K)
    assert done.returncode == 0, done.stderr
    assert "hipBLASLt 7.1.1" in done.stdout and "hipBLASLt 7.2.4" in done.stdout
    assert done.stdout.count("1,622,016") == 2


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("hipblaslt_matmul:m=4,n=4", "k required"),
        ("hipblaslt_matmul:m=4,n=4,k=4,transA=X", "transA='X': expected N, T or C"),
        ("hipblaslt_matmul:m=4,n=4,k=4,a_type=f99_r", "a_type='f99_r'"),
        ("hipblaslt_matmul:m=4,n=4,k=4,m=8", "m= given twice"),
        ("hipblaslt_matmul:m=-4,n=4,k=4", "m='-4' is not a whole number"),
    ],
)
def test_bad_specs_exit_2(spec: str, message: str) -> None:
    done = hipmem("size", "--device", "MI210", spec)
    assert done.returncode == 2
    assert message in done.stderr


def test_cli_recommend_then_check_round_trip(hipblaslt: dict[str, Path]) -> None:
    calls = ("rocsolver_dgetrf:m=1024,n=1024", DECODE, GEMV)
    base = ("--rocm", "7.2", "--device", "MI210")
    done = hipmem("recommend", "--pytorch", *base, *calls)
    assert done.returncode == 0, done.stderr
    exports = dict(
        line.removeprefix("export ").split("=", 1)
        for line in done.stdout.splitlines()
        if line.startswith("export ")
    )
    kib = int(exports["HIPBLASLT_WORKSPACE_SIZE"])
    assert kib == 7800
    ok = hipmem("check", *base, DECODE, GEMV, "--hipblaslt-value", str(kib))
    assert ok.returncode == 0, ok.stderr
    bad = hipmem("check", *base, DECODE, GEMV, "--hipblaslt-value", str(kib - 1))
    assert bad.returncode == 1
    assert "changes the first choice of m=4096,n=1,k=14336" in bad.stderr
    assert "m=8192,n=16" not in bad.stderr


def test_every_format_carries_the_hipblaslt_variable(hipblaslt: dict[str, Path]) -> None:
    """CI steps and deployment files get HIPBLASLT_WORKSPACE_SIZE too, not only a shell."""
    base = ("--rocm", "7.2", "--device", "MI210", "rocsolver_dgetrf:m=1024,n=1024", GEMV)
    as_json = hipmem("recommend", *base, "--format", "json")
    assert as_json.returncode == 0, as_json.stderr
    env = json.loads(as_json.stdout)["env"]
    assert env["HIPBLASLT_WORKSPACE_SIZE"] == "7800" and "ROCBLAS_DEVICE_MEMORY_SIZE" in env
    for fmt, line in (("dotenv", "HIPBLASLT_WORKSPACE_SIZE=7800"),
                      ("yaml", "- name: HIPBLASLT_WORKSPACE_SIZE")):  # fmt: skip
        done = hipmem("recommend", *base, "--format", fmt)
        assert done.returncode == 0 and line in done.stdout.splitlines(), done.stdout
    only = hipmem("recommend", "--rocm", "7.2", "--device", "MI210", GEMV, "--format", "json")
    assert json.loads(only.stdout)["env"] == {"HIPBLASLT_WORKSPACE_SIZE": "7800"}


LOG = (
    Path(__file__).parents[2] / "data" / "hipblaslt" / "decode-mi210.log"
)  # tests/hipblaslt_log_recorder.py


def test_from_log_written_by_the_library(hipblaslt: dict[str, Path], tmp_path: Path) -> None:
    """The fixture is hipBLASLt 7.2.4's own HIPBLASLT_LOG_MASK=32 output; a damaged line added
    to it is skipped and reported with its number, the rest answered."""
    damaged = tmp_path / "bench.log"
    damaged.write_text(LOG.read_text() + "hipblaslt-bench -m 4 -n 4 -k 4 -m 8\n")
    done = hipmem(
        "size", "--rocm", "7.2", "--device", "MI210", "--json", "--from-log", str(damaged)
    )
    assert done.returncode == 0, done.stderr
    assert f"{damaged}:6: -m given twice" in done.stderr
    calls = json.loads(done.stdout)["hipblaslt"]["calls"]
    by_shape = {(c["args"]["m"], c["args"]["n"], c["args"]["k"]): c for c in calls}
    assert by_shape[(14336, 16, 4096)]["count"] == 2
    assert by_shape[(4096, 16, 14336)]["bytes"] == 7987200
    assert by_shape[(128, 16, 1024)]["args"]["batch_count"] == 32
    strict = hipmem(
        "size", "--rocm", "7.2", "--device", "MI210", "--strict", "--from-log", str(damaged)
    )
    assert strict.returncode == 1
    assert f"{damaged}:6: -m given twice (--strict)" in strict.stderr


def test_workload_mixes_libraries(hipblaslt: dict[str, Path], tmp_path: Path) -> None:
    workload = tmp_path / "mixed.yaml"
    workload.write_text(
        "version: 1\ncalls:\n"
        "  - call: rocsolver_dgetrf:m=1024,n=1024\n"
        f"  - call: {GEMV}\n    count: 32\n"
        "  - routine: hipblaslt_matmul\n"
        "    args: {m: 4096, n: 1, k: 14336, transA: T, a_type: bf16_r}\n"
    )
    done = hipmem(
        "size", "--rocm", "7.2", "--device", "MI210", "--json", "--workload", str(workload)
    )
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["session_bytes"] == 4732160
    (call,) = payload["hipblaslt"]["calls"]
    assert (call["bytes"], call["count"]) == (7987200, 33)
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "version: 1\ncalls:\n  - call: rocsolver_dgetrf:m=8,n=8\n  - call: hipblaslt_matmul:m=4\n"
    )
    done = hipmem("size", "--rocm", "7.2", "--device", "MI210", "--workload", str(bad))
    assert done.returncode == 2
    assert f"{bad}:4: hipblaslt_matmul: n, k required" in done.stderr


def test_cli_pytorch_round_trip_both_variables(hipblaslt: dict[str, Path]) -> None:
    """recommend --pytorch, then check: both values pass; one KiB less of either fails,
    naming the call."""
    calls = ("rocsolver_dgetrf:m=1024,n=1024", GEMV)
    base = ("--rocm", "7.2", "--device", "MI210")
    done = hipmem("recommend", "--pytorch", *base, *calls)
    assert done.returncode == 0, done.stderr
    exports = dict(
        line.removeprefix("export ").split("=", 1)
        for line in done.stdout.splitlines()
        if line.startswith("export ")
    )
    config, kib = exports["HIPBLAS_WORKSPACE_CONFIG"], int(exports["HIPBLASLT_WORKSPACE_SIZE"])
    size_kib = int(config.split(":")[1])
    assert config == f":{size_kib}:1"
    ok = hipmem("check", *base, *calls, "--hipblas-config", config, "--hipblaslt-value", str(kib))
    assert ok.returncode == 0, ok.stderr
    less = f":{size_kib - 1}:1"
    bad = hipmem("check", *base, *calls, "--hipblas-config", less, "--hipblaslt-value", str(kib))
    assert bad.returncode == 1
    assert f"HIPBLAS_WORKSPACE_CONFIG={less} is too small: rocsolver_dgetrf:m=1024,n=1024" in (
        bad.stderr
    )
    bad = hipmem(
        "check", *base, *calls, "--hipblas-config", config, "--hipblaslt-value", str(kib - 1)
    )
    assert bad.returncode == 1
    assert "changes the first choice of m=4096,n=1,k=14336" in bad.stderr


def test_hipblas_config_format_refused() -> None:
    done = hipmem(
        "check", "--device", "MI210", "rocsolver_dgetrf:m=8,n=8", "--hipblas-config", "4MiB"
    )
    assert done.returncode == 2
    assert "not PyTorch's :SIZE_KiB:COUNT format" in done.stderr


def test_unsupported_types_named_not_crashed(hipblaslt: dict[str, Path]) -> None:
    """A type combination the library has no kernel for: the heuristic's answer, named; the
    other call still answered."""
    odd = "hipblaslt_matmul:m=64,n=64,k=64,a_type=i8_r,c_type=f64_r"
    done = hipmem("size", "--rocm", "7.2", "--device", "MI210", "--json", odd, GEMV)
    assert done.returncode == 1
    calls = json.loads(done.stdout)["hipblaslt"]["calls"]
    assert [c["status"] for c in calls] == ["no_algorithm", "success"]
    assert "the heuristic returned no algorithm" in done.stderr
