"""Shared fixtures. Sizing tests run the real rocBLAS/rocSOLVER through the virtual device:
the `rocm` fixture makes sure every ROCm release hipmem knows is in the cache with the gemm
data of every arch it has (the same `hipmem rocm fetch` path users take; the README's first
command fetched only ROCm 7.2 with gfx942's data, so the rest is fetched here).

A release whose pinned packages have left Debian's archive cannot be fetched: the tests of
that release (`rocm_release("6.4")`) skip with the fetch's own reason, and the suite fails
only when no release at all can be fetched."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


_UNAVAILABLE: dict[str, str] = {}  # release -> why it could not be fetched


def _releases() -> dict[str, Path]:
    """Every release's root, fetched on first use (once per test session)."""
    from hipmem.sizing.errors import LibraryNotFound, PinnedVersionGone
    from hipmem.sizing.rocm import fetch as rocm_fetch
    from hipmem.sizing.rocm.releases import RELEASES

    roots: dict[str, Path] = {}
    for release in RELEASES:
        if release.name in _UNAVAILABLE:
            continue
        try:
            try:
                offline = rocm_fetch.load_offline(release.name)
            except LibraryNotFound:  # damaged: the fetch repairs it
                offline = None
            if offline is None or not set(release.gemm_archs) <= set(offline.archs):
                offline = rocm_fetch.fetch(release.name)  # every arch the release has
        except PinnedVersionGone as err:
            _UNAVAILABLE[release.name] = str(err)
            continue
        roots[release.name] = offline.root
    return roots


@pytest.fixture(scope="session")
def rocm_roots() -> dict[str, Path]:
    roots = _releases()
    if not roots:
        pytest.fail("no ROCm release can be fetched: " + "; ".join(_UNAVAILABLE.values()))
    return roots


@pytest.fixture(scope="session")
def rocm(rocm_roots: dict[str, Path]) -> Iterator[Path]:
    """The newest offline ROCm root (what answers when no release is asked for)."""
    yield rocm_roots[max(rocm_roots, key=lambda name: tuple(map(int, name.split("."))))]


def rocm_release(roots: dict[str, Path], name: str) -> Path:
    """The root of one release, or a skip naming why the archive no longer has it."""
    if name not in roots:
        pytest.skip(f"ROCm {name} cannot be fetched: {_UNAVAILABLE.get(name, 'not fetched')}")
    return roots[name]


@pytest.fixture(scope="session")
def rocm64(rocm_roots: dict[str, Path]) -> Path:
    return rocm_release(rocm_roots, "6.4")


@pytest.fixture(scope="session")
def rocm72(rocm_roots: dict[str, Path]) -> Path:
    return rocm_release(rocm_roots, "7.2")


@pytest.fixture(scope="session")
def hipblaslt(rocm_roots: dict[str, Path]) -> dict[str, Path]:
    """Every hipBLASLt build in the cache (fetched with gfx90a and gfx1100 data if not)."""
    from hipmem.sizing.hipblaslt.fetch import fetch_hipblaslt
    from hipmem.sizing.hipblaslt.releases import HIPBLASLT_RELEASES

    return {
        r.version: fetch_hipblaslt(r.version, ["gfx90a", "gfx1100"]).root
        for r in HIPBLASLT_RELEASES
        if r.host_rocm in rocm_roots
    }


@pytest.fixture(scope="session")
def shared_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder where a documented session several pages show is run once per test run,
    whichever test worker asks first (tests/shared_runs.py)."""
    from tests.shared_runs import run_folder

    return run_folder(tmp_path_factory)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that read ../shared carry the `shared` marker, so that CI can run them beside it
    after the full suite ran in a lone copy (.ci/run): the one fixture below is their only way
    to it. The slow ones run first."""
    for item in items:
        if "shared_logs" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.shared)
    # The tests marked slow first (in their own order): a minute-long test collected last
    # (an empty cache's ROCm fetch) would run alone at the end while the other worker idles.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(autouse=True)
def _environment_kept() -> Iterator[None]:
    """Each test leaves the process's environment as it found it. A library may write to it:
    Dask's nanny sets MALLOC_TRIM_THRESHOLD_ in its own process before it starts a worker, and
    every later test's subprocess inherited it (a fleet test run before
    tests/core/test_freed_memory.py made glibc hand freed arrays back by itself)."""
    kept = dict(os.environ)
    yield
    if os.environ != kept:
        os.environ.clear()
        os.environ.update(kept)


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


# ---- PyTorch's allocator for the virtual GPU ------------------------------------------------


# The releases the tests replay with: the oldest hipmem drives, 2.9 (no memory fraction in its
# settings), 2.11 (the committed snapshots' own) and the newest pip may install (None).
TORCH_RELEASES = ("2.4", "2.9", "2.11.0", None)


@pytest.fixture(scope="session")
def torch_allocators() -> dict[str, object]:
    """PyTorch's allocators the tests use, fetched on first use (once per test session, the
    same `hipmem torch fetch` path users take; a check of the cache when it is there), by
    public version (2.11.0), plus "oldest" and "newest". Each one's virtual GPU is built here
    too, so that no test's output depends on whether an earlier test built it ("building the
    virtual GPU ..., once" on stderr)."""
    from hipmem.replay.pytorch import allocator as torch_allocator
    from hipmem.replay.pytorch import fetch as torch_fetch
    from hipmem.replay.pytorch import release as torch_release
    from hipmem.replay.virtual import build as virtual_build

    found: dict[str, object] = {}
    for asked in TORCH_RELEASES:
        name = None if asked is None else torch_fetch.fetched_match(asked)
        try:
            fetched = None if name is None else torch_fetch.load_fetched(name)
        except torch_fetch.TorchNotFetched:  # damaged: the fetch repairs it
            fetched = None
        if fetched is None:  # the newest is asked of the index each session (pip, seconds)
            fetched = torch_fetch.fetch(asked)
        allocator = torch_allocator.locate(fetched.version)
        virtual_build.build(allocator)
        found[fetched.version] = allocator
        if asked == f"{torch_release.OLDEST.major}.{torch_release.OLDEST.minor}":
            found["oldest"] = found[fetched.version]
        if asked is None:
            found["newest"] = found[fetched.version]
    return found


@pytest.fixture(scope="session")
def torch211(torch_allocators: dict[str, object]) -> object:
    """PyTorch 2.11's allocator: the version the committed snapshots were recorded with."""
    return torch_allocators["2.11.0"]


RMM_RELEASES = ("25.4.0", "24.12.1")


@pytest.fixture(scope="session")
def rmm_releases() -> dict[str, object]:
    """RMM's releases the virtual-GPU tests replay, fetched on first use (once per test session,
    the same `hipmem rmm fetch` path users take: a check of the cache when it is there) and
    compiled (once per release and cache), by version."""
    from hipmem.replay.rmm import build as rmm_build
    from hipmem.replay.rmm import fetch as rmm_fetch

    found: dict[str, object] = {}
    for version in RMM_RELEASES:
        try:
            fetched = rmm_fetch.locate(version)
        except rmm_fetch.RmmNotFetched:  # not fetched, or damaged: the fetch repairs it
            fetched = rmm_fetch.fetch(version)
        rmm_build.build(fetched)
        found[version] = fetched
    return found
