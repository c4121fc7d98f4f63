"""Which routines hipmem executes to find their minimum workspace, and why; their buffers.

Finding a call's least workable workspace means running it for real (on the virtual device:
kernels launch as no-ops, `sizing/minimum.py`). That is only honest where the host code's
path does not depend on results computed on the device, which on the virtual device are
zeros. So which routines run is data, with the reason for each; every other routine's
minimum is its size query, and the answer says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .spec import Call

# family -> why executing it is sound (its host code does not read device results).
EXECUTED: dict[str, str] = {
    "trsm": "rocBLAS reports the optimal size; with less it runs a slower algorithm "
    "(perf_degraded) down to its inverse blocks plus a fallback buffer",
    "trsm_ex": "as trsm, with the caller's optional invA",
    "gemv": "host code chooses kernels from sizes only",
    "gemm": "Tensile picks a kernel from sizes and the workspace given",
    "gemm_ex": "Tensile picks a kernel from sizes and the workspace given; f16/bf16 with f32 "
    "compute switches to a kernel that needs no workspace",
}

# family -> why not: the minimum is the size query.
NOT_EXECUTED: dict[str, str] = {
    "gesvd": "its host code loops on values computed on the device (157,287 device reads in "
    "one call), which are zeros here: the path would not be the real one",
    "syevj": "its host code loops on convergence computed on the device",
    "stedc": "its host code branches on values computed on the device",
}
DEFAULT_NOT_EXECUTED = (
    "not executed by hipmem (only the routines in sizing/calls/executed_routines.py are): "
    "the query is the minimum the library asks for"
)

_ELEMENT_BYTES = {"h": 2, "s": 4, "d": 8, "c": 8, "z": 16}
_TYPE_BYTES = {"f16": 2, "bf16": 2, "f32": 4, "f64": 8, "i8": 1, "i32": 4, "u8": 1, "u32": 4}


def execution_reason(call: Call) -> tuple[bool, str]:
    """Whether the call is executed, and why (or why not)."""
    family = call.routine.family
    if call.routine.library != "rocblas":
        reason = NOT_EXECUTED.get(family)
        return False, reason or (
            "rocSOLVER routines are not executed: their size query is their exact minimum "
            "(measured: getrf, geqrf, potrf, syevd fail with memory_error one byte below it)"
        )
    if family in EXECUTED:
        return True, EXECUTED[family]
    return False, NOT_EXECUTED.get(family, DEFAULT_NOT_EXECUTED)


@dataclass(frozen=True)
class Buffer:
    """One pointer argument: `elements_bytes` per matrix/vector, `count` of them."""

    matrix_bytes: int
    batch: str  # "plain", "batched" (an array of per-batch pointers) or "strided_batched"
    batch_count: int
    stride_bytes: int = 0

    def encoded(self) -> list[Any]:
        """As the worker takes it: ["buffer", bytes] or ["pointer_array", bytes, count]."""
        if self.batch == "batched":
            return ["pointer_array", self.matrix_bytes, self.batch_count]
        if self.batch == "strided_batched" and self.batch_count > 1:
            return ["buffer", self.stride_bytes * (self.batch_count - 1) + self.matrix_bytes]
        return ["buffer", self.matrix_bytes]


def _element_bytes(call: Call, name: str) -> int:
    type_arg = {"a": "a_type", "b": "b_type", "c": "c_type", "d": "d_type"}.get(name.lower())
    if call.routine.precision:
        return _ELEMENT_BYTES[call.routine.precision[0]]
    data_type = str(call.args.get(type_arg or "", call.args.get("compute_type", "f64_r")))
    base, _, kind = data_type.partition("_")
    return _TYPE_BYTES.get(base, 8) * (2 if kind == "c" else 1)


def _is(call: Call, name: str, value: str) -> bool:
    return str(call.args.get(name, "")).lower() in {value.lower(), value[:1].lower()}


def _vector_elements(length: int, increment: int) -> int:
    return 0 if length <= 0 else 1 + (length - 1) * abs(increment or 1)


def _elements(call: Call, name: str) -> int:
    """How many elements the pointer argument `name` spans (one batch)."""
    a = call.args
    get = lambda key: int(a.get(key, 0))  # noqa: E731
    family = call.routine.family
    if family in ("trsm", "trsm_ex"):
        if name == "A":
            return get("lda") * (get("m") if _is(call, "side", "left") else get("n"))
        if name == "B":
            return get("ldb") * get("n")
        if name == "invA":
            return get("invA_size")
    if family in ("gemm", "gemm_ex"):
        upper = name.upper()
        if upper == "A":
            return get("lda") * (get("k") if _is(call, "transA", "none") else get("m"))
        if upper == "B":
            return get("ldb") * (get("n") if _is(call, "transB", "none") else get("k"))
        if upper in ("C", "D"):
            return get(f"ld{name.lower()}") * get("n")
    if family == "gemv":
        plain = _is(call, "trans", "none")
        if name == "A":
            return get("lda") * get("n")
        if name == "x":
            return _vector_elements(get("n") if plain else get("m"), get("incx"))
        if name == "y":
            return _vector_elements(get("m") if plain else get("n"), get("incy"))
    raise KeyError(f"{call.routine.name}: no size rule for argument {name}")


def buffers(call: Call) -> dict[str, Buffer]:
    """Each pointer argument's real size, by name (for an executed routine)."""
    batch = call.routine.batch
    count = int(call.args.get("batch_count", 1))
    result: dict[str, Buffer] = {}
    for param in call.routine.params:
        if param.kind != "pointer":
            continue
        size = _elements(call, param.name) * _element_bytes(call, param.name)
        names = (f"stride_{param.name.lower()}", f"stride{param.name}")
        stride_name = next((key for key in names if key in call.args), None)
        stride = int(call.args[stride_name]) if stride_name else 0
        result[param.name] = Buffer(size, batch, count, stride * _element_bytes(call, param.name))
    return result
