"""Which PyTorch allocator variable is read (replay/explain/variables.py): the settings a check
takes from the environment, and the variables already set that would win over those a
recommendation writes. Each given a mapping, never this process's environment."""

from __future__ import annotations

import pytest

import hipmem
from hipmem.replay.errors import ReplayUsageError
from hipmem.replay.explain.variables import environment_warnings

SETTING = "expandable_segments:True"


def test_a_given_setting_string_wins_over_the_variables() -> None:
    chosen = hipmem.settings_to_check(SETTING, {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64"})
    assert (chosen.settings, chosen.source) == (SETTING, "--alloc-conf")


@pytest.mark.parametrize(
    ("environ", "settings", "source"),
    [
        ({}, "", "no PYTORCH_*_ALLOC_CONF set"),
        ({"PYTORCH_HIP_ALLOC_CONF": SETTING}, SETTING, "$PYTORCH_HIP_ALLOC_CONF"),
        # several that agree: named by the first PyTorch reads
        ({"PYTORCH_ALLOC_CONF": SETTING, "PYTORCH_CUDA_ALLOC_CONF": SETTING}, SETTING,
         "$PYTORCH_CUDA_ALLOC_CONF"),
        ({"PYTORCH_CUDA_ALLOC_CONF": ""}, "", "$PYTORCH_CUDA_ALLOC_CONF"),
    ],
)  # fmt: skip
def test_without_one_the_variables_set_are_checked(
    environ: dict[str, str], settings: str, source: str
) -> None:
    chosen = hipmem.settings_to_check(environ=environ)
    assert (chosen.settings, chosen.source) == (settings, source)


def test_variables_that_disagree_or_break_the_grammar_are_refused() -> None:
    with pytest.raises(ReplayUsageError, match=r"^PYTORCH_CUDA_ALLOC_CONF and PYTORCH_ALLOC_CONF"):
        hipmem.settings_to_check(
            environ={"PYTORCH_ALLOC_CONF": SETTING, "PYTORCH_CUDA_ALLOC_CONF": "x:1"}
        )
    with pytest.raises(hipmem.UsageError, match=r"^PYTORCH_HIP_ALLOC_CONF='x y'"):
        hipmem.settings_to_check(environ={"PYTORCH_HIP_ALLOC_CONF": "x y"})


def test_a_variable_a_build_reads_first_is_warned_about() -> None:
    cuda_set = {"PYTORCH_CUDA_ALLOC_CONF": ""}
    (rocm,) = environment_warnings("rocm", cuda_set)
    assert rocm.startswith("PYTORCH_CUDA_ALLOC_CONF is set: a ROCm build of PyTorch reads it")
    assert environment_warnings("both", cuda_set) == environment_warnings("cuda", cuda_set) == []
    (general,) = environment_warnings("both", {"PYTORCH_ALLOC_CONF": SETTING})
    assert general.startswith("PYTORCH_ALLOC_CONF is set: PyTorch 2.11 reads it only when")
    assert environment_warnings("rocm", {"PYTORCH_HIP_ALLOC_CONF": SETTING}) == []
