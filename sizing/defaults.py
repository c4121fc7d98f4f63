"""Default values for the arguments a user leaves out, as data: one expression per parameter.

Leading dimensions default to the smallest valid value, strides to dense packing, batch_count
and increments to 1, scalars to 1, and enums to rocsolver-bench's defaults. Dimensions
(m, n, k, nrhs) have no default: the size is the question. Expressions are evaluated with
`simpleeval` over the arguments known so far (user-given first), so a rule may use any of them.
Enum values appear under their canonical names (`none`, `upper`, `f32_r`, ...).
"""

from __future__ import annotations

# Rules for every routine, unless its family overrides them.
COMMON: dict[str, str] = {
    "batch_count": "1",
    "incx": "1",
    "incy": "1",
    "alpha": "1",
    "beta": "1",
    "stridex": "n * incx",
    "stridey": "n * incy",
    "stride_x": "n * incx",
    "stride_y": "n * incy",
    "uplo": "'upper'",
    "side": "'left'",
    "diag": "'non_unit'",
    "trans": "'none'",
    "transA": "'none'",
    "transB": "'none'",
    "evect": "'none'",
    "left_svect": "'none'",
    "right_svect": "'none'",
    "fast_alg": "'outofplace'",
    "algo": "'standard'",
    "solution_index": "0",
    "flags": "0",
}

_GEMM = {
    "lda": "max(1, m if transA == 'none' else k)",
    "ldb": "max(1, k if transB == 'none' else n)",
    "ldc": "max(1, m)",
    "ldd": "ldc",
    "stride_a": "lda * (k if transA == 'none' else m)",
    "stride_b": "ldb * (n if transB == 'none' else k)",
    "stride_c": "ldc * n",
    "stride_d": "ldd * n",
}


def accumulate_type(datatype: str) -> str:
    """Half and bfloat16 inputs accumulate in f32 (the "HPA" gemm), int8 in int32."""
    return {"f16_r": "f32_r", "bf16_r": "f32_r", "i8_r": "i32_r"}.get(datatype, datatype)


# Functions the rules may call.
FUNCTIONS = {"max": max, "min": min, "accumulate_type": accumulate_type}

FAMILY: dict[str, dict[str, str]] = {
    "getrf": {"lda": "max(1, m)", "strideA": "lda * n", "strideP": "min(m, n)"},
    "getrf_npvt": {"lda": "max(1, m)", "strideA": "lda * n"},
    "getrs": {
        "lda": "max(1, n)",
        "ldb": "max(1, n)",
        "strideA": "lda * n",
        "strideP": "n",
        "strideB": "ldb * nrhs",
    },
    "geqrf": {"lda": "max(1, m)", "strideA": "lda * n", "strideP": "min(m, n)"},
    "potrf": {"lda": "max(1, n)", "strideA": "lda * n"},
    "syevd": {"lda": "max(1, n)", "strideA": "lda * n", "strideD": "n", "strideE": "n"},
    "gesvd": {
        "lda": "max(1, m)",
        "ldu": "m if left_svect in ('all', 'singular') else 1",
        "ldv": "n if right_svect == 'all' else (min(m, n) if right_svect == 'singular' else 1)",
        "strideA": "lda * n",
        "strideS": "min(m, n)",
        "strideU": "ldu * (m if left_svect == 'all' else min(m, n))",
        "strideV": "ldv * n",
        "strideE": "max(1, min(m, n) - 1)",
    },
    "trsm": {
        "lda": "max(1, m if side == 'left' else n)",
        "ldb": "max(1, m)",
        "stride_a": "lda * (m if side == 'left' else n)",
        "stride_b": "ldb * n",
    },
    "gemm": _GEMM,
    "gemm_ex": _GEMM
    | {
        "a_type": "'f32_r'",
        "b_type": "a_type",
        "c_type": "'i32_r' if a_type == 'i8_r' else a_type",
        "d_type": "c_type",
        "compute_type": "accumulate_type(a_type)",
    },
    "nrm2_ex": {"x_type": "'f32_r'", "result_type": "x_type", "execution_type": "'f32_r'"},
    "dot_ex": {
        "x_type": "'f32_r'",
        "y_type": "x_type",
        "result_type": "x_type",
        "execution_type": "accumulate_type(x_type)",
    },
}


def rules_for(family: str) -> dict[str, str]:
    """Every default rule that applies to a routine family."""
    return COMMON | FAMILY.get(family, {})
