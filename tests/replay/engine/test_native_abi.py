"""The replay core's C ABI is checked before any call: a struct that changed on one side is
refused in one line instead of corrupting memory."""

from __future__ import annotations

import ctypes

import pytest

from hipmem.replay.engine import native


def _host_core() -> ctypes.CDLL:
    try:
        return native.load("host")
    except native.NativeCoreUnavailable as err:
        pytest.skip(f"no host replay core here: {err}")


def test_the_built_core_matches_the_bindings() -> None:
    native.check_abi(_host_core())


def test_a_struct_that_grew_on_one_side_is_refused() -> None:
    class GrownConfig(ctypes.Structure):
        _fields_ = [*native.Config._fields_, ("added", ctypes.c_int64)]

    with pytest.raises(
        native.NativeCoreUnavailable, match=r"hm_config is \d+ bytes, the bindings'"
    ):
        native.check_abi(_host_core(), {"config": GrownConfig})


def test_another_abi_version_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native, "ABI_VERSION", native.ABI_VERSION + 1)
    with pytest.raises(native.NativeCoreUnavailable, match="rebuild the core"):
        native.check_abi(_host_core())
