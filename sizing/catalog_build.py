"""Generate `sizing/data/catalog.json` from the real rocBLAS/rocSOLVER headers.

The catalog is data: every routine's parameters exactly as the vendor headers declare them
(names, C types, which enum), plus the enums' values. It is parsed with libclang, so macros
and typedefs resolve as the compiler sees them. Which routines are included is the
`FAMILIES` selection below; adding routines means widening it, not writing code.

Run after `hipmem rocm fetch`:  python -m sizing.catalog_build [--check]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

CATALOG_PATH = Path(__file__).parent / "data" / "catalog.json"

# Routine families per library (names without precision prefix and batch suffix).
FAMILIES: dict[str, tuple[str, ...]] = {
    "rocsolver": ("getrf", "getrf_npvt", "getrs", "geqrf", "potrf", "syevd", "gesvd"),
    "rocblas": ("trsm", "gemm", "gemm_ex", "nrm2", "nrm2_ex", "dot", "dotu", "dotc", "dot_ex"),
}
# Precision prefixes, longest first so that `scnrm2` is `sc` + `nrm2`, not `s` + `cnrm2`.
PRECISIONS = ("sc", "dz", "bf", "s", "d", "c", "z", "h")
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
    """rocsolver_dgetrf_strided_batched -> library, precision, family, batch, ilp64."""
    library, _, rest = name.partition("_")
    if library not in FAMILIES:
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
    candidates = [("", rest)] + [(p, rest[len(p) :]) for p in PRECISIONS if rest.startswith(p)]
    for precision, family in candidates:
        family = family + ("_ex" if ex else "")
        if family in FAMILIES[library] and (precision == "") == ex:
            return {
                "library": library,
                "precision": precision,
                "family": family,
                "batch": batch,
                "ilp64": ilp64,
            }
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
    for cursor in unit.cursor.get_children():
        if cursor.kind == ci.CursorKind.FUNCTION_DECL:
            info = split_name(cursor.spelling)
            if info and cursor.result_type.spelling == "rocblas_status":
                params = [
                    {"name": arg.spelling, "c_type": arg.type.spelling}
                    | param_kind(arg.spelling, arg.type.spelling, arg.type.get_canonical().spelling)
                    for arg in cursor.get_arguments()
                ]
                routines[cursor.spelling] = info | {"params": params}
        elif cursor.kind == ci.CursorKind.ENUM_DECL and cursor.spelling.rstrip("_") in ENUMS:
            name = cursor.spelling.rstrip("_")
            enums[name] = {
                child.spelling.removeprefix(name + "_").removeprefix("rocblas_"): child.enum_value
                for child in cursor.get_children()
                if child.kind == ci.CursorKind.ENUM_CONSTANT_DECL
            }
    return {"enums": dict(sorted(enums.items())), "routines": dict(sorted(routines.items()))}


def _system_includes() -> list[str]:
    """libclang needs the compiler's own headers (float.h, stdint.h)."""
    found = sorted(Path("/usr/lib/gcc/x86_64-linux-gnu").glob("*/include"))
    return [f"-isystem{found[-1]}"] if found else []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--include-dir", type=Path, help="default: the offline fetch's headers")
    parser.add_argument("--check", action="store_true", help="fail if the file would change")
    options = parser.parse_args(argv)
    include_dir = options.include_dir
    if include_dir is None:
        from sizing.rocm_fetch import load_offline

        offline = load_offline()
        if offline is None:
            parser.error("no headers: run `hipmem rocm fetch` or pass --include-dir")
        include_dir = offline.include_dir
    catalog = parse_headers(include_dir)
    text = json.dumps(catalog, indent=1, sort_keys=False) + "\n"
    if options.check:
        same = CATALOG_PATH.is_file() and CATALOG_PATH.read_text() == text
        print("catalog is up to date" if same else "catalog differs from the headers")
        return 0 if same else 1
    CATALOG_PATH.parent.mkdir(exist_ok=True)
    CATALOG_PATH.write_text(text)
    print(f"wrote {len(catalog['routines'])} routines to {CATALOG_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
