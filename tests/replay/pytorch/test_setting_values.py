"""The boundary values hipmem's setting grammar takes (hipmem/_core/alloc_conf.py) taken by the
real PyTorch allocator too, oldest and newest release, on the virtual GPU; and the values it
refuses refused by hipmem, in its own words, before PyTorch runs.

(tests/core/test_alloc_conf_values.py holds the grammar to PyTorch's parsing with generated
values; this holds that parsing to the real thing at the edges.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.cli_run import hipmem
from tests.snapshot_reference import SNAPSHOTS

REPO = Path(__file__).resolve().parents[3]
OOM = SNAPSHOTS / "oom.pickle.gz"  # the smallest committed snapshot
VARIABLES = ("PYTORCH_HIP_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")

# Each key at its edges, in settings every release from 2.4 on knows.
TAKEN_AT_THE_EDGES = (
    "max_split_size_mb:21,garbage_collection_threshold:0.99,"
    "roundup_power2_divisions:[1:0,2:1,>:1024],expandable_segments:False,"
    "release_lock_on_cudamalloc:True,pinned_use_cuda_host_register:True,"
    "pinned_num_register_threads:128",
    "max_split_size_mb:2147483647,garbage_collection_threshold:.01,"
    "roundup_power2_divisions:1073741824,expandable_segments:True,backend:native",
)


@pytest.mark.parametrize("release", ["oldest", "newest"])
@pytest.mark.parametrize("settings", TAKEN_AT_THE_EDGES)
def test_what_hipmem_takes_the_real_allocator_takes(
    torch_allocators: dict[str, Any], release: str, settings: str
) -> None:
    version = torch_allocators[release].version
    # The device memory given: no cap is inferred from the recorded error, none refused.
    done = hipmem("replay", str(OOM), "-r", f"torch:settings={settings}", "--torch", version,
                  "--device-memory", "100GiB", cwd=REPO, unset=VARIABLES)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "stopped" not in done.stderr


@pytest.mark.parametrize(
    ("settings", "line"),
    [
        ("max_split_size_mb:1e400", "max_split_size_mb: '1e400' is not a whole number of MiB"),
        ("max_split_size_mb:20", "max_split_size_mb: '20' is below 21 MiB"),
        ("garbage_collection_threshold:2", "garbage_collection_threshold: '2' is not a number"),
        ("roundup_power2_divisions:3", "roundup_power2_divisions: '3' is not a power of 2"),
    ],
)
def test_what_hipmem_refuses_never_reaches_pytorch(settings: str, line: str) -> None:
    # No --torch and no allocator fixture: the refusal comes before one is looked for.
    replay = hipmem("replay", str(OOM), "-r", f"torch:settings={settings}", cwd=REPO,
                    unset=VARIABLES)  # fmt: skip
    explain = hipmem("explain", str(OOM), "--alloc-conf", settings, cwd=REPO, unset=VARIABLES)
    assert (replay.returncode, explain.returncode) == (2, 2)
    spec = f"torch:settings={settings}"
    assert replay.stderr.startswith(f"Error: --resource {spec!r}: settings={settings!r}: {line}")
    assert explain.stderr.startswith(f"Error: --alloc-conf {settings!r}: {line}")
    for done in (replay, explain):
        assert len(done.stderr.splitlines()) == 1 and "PyTorch" not in done.stderr.split(":")[0]


def test_a_key_the_oldest_release_lacks_is_named_as_hipmem_names_it(
    torch_allocators: dict[str, Any],
) -> None:
    # 2.4 says "Unrecognized CachingAllocator option: KEY" (2.9 on: "Unrecognized key 'KEY'"),
    # and its headers do not list its keys: the refusal is PyTorch's, the line hipmem's.
    version = torch_allocators["oldest"].version
    done = hipmem("replay", str(OOM), "-r", "torch:settings=max_non_split_rounding_mb:21",
                  "--torch", version, "--device-memory", "100GiB", cwd=REPO,
                  unset=VARIABLES)  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.startswith(
        f"Error: PyTorch {version} has no allocator setting 'max_non_split_rounding_mb'"
    )
