"""The whole catalog through the real libraries on a virtual device: every routine is callable
with its defaults and answers a size or a named vendor status, never a crash of the tool.
Also: the committed catalog is exactly what the fetched headers give."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from hipmem.sizing.calls.result import SIZE_STATUSES, CallResult
from hipmem.sizing.calls.spec import Call, make_call
from hipmem.sizing.defaults import rules_for
from hipmem.sizing.rocm.catalog import Routine, load_catalog
from hipmem.sizing.session import SizingSession
from tests.cli_run import hipmem as run_hipmem

REPO = Path(__file__).parents[3]
# A dimension the catalog has no default for (m, n, k, nrhs, nb, nnz...) gets this in the walk.
WALK_DIMENSION = 64

# rocBLAS families the issue names; each must come in every batch form.
ISSUE_ROCBLAS_FAMILIES = (
    "asum", "dot", "iamax", "iamin", "nrm2", "nrm2_ex", "dot_ex", "gemv", "tbmv", "tpmv",
    "trmv", "trsv", "hemv", "symv", "trsm", "symm", "syrk", "syr2k", "syrkx", "trmm", "hemm",
    "herk", "her2k", "herkx", "gemm", "gemm_ex", "trtri",
)  # fmt: skip


def _walk_call(routine: Routine) -> Call:
    rules = rules_for(routine.family)
    given = {
        param.name: WALK_DIMENSION
        for param in routine.params
        if param.user_settable and param.name not in rules
    }
    return make_call(routine, given)


@pytest.fixture(scope="module")
def walk() -> list[CallResult]:
    catalog = load_catalog()
    calls = [_walk_call(routine) for routine in catalog.routines.values()]
    with SizingSession("MI210") as session:
        return session.size_many(calls)


def test_every_routine_answers_a_size_or_a_named_status(walk: list[CallResult]) -> None:
    catalog = load_catalog()
    assert len(walk) == len(catalog.routines)
    status_names = set(catalog.enums["rocblas_status"])
    for result in walk:
        name = result.call.routine.name
        if result.status in SIZE_STATUSES:
            assert result.bytes is not None and result.bytes >= 0, name
            assert result.bytes % 64 == 0, f"{name}: {result.bytes} is not a multiple of 64"
        elif result.status == "crashed":
            # The vendor died, the tool did not: the error names the call.
            assert result.error is not None and name in str(result.error)
        else:
            assert result.status in status_names, f"{name}: {result.status}"
            assert result.error is not None and f"rocblas_status_{result.status}" in str(
                result.error
            )


def test_most_routines_answer_a_size(walk: list[CallResult]) -> None:
    """The defaults are valid arguments: only known exceptions answer something else."""
    others = Counter(
        (r.call.routine.family, r.status) for r in walk if r.status not in SIZE_STATUSES
    )
    # csrrf_* need an rfinfo object (made by rocsolver_create_rfinfo with rocSPARSE); the
    # worker passes a dummy block and the library dereferences what it holds.
    allowed = {"csrrf_analysis", "csrrf_refactchol", "csrrf_refactlu", "csrrf_solve"}
    assert {family for family, _ in others} <= allowed, others
    sized = sum(1 for r in walk if r.status in SIZE_STATUSES)
    assert sized >= len(walk) - 8


def test_routines_that_need_no_workspace_answer_zero(walk: list[CallResult]) -> None:
    by_name = {r.call.routine.name: r for r in walk}
    # A 64x64x64 sgemm is a Tensile call without any workspace; a 64x64 dsyevd needs some.
    assert by_name["rocblas_sgemm"].bytes == 0
    assert by_name["rocblas_sgemm"].status == "size_unchanged"
    dsyevd = by_name["rocsolver_dsyevd"].bytes
    assert dsyevd is not None and dsyevd > 0
    # nrm2 reduces in one 64-byte partial-result block at n=64.
    assert by_name["rocblas_dnrm2"].bytes == 64


def test_catalog_covers_the_issue_families_in_every_form() -> None:
    catalog = load_catalog()
    forms: dict[str, set[str]] = {}
    for routine in catalog.routines.values():
        if routine.library == "rocblas":
            forms.setdefault(routine.family, set()).add(routine.batch)
    for family in ISSUE_ROCBLAS_FAMILIES:
        assert forms.get(family) == {"plain", "batched", "strided_batched"}, family
    precisions = {r.precision for r in catalog.routines.values() if r.family == "gemm"}
    assert {"h", "s", "d", "c", "z"} <= precisions
    solver = [r for r in catalog.routines.values() if r.library == "rocsolver"]
    # Every rocSOLVER routine, including the ones rocsolver-bench logs most.
    families = {r.family for r in solver}
    assert {"getrf", "potrf", "syevd", "gesvd", "geqrf", "getrs", "sytrf", "gels"} <= families
    assert "set_alg_mode" not in {r.short_name for r in solver}


def test_a_missing_dimension_is_a_usage_error() -> None:
    run = run_hipmem("size", "--device", "MI210", "rocblas_sgemv", cwd=REPO)
    assert run.returncode == 2
    assert "missing arguments m, n" in run.stderr


def test_catalog_is_what_the_headers_give() -> None:
    if importlib.util.find_spec("clang") is None:
        pytest.skip("libclang (the `clang` Python package) is not installed")
    from hipmem.sizing.rocm.catalog import catalog_releases
    from hipmem.sizing.rocm.fetch import cached_releases

    if not cached_releases():
        pytest.skip("no fetched ROCm headers: run `hipmem rocm fetch`")
    run = subprocess.run(
        [sys.executable, "-m", "hipmem.sizing.rocm.catalog_build", "--check"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.splitlines() == [
        f"ROCm {release}: catalog is up to date" for release in cached_releases()
    ]
    assert set(cached_releases()) <= set(catalog_releases())  # every release has a catalog
