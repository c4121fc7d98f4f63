"""Shared fixtures. Sizing tests run the real rocBLAS/rocSOLVER through the virtual device:
the `rocm` fixture makes sure the offline libraries are in the cache (the same
`hipmem rocm fetch` path users take; a no-op when the README's set-up already ran it)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture(scope="session")
def rocm() -> Iterator[Path]:
    """The offline ROCm root, fetched on first use."""
    from sizing import rocm_fetch

    offline = rocm_fetch.load_offline() or rocm_fetch.fetch()
    yield offline.root


@pytest.fixture(scope="session")
def shared_logs() -> Path:
    logs = SHARED / "logs"
    if not logs.is_dir():
        pytest.skip(f"the shared logs are not beside the repo ({logs})")
    return logs


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No ROCm location from the developer's own environment leaks into a test."""
    for name in ("HIPMEM_ROCM_LIBDIR", "ROCM_PATH", "ROCM_HOME", "ROCBLAS_DEVICE_MEMORY_SIZE"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def cli_env(**extra: str) -> dict[str, str]:
    """The environment for a `hipmem` subprocess: this one, plus `extra`."""
    env = dict(os.environ)
    env.update(extra)
    return env
