"""Messages that lead: every name a user types gets the nearest names hipmem knows, flags and
environment variables are named as the user writes them, and the exit code is the one
docs/exit-codes.md gives. Run in-process (the process boundary adds nothing to a message);
the sizes and PyTorch's setting keys come from the real libraries and headers."""

from __future__ import annotations

from pathlib import Path

import pytest

from hipmem._core.close_names import closest, did_you_mean
from tests.cli_run import hipmem as run_hipmem

SNAPSHOT = "tests/data/snapshots/train-default.pickle.gz"
LOG = "samples/serve-first-2000.csv.gz"


def hipmem(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str
) -> tuple[int, str, str]:
    """`hipmem ARGS` in this process, piped at 80 columns: (exit code, stdout, stderr)."""
    done = run_hipmem(*args, cwd=Path(__file__).resolve().parents[2], COLUMNS="80")
    return done.returncode, done.stdout, done.stderr


def test_one_helper_names_the_nearest_in_name_order() -> None:
    assert closest("dgetrx", ["dgetrs", "dgetrf", "dpotrf"], n=2) == ["dgetrf", "dgetrs"]
    assert did_you_mean("hots", ["cuda", "host", "null"]) == "; did you mean host?"
    assert did_you_mean("a", ["ab", "ac", "ad"], cutoff=0.5) == "; did you mean ab, ac or ad?"
    assert did_you_mean("zzz", ["host"]) == ""


@pytest.mark.parametrize(
    ("spec", "hint"),
    [
        ("hots", "did you mean host?"),
        ("pool:intial=0", "did you mean 'initial'?"),
        ("torch:expandable_segment=1", "did you mean 'expandable_segments'?"),
        ("pool:upstream=cdua", "did you mean cuda?"),
    ],
)
def test_resource_kinds_and_options_get_the_nearest_name(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, spec: str, hint: str
) -> None:
    code, out, err = hipmem(capsys, monkeypatch, "replay", LOG, "-r", spec)
    assert code == 2 and out == ""
    assert err.startswith(f"Error: --resource '{spec}': ") and hint in err


def test_a_mistyped_device_gets_the_nearest(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, rocm: Path
) -> None:
    code, _, err = hipmem(capsys, monkeypatch, "size", "-d", "MI300Y", "dgetrs:n=8,nrhs=1")
    assert code == 2 and "did you mean MI300A, MI300X" in err


@pytest.mark.parametrize("given", ["7.2,,6.4", "7.2,", ",7.2"])
def test_a_release_left_out_of_the_list_is_usage(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, given: str
) -> None:
    code, out, err = hipmem(capsys, monkeypatch, "size", "--rocm", given, "-d", "MI210",
                            "dgetrs:n=8,nrhs=1")  # fmt: skip
    assert (code, out) == (2, "")
    assert err == f"Error: --rocm '{given}': a release is missing between commas\n"
    monkeypatch.setenv("HIPMEM_ROCM", given)
    code, _, err = hipmem(capsys, monkeypatch, "size", "-d", "MI210", "dgetrs:n=8,nrhs=1")
    assert code == 2 and err.startswith(f"Error: HIPMEM_ROCM='{given}': a release is missing")


def test_an_unknown_release_gets_the_nearest(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, rocm: Path
) -> None:
    code, _, err = hipmem(capsys, monkeypatch, "size", "--rocm", "7.3", "-d", "MI210",
                          "dgetrs:n=8,nrhs=1")  # fmt: skip
    assert code == 2 and "no ROCm 7.3 here" in err and "did you mean 7.2?" in err


