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
    # rocSOLVER eigen/singular value selection: everything, so bounds are ignored.
    "erange": "'all'",
    "srange": "'all'",
    "eorder": "'entire'",
    "esort": "'ascending'",
    "svect": "'none'",
    "itype": "'ax'",
    "vl": "0",
    "vu": "1",
    "il": "1",
    "iu": "n",
    "abstol": "0",
    "max_sweeps": "100",
    # Householder reflector layout (larfb, larft, ormbr, ...), and plane rotations (lasr).
    "storev": "'column_wise'",
    "direct": "'forward_direction'",
    "pivot": "'variable'",
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

# --- rocSOLVER building blocks --------------------------------------------------------------
_MN = {"lda": "max(1, m)", "strideA": "lda * n", "strideP": "min(m, n)"}  # general m x n
_SQUARE = {"lda": "max(1, n)", "strideA": "lda * n", "strideP": "n"}  # n x n
_SOLVE = _SQUARE | {"ldb": "max(1, n)", "strideB": "ldb * nrhs"}  # n x nrhs right-hand sides
_TRIDIAG = _SQUARE | {"strideD": "n", "strideE": "n"}  # eigenvalues D, off-diagonal E
_SELECTED = {"ldz": "max(1, n)", "strideW": "n", "strideZ": "ldz * n", "strideF": "n"}
_PAIR = {"ldb": "max(1, n)", "strideB": "ldb * n"}  # the B of a generalized problem
_SVD = {
    "lda": "max(1, m)",
    "ldu": "m if left_svect in ('all', 'singular') else 1",
    "ldv": "n if right_svect == 'all' else (min(m, n) if right_svect == 'singular' else 1)",
    "strideA": "lda * n",
    "strideS": "min(m, n)",
    "strideU": "ldu * (m if left_svect == 'all' else min(m, n))",
    "strideV": "ldv * n",
    "strideE": "max(1, min(m, n) - 1)",
}
_BIDIAG = dict.fromkeys(("strideD", "strideE", "strideQ"), "min(m, n)")
_LDA_M = {"lda": "max(1, m)"}
_LDA_N = {"lda": "max(1, n)"}
_LDC_N = {"ldc": "max(1, n)"}
_LDB_N = {"ldb": "max(1, n)"}
_Q_ROWS = "(m if side == 'left' else n)"  # order of Q when it multiplies C from `side`
_APPLY_Q = {"lda": f"max(1, {_Q_ROWS})", "ldc": "max(1, m)"}  # ormqr, ormql, ...
_APPLY_LQ = {"lda": "max(1, k)", "ldc": "max(1, m)"}  # ormlq, orml2, ...
_BLOCK_TRIDIAG = {  # geblttrf/geblttrs: nblocks blocks of nb x nb
    "lda": "max(1, nb)",
    "ldb": "max(1, nb)",
    "ldc": "max(1, nb)",
    "ldx": "max(1, nb)",
    "strideA": "lda * nb * nblocks",
    "strideB": "ldb * nb * nblocks",
    "strideC": "ldc * nb * nblocks",
    "strideX": "ldx * nblocks * nrhs",
}
_INTERLEAVED = {  # the batch index runs fastest: inc >= batch_count
    "inca": "batch_count",
    "incb": "batch_count",
    "incc": "batch_count",
    "incx": "batch_count",
    "lda": "inca * nb",
    "ldb": "incb * nb",
    "ldc": "incc * nb",
    "ldx": "incx * nb",
    "strideA": "lda * nb",
    "strideB": "ldb * nb",
    "strideC": "ldc * nb",
    "strideX": "ldx * nblocks",
}

