"""The recording tests' PyTorch: 2.11.0's CUDA wheel, installed into the cache once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def record_torch(torch211: object) -> object:
    """PyTorch 2.11.0's CUDA wheel installed for recordings (once per cache), and its CUDA
    headers (torch211: the allocator fetch, which has them)."""
    from hipmem.replay.record.torch_site import installed_release

    return installed_release("2.11.0", sys.executable)


@pytest.fixture(scope="session")
def torchvision_site(record_torch: object) -> Path:
    """torchvision 0.26 (PyTorch 2.11's) and Pillow, for the committed ResNet script: installed
    into the cache once, beside nothing (the recorded interpreter is the test's, which has
    numpy), and put on the recording's PYTHONPATH."""
    from hipmem._core.build_cache import built_folder
    from hipmem._core.cache_root import cache_dir

    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    site = cache_dir() / "test-torchvision" / f"0.26.0-{tag}"

    def make(work: Path) -> None:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                        "--only-binary=:all:", "--no-compile", "--target", str(work),
                        "torchvision==0.26.0", "pillow==13.0.0"], check=True)  # fmt: skip

    return built_folder(site, make, what="torchvision 0.26.0 for the recording tests")
