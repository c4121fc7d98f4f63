"""An upgrade comparison never hides a failure: with the real rocBLAS of ROCm 6.4 (Debian's
build has no gfx942 gemm data, so an f16 gemm aborts it on an MI300X) and of 7.2, the session
of 6.4 is incomplete and says which call, and the fix names the release and arch that
failed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.test_messages_lead import hipmem

GEMM = "rocblas_gemm_ex:m=1024,n=1024,k=16384,a_type=f16_r"
GETRF = "rocsolver_dgetrf:m=1024,n=1024"
ARGS = ("size", "--rocm", "6.4,7.2", "--device", "MI300X", GEMM, GETRF)


def test_the_session_of_a_release_with_a_failed_call_is_incomplete(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    rocm64: Path,
    rocm72: Path,
) -> None:
    code, out, err = hipmem(capsys, monkeypatch, *ARGS)
    assert code == 1
    lines = out.splitlines()
    session = next(line for line in lines if "incomplete" in line.split())
    assert "4,732,160" in session and "same" not in session  # 7.2's session, no change shown
    named = " ".join(out.split())
    assert f"session of ROCm 6.4 incomplete: 1 call could not be sized: {GEMM} (crashed)" in named
    # the fix is for 6.4 on gfx942, which no fetch brings, not a fetch of the other release
    assert "no gemm data for gfx942" in err and "ROCm 6.4" in err
    assert "fetch --rocm 7.2 --arch gfx942" not in err
    assert "Debian's build of ROCm 6.4 has none for gfx942, no fetch brings it" in err
    assert all(len(line) <= 80 or len(line.split()) == 1 for line in lines)


def test_the_json_says_the_session_is_incomplete(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    rocm64: Path,
    rocm72: Path,
) -> None:
    code, out, _ = hipmem(capsys, monkeypatch, *ARGS, "--json")
    assert code == 1
    payload = json.loads(out)
    assert payload["session_bytes"] == {"6.4": None, "7.2": 4_732_160}
    assert payload["session_incomplete"] == {"6.4": [GEMM]}


def test_a_release_that_has_the_arch_is_named_in_its_own_fix() -> None:
    from hipmem.sizing.call_answers import gemm_data_fix

    fix = gemm_data_fix("gfx942", "7.2")
    assert fix == "; `hipmem rocm fetch --rocm 7.2 --arch gfx942` brings it)"
    assert "ROCm 7.2 has it" in gemm_data_fix("gfx942", "6.4")