@pytest.mark.parametrize("release", ["2.11.0", "newest"])
def test_a_mistyped_setting_key_is_a_usage_error_with_the_nearest_key(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    torch_allocators: dict[str, object],
    release: str,
) -> None:
    """2.11's headers declare its keys: refused before any replay. The newest (2.14 on) declare
    the shared ones in a .cpp: PyTorch's own refusal becomes the same usage error."""
    from hipmem.replay.pytorch.allocator import TorchAllocator

    allocator = torch_allocators[release]
    assert isinstance(allocator, TorchAllocator)
    monkeypatch.setenv("HIPMEM_TORCH", allocator.version.split("+")[0])
    args = ("--alloc-conf", "expandable_segment:True", "--device", "H100")
    code, out, err = hipmem(capsys, monkeypatch, "check", "--from-snapshot", SNAPSHOT, *args)
    assert (code, out) == (2, "")
    assert err == (
        f"Error: PyTorch {allocator.version} has no allocator setting 'expandable_segment' (in "
        "'expandable_segment:True'); did you mean 'expandable_segments'?\n"
    )  # PyTorch's own "stopped: Unrecognized key" was exit 1, with no nearest key


def test_the_setting_keys_are_the_builds_own(torch_allocators: dict[str, object]) -> None:
    from hipmem.replay.pytorch.allocator import TorchAllocator
    from hipmem.replay.pytorch.setting_keys import accepted_keys

    newest = torch_allocators["2.11.0"]
    assert isinstance(newest, TorchAllocator)
    keys = accepted_keys(newest.include_dirs)
    assert keys is not None
    common = {"expandable_segments", "max_split_size_mb", "garbage_collection_threshold",
              "roundup_power2_divisions"}  # fmt: skip
    assert common | {"per_process_memory_fraction", "backend"} <= keys
    # written as two literals in the header ("release_lock_on_cud" "amalloc"), one key
    assert "release_lock_on_cudamalloc" in keys and "release_lock_on_cud" not in keys
    older = torch_allocators["2.9.1"]
    assert isinstance(older, TorchAllocator)
    assert accepted_keys(older.include_dirs) is None  # its CUDA keys live in its .cpp


def test_an_environment_variable_is_named_as_the_shell_sets_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "x y")
    code, _, err = hipmem(capsys, monkeypatch, "check", "--from-snapshot", SNAPSHOT,
                          "--device", "H100")  # fmt: skip
    assert code == 2 and err.startswith("Error: PYTORCH_CUDA_ALLOC_CONF='x y': expected")
    assert "--PYTORCH" not in err


def test_a_flag_is_named_once(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, _, err = hipmem(capsys, monkeypatch, "check", "--from-snapshot", SNAPSHOT,
                          "--device-memory", "1x")  # fmt: skip
    assert code == 2 and err.startswith("Error: --device-memory '1x': not a size")


def test_a_file_that_is_not_a_log_is_usage_as_the_exit_code_page_says(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, _, err = hipmem(capsys, monkeypatch, "log", "inspect", "README.md")
    assert code == 2 and "README.md:1: no RMM log header" in err
    page = (Path(__file__).resolve().parents[2] / "docs/exit-codes.md").read_text()
    row = next(line for line in page.splitlines() if line.startswith("| `hipmem log inspect`"))
    assert row.split("|")[4].strip().startswith("usage, or a file that is not an allocation log")


def test_replay_help_says_it_takes_snapshots(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, _ = hipmem(capsys, monkeypatch, "replay", "--help")
    assert code == 0
    assert "PyTorch memory" in out and "snapshot(s)" in out


def test_a_mistyped_setting_is_said_before_an_inferred_cap(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    torch_allocators: dict[str, object],
) -> None:
    """oom.pickle.gz ran out of memory under a cap that a replay infers and says; a usage
    error in the settings comes first and alone (#50)."""
    code, out, err = hipmem(capsys, monkeypatch, "replay", "tests/data/snapshots/oom.pickle.gz",
                            "-r", "torch:settings=expandable_segment:True", "--device", "H200",
                            "--torch", "2.11")  # fmt: skip
    assert (code, out) == (2, "")
    assert err.startswith(
        "Error: PyTorch 2.11.0+cu130 has no allocator setting 'expandable_segment'"
    )
    assert "inferred" not in err and err.count("\n") == 1
