"""`hipmem recommend` and `hipmem check` as a user runs them (tests/cli_run.py): exact output
and exit codes, sizes computed here with SizingSession."""

from __future__ import annotations

import json
import math
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hipmem.sizing.session import SessionResult, SizingSession
from tests.cli_run import hipmem as run_hipmem
from tests.terminal import unwrapped

CALLS = ["rocsolver_dgetrf:m=1024,n=1024", "rocsolver_dgetrs:n=1024,nrhs=1"]
MiB = 1 << 20


def hipmem(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run hipmem with the release pinned (HIPMEM_ROCM), as the CI recipe does: the release
    the module's session answered with."""
    unset = [
        k
        for k in os.environ
        if k in ("ROCBLAS_DEVICE_MEMORY_SIZE", "GITHUB_ENV", "GITHUB_OUTPUT")
        or k.startswith("ROCBLAS_STREAM")
    ]
    return run_hipmem(
        *args, unset=unset, **{"COLUMNS": "200", "HIPMEM_ROCM": _release(), **(env or {})}
    )


def _release() -> str:
    from hipmem.sizing.rocm.locator import locate

    return locate().rocm or ""


def _comment(session: SessionResult) -> str:
    """The first line of shell and dotenv output: which release the figure is for."""
    versions = ", ".join(f"{name} {v}" for name, v in session.library.versions.items())
    return (
        f"# for ROCm {session.library.rocm} ({versions}) from {session.library.found_in}, "
        "virtual MI210 (gfx90a)\n"
    )


@pytest.fixture(scope="module")
def session(rocm: object) -> SessionResult:
    with SizingSession(device="MI210") as sizing:
        sizing.size_many(CALLS)
        return sizing.result()


def test_default_output_off_a_terminal_is_a_sourceable_export_line(
    tmp_path: Path, session: SessionResult
) -> None:
    done = hipmem("recommend", "--device", "MI210", *CALLS)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == (
        _comment(session) + f"export ROCBLAS_DEVICE_MEMORY_SIZE={session.session_bytes}\n"
    )
    script = tmp_path / "env.sh"
    script.write_text(done.stdout)
    sourced = subprocess.run(
        ["bash", "-c", f'source {script}; printf %s "$ROCBLAS_DEVICE_MEMORY_SIZE"'],
        capture_output=True,
        text=True,
        check=True,
    )
    assert sourced.stdout == str(session.session_bytes)


def test_headroom_and_alignment(session: SessionResult) -> None:
    done = hipmem(
        "recommend", "--device", "MI210", *CALLS, "--headroom", "10%", "--align", "2MiB",
        "--format", "dotenv",
    )  # fmt: skip
    wanted = math.ceil((session.session_bytes + math.ceil(session.session_bytes / 10)) / (2 * MiB))
    expected = _comment(session) + f"ROCBLAS_DEVICE_MEMORY_SIZE={wanted * 2 * MiB}\n"
    assert (done.returncode, done.stdout) == (0, expected)


def test_yaml_and_json_formats(session: SessionResult) -> None:
    done = hipmem("recommend", "--device", "MI210", *CALLS, "--format", "yaml", "--pytorch")
    assert done.returncode == 0
    kib = math.ceil(session.session_bytes / 1024)
    assert yaml.safe_load(done.stdout) == {
        "env": [
            {"name": "ROCBLAS_DEVICE_MEMORY_SIZE", "value": str(session.session_bytes)},
            {"name": "HIPBLAS_WORKSPACE_CONFIG", "value": f":{kib}:1"},
        ]
    }
    done = hipmem("recommend", "--device", "MI210", *CALLS, "--format", "json", "--handles", "3")
    payload = json.loads(done.stdout)
    default = session.library.handle_default_bytes
    assert payload["rocblas_device_memory_size_bytes"] == session.session_bytes
    assert payload["saved_bytes_total"] == 3 * (default - session.session_bytes)


def test_github_format_appends_to_github_env(tmp_path: Path, session: SessionResult) -> None:
    env_file = tmp_path / "github_env"
    done = hipmem(
        "recommend", "--device", "MI210", *CALLS, "--format", "github",
        env={"GITHUB_ENV": str(env_file)},
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "")
    assert env_file.read_text() == f"ROCBLAS_DEVICE_MEMORY_SIZE={session.session_bytes}\n"
    assert unwrapped(done.stderr) == f"appended ROCBLAS_DEVICE_MEMORY_SIZE to {env_file}"


def test_github_env_not_writable_exits_1_and_writes_nothing(tmp_path: Path) -> None:
    output_file = tmp_path / "out"
    output_file.write_text("")
    done = hipmem(
        "recommend", "--device", "MI210", *CALLS, "--format", "github",
        env={"GITHUB_ENV": str(tmp_path), "GITHUB_OUTPUT": str(output_file)},
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr == f"Error: cannot append to $GITHUB_ENV ({tmp_path}): Is a directory\n"
    assert output_file.read_text() == ""


def test_summary_on_a_terminal(session: SessionResult) -> None:
    leader, follower = pty.openpty()
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("ROCBLAS_STREAM_ORDER_ALLOC", None)
    with subprocess.Popen(
        [sys.executable, "-m", "hipmem.cli.main", "recommend", "--device", "MI210", *CALLS,
         "--handles", "2"],
        stdout=follower, stderr=subprocess.DEVNULL, env=env,
    ) as process:  # fmt: skip
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert process.wait() == 0
    os.close(leader)
    text = b"".join(chunks).decode()
    saved = 2 * (session.library.handle_default_bytes - session.session_bytes)
    assert "recommended" in text and f"{session.session_bytes:,}" in text
    assert "saved × 2 handles" in text and f"{saved:,}" in text
    assert "HIPBLAS_WORKSPACE_CONFIG=" in text
    assert text.rstrip().endswith(f"export ROCBLAS_DEVICE_MEMORY_SIZE={session.session_bytes}")


def test_check_passes_at_exactly_the_session_size(session: SessionResult) -> None:
    done = hipmem("check", "--device", "MI210", *CALLS, "--value", str(session.session_bytes))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(
        f"ok ROCBLAS_DEVICE_MEMORY_SIZE={session.session_bytes} covers the workload"
    )


def test_check_fails_one_byte_short_naming_the_largest_call(session: SessionResult) -> None:
    largest = max(session.calls, key=lambda r: r.bytes or 0)
    assert largest.bytes is not None
    value = session.session_bytes - 1
    done = hipmem("check", "--device", "MI210", *CALLS, "--value", str(value))
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        f"FAIL ROCBLAS_DEVICE_MEMORY_SIZE={value} is too small: {largest.call.label} needs "
        f"{largest.bytes:,} bytes ({largest.bytes - value:,} more)\n"
        f"sized with {_comment(session)[len('# for ') :].rsplit(', virtual', 1)[0]}\n"
    )


def test_check_reads_the_environment(session: SessionResult) -> None:
    fits = hipmem("check", "--device", "MI210", *CALLS,
                  env={"ROCBLAS_DEVICE_MEMORY_SIZE": hex(session.session_bytes)})  # fmt: skip
    assert fits.returncode == 0
    suffixed = hipmem("check", "--device", "MI210", *CALLS,
                      env={"ROCBLAS_DEVICE_MEMORY_SIZE": "128M"})  # fmt: skip
    assert suffixed.returncode == 1
    assert suffixed.stderr.splitlines()[0] == (
        "Warning: $ROCBLAS_DEVICE_MEMORY_SIZE '128M' is read as 128 bytes: strtoul stops at "
        "'M' (no unit suffixes; write plain decimal bytes)"
    )
    unset = hipmem("check", "--device", "MI210", *CALLS)
    assert unset.returncode == 0
    assert unset.stdout.startswith("ok ROCBLAS_DEVICE_MEMORY_SIZE is unset: rocBLAS manages")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["recommend", "--headroom", "10x"], "Error: --headroom '10x': expected a non-negative"),
        (["recommend", "--headroom", "-5%"], "Error: --headroom '-5%': expected a non-negative"),
        (
            ["recommend", "--align", "2MB"],
            "Error: --align '2MB': not a size ('mb' is ambiguous: write 2MiB",
        ),
        (["recommend", "--align", "0"], "Error: --align '0': must be at least 1 byte"),
        (
            ["recommend", "--format", "toml"],
            "Error: --format 'toml': not one of shell, dotenv, json, yaml, github",
        ),
        (["recommend", "--handles", "0"], "Error: --handles 0: must be at least 1"),
        (["check", "--value", "abc"], "Error: --value 'abc' is not a number"),
        (["check", "--value", "0b101"], "Error: --value '0b101' reads as 5 in rocBLAS builds"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    done = hipmem(*args, "--device", "MI210", *CALLS)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith(message)
    assert done.stderr.count("\n") == 1


def test_a_call_that_cannot_be_sized_exits_1(rocm: object) -> None:
    done = hipmem("recommend", "--device", "MI210", "rocsolver_dgetrf:m=8,n=4,lda=4")
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.startswith("Error: rocsolver_dgetrf:m=8,n=4,lda=4: ")


def test_the_documented_ci_step_is_valid_and_needs_no_gpu() -> None:
    ci = (Path(__file__).parents[2] / "docs" / "ci.md").read_text()
    block = ci[ci.index("```yaml\n") + len("```yaml\n") : ci.index("\n```", ci.index("```yaml"))]
    [job] = yaml.safe_load(block)["jobs"].values()
    assert job["runs-on"] == "ubuntu-latest"
    steps = job["steps"]
    cache = next(step for step in steps if step.get("uses", "").startswith("actions/cache@"))
    assert cache["with"]["path"] == "~/.cache/hipmem"
    runs = [step["run"] for step in steps if "run" in step]
    assert runs[0].startswith("pip install ")
    assert runs[1].startswith("hipmem rocm fetch")
    assert "--format github" in runs[2] and runs[3].startswith("hipmem check ")
