"""The offline ROCm fetch: what it resolves, what it unpacks, and that it is idempotent."""

from __future__ import annotations

from pathlib import Path

import pytest

from sizing import rocm_fetch
from sizing.errors import FetchError
from sizing.library_locator import locate


def test_print_uris_lines_are_parsed() -> None:
    listing = "\n".join(
        f"'http://deb.example/{name}_1.0-1_amd64.deb' {name}_1.0-1_amd64.deb {i + 10} "
        f"SHA256:{i:064x}"
        for i, name in enumerate(rocm_fetch.PACKAGES)
    )
    files = rocm_fetch._parse_print_uris("Reading package lists...\n" + listing)
    assert [file.name for file in files] == list(rocm_fetch.PACKAGES)
    assert files[0].size_bytes == 10 and files[0].version == "1.0-1"
    assert files[1].sha256 == f"{1:064x}"


def test_a_missing_package_is_named() -> None:
    with pytest.raises(FetchError, match="no package libamdhip64-dev, libc6"):
        rocm_fetch._parse_print_uris(
            "'http://x/librocblas4_1_amd64.deb' librocblas4_1_amd64.deb 1 SHA256:00"
        )


@pytest.mark.parametrize(
    ("name", "pattern", "expected"),
    [
        ("./usr/lib/x86_64-linux-gnu/librocblas.so.4.4", "./usr/lib/x86_64-linux-gnu/*.so*", True),
        ("./usr/lib/x86_64-linux-gnu/rocblas/4.4.1/library/Kernels.so-000-gfx90a.hsaco",
         "./usr/lib/x86_64-linux-gnu/*.so*", False),
        ("./usr/include/hip/amd_detail/x.h", "./usr/include/**", True),
        ("./usr/lib/x86_64-linux-gnu/rocblas/4.4.1/library/TensileLibrary_lazy_gfx90a.dat",
         "./usr/lib/x86_64-linux-gnu/rocblas/*/library/*_gfx90a.dat", True),
    ],
)  # fmt: skip
def test_member_patterns_do_not_cross_directories(name: str, pattern: str, expected: bool) -> None:
    assert rocm_fetch._matches(name, pattern) is expected


def test_unknown_arch_is_refused_before_any_download() -> None:
    with pytest.raises(FetchError, match="Debian ships no gemm data for gfx942"):
        rocm_fetch.fetch(archs=["gfx942"])


def test_the_cache_holds_libraries_and_gemm_data_but_no_gpu_code(rocm: Path) -> None:
    found = locate()
    assert found.loader is not None and found.loader.is_file()
    assert found.tensile_dir is not None
    assert any(found.tensile_dir.glob("*_gfx90a.dat"))
    gpu_code = [p for p in rocm.rglob("*") if p.suffix in (".co", ".hsaco")]
    assert gpu_code == []


def test_a_complete_fetch_needs_no_network(rocm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_network(*args: object) -> None:
        raise AssertionError("a complete fetch must not resolve packages again")

    monkeypatch.setattr(rocm_fetch, "resolve_packages", no_network)
    done = rocm_fetch.load_offline()
    assert done is not None
    again = rocm_fetch.fetch(archs=done.archs[:1])
    assert again.root == done.root
