"""The recording tests' PyTorch: 2.11.0's CUDA wheel, installed into the cache once."""

from __future__ import annotations

import sys

import pytest


@pytest.fixture(scope="session")
def record_torch(torch211: object) -> object:
    """PyTorch 2.11.0's CUDA wheel installed for recordings (once per cache), and its CUDA
    headers (torch211: the allocator fetch, which has them)."""
    from hipmem.replay.record.torch_site import installed_release

    return installed_release("2.11.0", sys.executable)