ROCSOLVER_FAMILY: dict[str, dict[str, str]] = {
    **dict.fromkeys(
        ("getf2", "getrf", "geqr2", "geqrf", "geql2", "geqlf", "gelq2", "gelqf", "gerq2"), _MN
    ),
    **dict.fromkeys(("gerqf", "getf2_npvt", "getrf_npvt"), _MN),
    **dict.fromkeys(
        ("potf2", "potrf", "potri", "lauum", "trtri", "sytf2", "sytrf", "getri", "getri_npvt"),
        _SQUARE,
    ),
    **dict.fromkeys(
        ("getri_outofplace", "getri_npvt_outofplace"),
        _SQUARE | {"ldc": "max(1, n)", "strideC": "ldc * n"},
    ),
    **dict.fromkeys(("getrs", "gesv", "potrs", "posv"), _SOLVE),
    "gels": {
        "lda": "max(1, m)",
        "ldb": "max(1, m, n)",
        "strideA": "lda * n",
        "strideB": "ldb * nrhs",
    },
    **dict.fromkeys(("gebd2", "gebrd"), _MN | _BIDIAG),
    **dict.fromkeys(("gesvd", "gesdd", "gesvdj"), _SVD),
    "gesvdx": _SVD
    | {
        "ldu": "m if left_svect == 'singular' else 1",
        "ldv": "min(m, n) if right_svect == 'singular' else 1",
        "strideU": "ldu * min(m, n)",
        "strideF": "min(m, n)",
        "iu": "min(m, n)",
    },
    **dict.fromkeys(
        ("sytd2", "sytrd", "hetd2", "hetrd", "syev", "syevd", "syevdj", "heev", "heevd", "heevdj"),
        _TRIDIAG,
    ),
    **dict.fromkeys(("syevx", "syevdx", "syevj", "heevx", "heevdx", "heevj"), _SQUARE | _SELECTED),
    **dict.fromkeys(("sygv", "sygvd", "sygvdj", "hegv", "hegvd", "hegvdj"), _TRIDIAG | _PAIR),
    **dict.fromkeys(
        ("sygvx", "sygvdx", "sygvj", "hegvx", "hegvdx", "hegvj"), _SQUARE | _PAIR | _SELECTED
    ),
    **dict.fromkeys(("sygs2", "sygst", "hegs2", "hegst"), _SQUARE | _PAIR),
    **dict.fromkeys(("org2r", "orgqr", "org2l", "orgql", "orgl2", "orglq", "orgbr"), _LDA_M),
    **dict.fromkeys(("ung2r", "ungqr", "ung2l", "ungql", "ungl2", "unglq", "ungbr"), _LDA_M),
    **dict.fromkeys(("orgtr", "ungtr", "lasyf"), _LDA_N),
    **dict.fromkeys(
        ("orm2r", "ormqr", "orm2l", "ormql", "ormtr", "unm2r", "unmqr", "unm2l", "unmql", "unmtr"),
        _APPLY_Q,
    ),
    **dict.fromkeys(("orml2", "ormlq", "unml2", "unmlq"), _APPLY_LQ),
    **dict.fromkeys(
        ("ormbr", "unmbr"),
        _APPLY_Q | {"lda": f"max(1, {_Q_ROWS} if storev == 'column_wise' else min({_Q_ROWS}, k))"},
    ),
    "bdsqr": {
        "nv": "0",
        "nu": "0",
        "nc": "0",
        "ldv": "max(1, n) if nv > 0 else 1",
        "ldu": "max(1, nu)",
        "ldc": "max(1, n) if nc > 0 else 1",
    },
    "bdsvdx": {"ldz": "max(1, 2 * n) if svect != 'none' else 1"},
    **dict.fromkeys(("stedc", "steqr"), _LDC_N),
    "stein": {"ldz": "max(1, n)"},
    "labrd": {"lda": "max(1, m)", "ldx": "max(1, m)", "ldy": "max(1, n)"},
    "larf": {"lda": "max(1, m)"},
    "larfb": {
        "lda": "max(1, m)",
        "ldv": f"max(1, {_Q_ROWS} if storev == 'column_wise' else k)",
        "ldt": "max(1, k)",
    },
    "larft": {"ldv": "max(1, n if storev == 'column_wise' else k)", "ldt": "max(1, k)"},
    "lasr": {"lda": "max(1, m)"},
    "laswp": {"k1": "1", "lda": "max(1, k2)"},
    "latrd": {"lda": "max(1, n)", "ldw": "max(1, n)"},
    **dict.fromkeys(("geblttrf_npvt", "geblttrs_npvt"), _BLOCK_TRIDIAG),
    **dict.fromkeys(("geblttrf_npvt_interleaved", "geblttrs_npvt_interleaved"), _INTERLEAVED),
    **dict.fromkeys(("csrrf_analysis", "csrrf_solve"), _LDB_N),
}

