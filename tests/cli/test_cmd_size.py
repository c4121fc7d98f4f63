"""`hipmem size`, `hipmem devices` and `hipmem rocm where`, run as a user runs them
(tests/cli_run.py), asserting the exit code and the exact error line."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from hipmem.sizing.session import size_calls
from tests.cli_run import hipmem as run_hipmem
from tests.cli_run import hipmem_process


def hipmem(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run_hipmem(*args, **env)


def test_json_contract(rocm: Path) -> None:
    done = hipmem(
        "size", "--device", "gfx90a", "--json",
        "rocsolver_dgetrf:m=1024,n=1024", "rocsolver_dgetrs:n=1024,nrhs=1",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    payload = json.loads(done.stdout)
    assert set(payload) >= {"session_bytes", "calls", "library", "device"}
    assert [call["routine"] for call in payload["calls"]] == [
        "rocsolver_dgetrf",
        "rocsolver_dgetrs",
    ]
    assert payload["calls"][0]["args"] == {"m": 1024, "n": 1024, "lda": 1024}
    assert all(isinstance(call["bytes"], int) for call in payload["calls"])
    # The same numbers as the Python API computes independently in this process.
    api = size_calls(["dgetrf:m=1024,n=1024", "dgetrs:n=1024,nrhs=1"], "gfx90a")
    assert payload["session_bytes"] == api.session_bytes
    assert [c["bytes"] for c in payload["calls"]] == [c.bytes for c in api.calls]
    assert payload["device"]["arch"] == "gfx90a"
    assert set(payload["library"]["versions"]) == {"rocblas", "rocsolver"}


def test_terminal_table_shows_human_units_beside_exact_bytes(rocm: Path) -> None:
    done = hipmem("size", "-d", "MI210", "dgetrf:m=1024,n=1024")
    assert done.returncode == 0, done.stderr
    exact = size_calls(["dgetrf:m=1024,n=1024"], "MI210").session_bytes
    assert f"{exact:,}" in done.stdout
    assert "MiB" in done.stdout and "virtual MI210" in done.stdout


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["dgetrx:m=1"], 2,
         "Error: unknown routine 'dgetrx'; did you mean dgetrf, dgetri or dgetrs?"),
        (["dgetrf:m=1,x=2"], 2, "Error: rocsolver_dgetrf has no argument 'x' (it takes m, n, lda)"),
        (["dgetrf:m=abc,n=1"], 2, "Error: rocsolver_dgetrf: m=abc: expected a whole number"),
        (["dpotrf:n=3,uplo=middle"], 2, "Error: rocsolver_dpotrf: uplo=middle: not a rocblas_fill"),
        (["dgetrf:m=1"], 2, "Error: rocsolver_dgetrf: missing argument n (no default for it)"),
        (["dgetrf:m=-1,n=4"], 2, "Error: rocsolver_dgetrf: m=-1: a dimension cannot be negative"),
        (["dgetrf:m=8,n=8,lda=4"], 1, "Error: rocsolver_dgetrf:m=8,n=8,lda=4: rocsolver rejected "
                                      "the call: rocblas_status_invalid_size (4)"),
    ],
)  # fmt: skip
def test_bad_calls_give_one_line_and_the_exit_code(
    rocm: Path, args: list[str], code: int, message: str
) -> None:
    done = hipmem("size", "-d", "MI210", *args)
    assert done.returncode == code
    assert done.stderr.startswith(message), done.stderr
    assert "Traceback" not in done.stderr


def test_unknown_device(rocm: Path) -> None:
    done = hipmem("size", "-d", "MI3000X", "dgetrf:m=1,n=1")
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("Error: unknown device 'MI3000X'; did you mean MI300X")
    assert line.endswith("(`hipmem devices` lists them)")


def test_no_device_and_no_gpu_is_exit_1_as_in_replay(rocm: Path) -> None:
    done = hipmem("size", "dgetrf:m=1,n=1")
    assert done.returncode == 1
    assert "no AMD GPU here" in done.stderr and "--device" in done.stderr


def test_a_vendor_abort_does_not_take_the_tool_down(rocm: Path) -> None:
    done = hipmem(
        "size",
        "-d",
        "MI355X",  # gfx950: no Debian build has its gemm data
        "--json",
        "gemm_ex:m=64,n=64,k=4096,a_type=f16_r",
        "dgetrf:m=64,n=64",
    )
    assert done.returncode == 1
    payload = json.loads(done.stdout)
    crashed, answered = payload["calls"]
    assert crashed["status"] == "crashed" and "SIGABRT" in crashed["error"]
    assert isinstance(answered["bytes"], int)
    assert done.stderr.count("Error: ") == 1


def test_missing_libraries_list_every_place_tried(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    done = hipmem(
        "size", "--offline", "-d", "MI210", "dgetrf:m=1,n=1",
        HIPMEM_CACHE_DIR=str(tmp_path / "cache"), ROCM_PATH=str(empty),
    )  # fmt: skip
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    for place in (f"$ROCM_PATH/lib ({empty / 'lib'})", "/opt/rocm/lib", "offline cache"):
        assert place in lines[0]
    assert lines[0].endswith(
        "--offline forbids downloading ROCm 7.2: run "
        "`hipmem rocm fetch --rocm 7.2 --arch gfx90a --no-hipblaslt`"
    )


def test_debug_shows_the_traceback(rocm: Path) -> None:
    done = hipmem("--debug", "size", "-d", "MI210", "dgetrx:m=1")
    assert done.returncode != 0 and "Traceback" in done.stderr


def test_rocm_where_names_the_place(rocm: Path) -> None:
    done = hipmem("rocm", "where", "--json")
    assert done.returncode == 0, done.stderr
    (where,) = [entry for entry in json.loads(done.stdout)["releases"] if entry["default"]]
    assert Path(where["rocblas"]).is_file() and where["found_in"] and where["rocm"]


def test_devices_lists_products_and_archs() -> None:
    done = hipmem("devices", "--json")
    assert done.returncode == 0, done.stderr
    listing = json.loads(done.stdout)
    names = {device["name"]: device for device in listing["virtual"]}
    assert names["MI300X"]["arch"] == "gfx942" and names["MI300X"]["compute_units"] == 304
    assert {"gfx90a", "gfx942", "gfx950", "gfx1100"} <= set(listing["archs"])
    assert listing["real"] == [] and listing["real_unavailable_reason"]


def test_devices_reads_real_devices_through_hip_python(rocm: Path) -> None:
    # The stand-in runtime plays a real one: hip-python finds it on the loader path.
    from hipmem.sizing.rocm.locator import locate
    from hipmem.sizing.worker.shim_build import build_shim

    include_dir = locate().include_dir
    assert include_dir is not None
    shim = build_shim(include_dir)
    # A process of its own: the loader reads LD_LIBRARY_PATH at start.
    done = hipmem_process(
        "devices", "--json", LD_LIBRARY_PATH=str(shim),
        HIPMEM_VDEV_ARCH="gfx1100", HIPMEM_VDEV_CUS="48", HIPMEM_VDEV_NAME="Stand-in",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (real,) = json.loads(done.stdout)["real"]
    assert real["arch"] == "gfx1100" and real["compute_units"] == 48 and not real["virtual"]
