"""Generate `sizing/rocm/data/catalog-<release>.json` from each ROCm release's real headers.

The catalog is data: every routine's parameters exactly as the vendor headers declare them
(names, C types, which enum), plus the enums' values. It is parsed with libclang, so macros
and typedefs resolve as the compiler sees them. Which routines are included is the selection
below (every rocSOLVER routine; the rocBLAS families in `ROCBLAS_FAMILIES`); adding routines
means widening it, not writing code.

One catalog per release, because routines and arguments may change between releases.
Run after `hipmem rocm fetch`:  python -m hipmem.sizing.rocm.catalog_build [--rocm 7.2] [--check]
(without --rocm: every release in the cache).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).parent / "data"


def catalog_file(release: str) -> Path:
    return DATA_DIR / f"catalog-{release}.json"


# rocBLAS: the routine families that can use workspace (names without precision prefix and
# batch suffix). Every precision and batch form the header declares comes with each family.
ROCBLAS_FAMILIES = (
    # Level 1 reductions
    "asum", "dot", "dotu", "dotc", "dot_ex", "dotc_ex", "iamax", "iamin", "nrm2", "nrm2_ex",
    # Level 2
    "gemv", "tbmv", "tpmv", "trmv", "trsv", "trsv_ex", "hemv", "symv",
    # Level 3 and extensions
    "trsm", "trsm_ex", "symm", "syrk", "syr2k", "syrkx", "trmm", "hemm", "herk", "her2k",
    "herkx", "gemm", "gemm_ex", "trtri",
)  # fmt: skip
# rocSOLVER: every function that returns rocblas_status and takes the handle first, except the
# handle-level settings below. Its precision is always one letter (s, d, c, z).
ROCSOLVER_AUXILIARY = ("set_alg_mode", "get_alg_mode")
LIBRARIES = ("rocblas", "rocsolver")
# Precision prefixes, longest first so that `scnrm2` is `sc` + `nrm2`, not `s` + `cnrm2`.
# hsh/hss/tss/tst are the mixed-precision batched gemv forms (half/bfloat16 in, float compute).
PRECISIONS = ("hsh", "hss", "tss", "tst", "sc", "dz", "bf", "s", "d", "c", "z", "h")
ROCSOLVER_PRECISIONS = ("s", "d", "c", "z")
BATCH_SUFFIXES = ("_strided_batched", "_batched")
# Enums whose values users name; the catalog keeps their enumerators.
ENUMS = (
    "rocblas_operation",
    "rocblas_fill",
    "rocblas_diagonal",
    "rocblas_side",
    "rocblas_svect",
    "rocblas_evect",
    "rocblas_workmode",
    "rocblas_datatype",
    "rocblas_gemm_algo",
    "rocblas_status",
    "rocblas_storev",
    "rocblas_direct",
    "rocblas_erange",
    "rocblas_eorder",
    "rocblas_esort",
    "rocblas_eform",
    "rocblas_srange",
    "rocblas_pivot",
    "rocblas_layer_mode",
    "rocblas_pointer_mode",
    "rocblas_atomics_mode",
)
_SCALAR_NAMES = {"alpha", "beta", "result"}  # pointers to host memory the library may read


def split_name(name: str) -> dict[str, Any] | None:
    """rocsolver_dgetrf_strided_batched -> library, precision, family, batch, ilp64.

    None when the name is not a routine the catalog selects (see ROCBLAS_FAMILIES and
    ROCSOLVER_AUXILIARY).
    """
    library, _, rest = name.partition("_")
    if library not in LIBRARIES:
        return None
    ilp64 = rest.endswith("_64")
    rest = rest.removesuffix("_64")
    ex = rest.endswith("_ex")
    rest = rest.removesuffix("_ex")
    batch = "plain"
    for suffix in BATCH_SUFFIXES:
        if rest.endswith(suffix):
            batch, rest = suffix[1:], rest.removesuffix(suffix)
            break
    found = _split_precision(library, rest, ex)
    if found is None:
        return None
    precision, family = found
    return {
        "library": library,
        "precision": precision,
        "family": family,
        "batch": batch,
        "ilp64": ilp64,
    }


def _split_precision(library: str, rest: str, ex: bool) -> tuple[str, str] | None:
    """`dgetrf` -> ("d", "getrf"); `isamax` -> ("s", "iamax"); `gemm` (of gemm_ex) -> ("", ...)."""
    if library == "rocsolver":
        precision, family = rest[:1], rest[1:]
        if ex or precision not in ROCSOLVER_PRECISIONS or rest in ROCSOLVER_AUXILIARY:
            return None
        return precision, family
    if ex:
        family = rest + "_ex"
        return ("", family) if family in ROCBLAS_FAMILIES else None
    for precision in PRECISIONS:
        # i<precision>amax: the index-returning reductions put the precision after the "i".
        for prefix, family_start in ((precision, ""), ("i" + precision, "i")):
            if rest.startswith(prefix):
                family = family_start + rest[len(prefix) :]
                if family in ROCBLAS_FAMILIES:
                    return precision, family
    return None


def _scalar_kind(c_type: str) -> str:
    """The element type a scalar pointer points to, as the worker packs it."""
    base = re.sub(r"\bconst\b|\*", "", c_type).strip()
    return {
        "float": "f32",
        "double": "f64",
        "rocblas_half": "f16",
        "rocblas_bfloat16": "bf16",
        "rocblas_float_complex": "c32",
        "rocblas_double_complex": "c64",
        "void": "by_type",
        "rocblas_int": "i32",
        "int": "i32",
        "int64_t": "i64",
    }.get(base, "raw")


def param_kind(name: str, c_type: str, canonical: str) -> dict[str, str]:
    """How the worker passes a parameter: kind and, for enums/scalars, which one."""
    canonical = canonical.replace("const ", "").strip()
    if c_type.replace("const", "").strip() == "rocblas_handle":
        return {"kind": "handle"}
    if "*" in canonical or "[" in canonical:
        if name in _SCALAR_NAMES:
            return {"kind": "host_scalar", "scalar": _scalar_kind(c_type)}
        return {"kind": "pointer"}
    if canonical.startswith("enum "):
        return {"kind": "enum", "enum": canonical.removeprefix("enum ").rstrip("_")}
    simple = {
        "int": "i32",
        "long": "i64",
        "long long": "i64",
        "unsigned int": "u32",
        "float": "f32",
        "double": "f64",
        "signed char": "i8",
        "char": "i8",
    }
    if canonical in simple:
        return {"kind": simple[canonical]}
    raise ValueError(f"{name}: unsupported parameter type {c_type!r} ({canonical})")


def parse_headers(include_dir: Path) -> dict[str, Any]:
    """Read rocblas.h and rocsolver.h with libclang; return the catalog as a dict."""
    import clang.cindex as ci  # a dev-time dependency (the test extra), not a runtime one

    index = ci.Index.create()
    args = ["-x", "c", "-D__HIP_PLATFORM_AMD__", f"-I{include_dir}", *_system_includes()]
    unit = index.parse(str(include_dir / "rocsolver" / "rocsolver.h"), args=args)
    errors = [d for d in unit.diagnostics if d.severity >= ci.Diagnostic.Error]
    if errors:
        raise RuntimeError(f"libclang could not parse the headers: {errors[0]}")
    routines: dict[str, Any] = {}
    enums: dict[str, dict[str, int]] = {}
    others: set[str] = set()  # API functions outside the catalog (need no workspace)
    for cursor in unit.cursor.get_children():
        is_function = cursor.kind == ci.CursorKind.FUNCTION_DECL
        if is_function and cursor.spelling.partition("_")[0] in LIBRARIES:
            others.add(cursor.spelling)  # the selected ones are taken out below
        if cursor.kind == ci.CursorKind.FUNCTION_DECL:
            info = split_name(cursor.spelling)
            arguments = list(cursor.get_arguments())
            takes_handle = bool(arguments) and arguments[0].type.spelling == "rocblas_handle"
            if info and takes_handle and cursor.result_type.spelling == "rocblas_status":
                params = [
                    {"name": arg.spelling, "c_type": arg.type.spelling}
                    | param_kind(arg.spelling, arg.type.spelling, arg.type.get_canonical().spelling)
                    for arg in arguments
                ]
                routines[cursor.spelling] = info | {"params": params}
        elif cursor.kind == ci.CursorKind.ENUM_DECL and cursor.spelling.rstrip("_") in ENUMS:
            name = cursor.spelling.rstrip("_")
            enums[name] = {
                child.spelling.removeprefix(name + "_").removeprefix("rocblas_"): child.enum_value
                for child in cursor.get_children()
                if child.kind == ci.CursorKind.ENUM_CONSTANT_DECL
            }
    others -= set(routines)
    return {
        "versions": _header_versions(include_dir),
        "enums": dict(sorted(enums.items())),
        "routines": dict(sorted(routines.items())),
        "other_functions": sorted(others),
    }


def _header_versions(include_dir: Path) -> dict[str, str]:
    """The library versions the headers declare (ROCBLAS_VERSION_MAJOR, ...)."""
    versions = {}
    for library, header in (
        ("rocblas", include_dir / "rocblas" / "internal" / "rocblas-version.h"),
        ("rocsolver", include_dir / "rocsolver" / "rocsolver-version.h"),
    ):
        text = header.read_text()
        parts = [
            re.search(rf"#define {library.upper()}_VERSION_{part}\s+(\d+)", text)
            for part in ("MAJOR", "MINOR", "PATCH")
        ]
        versions[library] = ".".join(match.group(1) if match else "0" for match in parts)
    return versions


def _system_includes() -> list[str]:
    """libclang needs the compiler's own headers (float.h, stdint.h)."""
    found = sorted(Path("/usr/lib/gcc/x86_64-linux-gnu").glob("*/include"))
    return [f"-isystem{found[-1]}"] if found else []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rocm", action="append", help="release (default: all in the cache)")
    parser.add_argument("--include-dir", type=Path, help="headers (with a single --rocm)")
    parser.add_argument("--check", action="store_true", help="fail if a file would change")
    options = parser.parse_args(argv)
    from .fetch import cached_releases, load_offline

    releases = options.rocm or cached_releases()
    if not releases:
        parser.error("no headers: run `hipmem rocm fetch` or pass --rocm and --include-dir")
    if options.include_dir is not None and len(releases) != 1:
        parser.error("--include-dir goes with one --rocm")
    status = 0
    for release in releases:
        include_dir = options.include_dir
        if include_dir is None:
            offline = load_offline(release)
            if offline is None:
                parser.error(f"no headers of ROCm {release}: hipmem rocm fetch --rocm {release}")
            include_dir = offline.include_dir
        status |= _write_or_check(release, parse_headers(include_dir), options.check)
    return status


def _write_or_check(release: str, catalog: dict[str, Any], check: bool) -> int:
    path = catalog_file(release)
    text = json.dumps(catalog, indent=1, sort_keys=False) + "\n"
    if check:
        same = path.is_file() and path.read_text() == text
        print(f"ROCm {release}: " + ("catalog is up to date" if same else "catalog differs"))
        return 0 if same else 1
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    print(f"wrote {len(catalog['routines'])} routines to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
