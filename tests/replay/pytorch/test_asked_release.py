"""Which PyTorch release is asked for (replay/pytorch/allocator.py): `torch=`/--torch, else
HIPMEM_TORCH, each named in an error by where it came from; no look-up, no download."""

from __future__ import annotations

from pathlib import Path

import pytest

from hipmem.replay.errors import ReplayUsageError
from hipmem.replay.pytorch.allocator import asked_release, releases_to_fetch

WHEEL = Path("torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl")  # never opened here


def test_the_argument_wins_over_the_variable() -> None:
    assert asked_release("2.11", {"HIPMEM_TORCH": "2.14"}) == ("2.11", "torch")
    assert asked_release(None, {"HIPMEM_TORCH": "2.14"}) == ("2.14", "HIPMEM_TORCH")
    assert asked_release(None, {"HIPMEM_TORCH": ""}) == (None, "HIPMEM_TORCH")


def test_a_fetch_takes_several_releases_each_checked_before_any_download() -> None:
    assert releases_to_fetch("2.11, 2.14", environ={}) == ["2.11", "2.14"]
    assert releases_to_fetch(None, environ={"HIPMEM_TORCH": "2.11"}) == ["2.11"]
    assert releases_to_fetch(None, environ={}) == [None]
    with pytest.raises(ReplayUsageError, match=r"^HIPMEM_TORCH='nan': not a PyTorch version"):
        releases_to_fetch(None, environ={"HIPMEM_TORCH": "2.11,nan"})
    with pytest.raises(ReplayUsageError, match=r"^torch='nan'"):
        releases_to_fetch("nan", environ={"HIPMEM_TORCH": "2.11"})


def test_a_wheel_is_one_release_and_says_its_own() -> None:
    assert releases_to_fetch(None, wheel=WHEEL, environ={"HIPMEM_TORCH": "2.11"}) == [None]
    with pytest.raises(ReplayUsageError, match="--wheel is one PyTorch"):
        releases_to_fetch("2.11,2.14", wheel=WHEEL, environ={})