# --- rocBLAS ----------------------------------------------------------------------------------
_A_ORDER = "(m if side == 'left' else n)"  # order of the triangular/symmetric A on `side`
_SIDED = {  # trsm, trmm, symm, hemm: A is A_ORDER square, B and C are m x n
    "lda": f"max(1, {_A_ORDER})",
    "ldb": "max(1, m)",
    "ldc": "max(1, m)",
    **dict.fromkeys(("stride_a", "stride_A"), f"lda * {_A_ORDER}"),
    **dict.fromkeys(("stride_b", "stride_B"), "ldb * n"),
    **dict.fromkeys(("stride_c", "stride_C"), "ldc * n"),
}
_RANK_K_A = {  # syrk, herk: C is n x n, A is n x k (or k x n transposed)
    "lda": "max(1, n if transA == 'none' else k)",
    "ldc": "max(1, n)",
    "stride_A": "lda * (k if transA == 'none' else n)",
    "stride_C": "ldc * n",
}
_RANK_2K = {  # syr2k, syrkx, her2k, herkx: A and B are n x k (or k x n)
    "lda": "max(1, n if trans == 'none' else k)",
    "ldb": "max(1, n if trans == 'none' else k)",
    "ldc": "max(1, n)",
    "stride_A": "lda * (k if trans == 'none' else n)",
    "stride_B": "ldb * (k if trans == 'none' else n)",
    "stride_C": "ldc * n",
}
_SQUARE_VECTOR = {  # trmv, trsv, symv, hemv: A is n x n
    "lda": "max(1, n)",
    **dict.fromkeys(("strideA", "stride_A"), "lda * n"),
}

_DOT_EX = {
    "x_type": "'f32_r'",
    "y_type": "x_type",
    "result_type": "x_type",
    "execution_type": "accumulate_type(x_type)",
}

ROCBLAS_FAMILY: dict[str, dict[str, str]] = {
    "gemv": {
        "lda": "max(1, m)",
        "strideA": "lda * n",
        "stridex": "(n if transA == 'none' else m) * incx",
        "stridey": "(m if transA == 'none' else n) * incy",
    },
    "tbmv": {"lda": "k + 1", "stride_A": "lda * n"},
    "tpmv": {"stride_A": "n * (n + 1) // 2"},
    **dict.fromkeys(("trmv", "trsv", "symv", "hemv"), _SQUARE_VECTOR),
    "trsm": _SIDED,
    "trsm_ex": _SIDED | {"invA_size": "0", "stride_invA": "0", "compute_type": "'f32_r'"},
    "trmm": _SIDED,
    "symm": _SIDED,
    "hemm": _SIDED,
    "syrk": _RANK_K_A,
    "herk": _RANK_K_A,
    **dict.fromkeys(("syr2k", "syrkx", "her2k", "herkx"), _RANK_2K),
    "trtri": {
        "lda": "max(1, n)",
        "ldinvA": "max(1, n)",
        "stride_a": "lda * n",
        "strideA": "lda * n",  # rocSOLVER's trtri spells it so
        "stride_invA": "ldinvA * n",
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
    **dict.fromkeys(("dot_ex", "dotc_ex"), _DOT_EX),
}

# Family names are unique across the two libraries except trtri (rocBLAS and rocSOLVER name the
# same operation; both take uplo, diag, n, lda and rocBLAS adds ldinvA), so one table serves.
FAMILY: dict[str, dict[str, str]] = ROCSOLVER_FAMILY | ROCBLAS_FAMILY


def rules_for(family: str) -> dict[str, str]:
    """Every default rule that applies to a routine family."""
    return COMMON | FAMILY.get(family, {})
