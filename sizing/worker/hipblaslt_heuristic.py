"""hipBLASLt's heuristic, asked inside the size-query worker (`worker.py`): hipblasLtCreate
once per library, then hipblasLtMatmulAlgoGetHeuristic for each matmul the parent sends.

Like the worker, it imports nothing but the standard library: the worker runs as a script
under `python -I -S`, possibly under another dynamic loader and glibc than hipmem, and loads
this file by its path on the first hipBLASLt request (`worker._load_beside`).
"""

from __future__ import annotations

import ctypes
from typing import Any


class _HeuristicResult(ctypes.Structure):
    """hipblasLtMatmulHeuristicResult_t (hipblaslt.h): the algo (16 opaque bytes and a size_t),
    then workspaceSize, state, wavesCount and int reserved[4]."""

    _fields_ = [
        ("algo_data", ctypes.c_uint8 * 16),
        ("algo_max_workspace_bytes", ctypes.c_size_t),
        ("workspace_size", ctypes.c_size_t),
        ("state", ctypes.c_int),
        ("waves_count", ctypes.c_float),
        ("reserved", ctypes.c_int * 4),
    ]


_DESC_TRANSA, _DESC_TRANSB = 0, 1  # hipblasLtMatmulDescAttributes_t
_LAYOUT_BATCH_COUNT, _LAYOUT_STRIDED_BATCH_OFFSET = 0, 1  # hipblasLtMatrixLayoutAttribute_t
_PREF_MAX_WORKSPACE_BYTES = 1  # hipblasLtMatmulPreferenceAttributes_t


class Hipblaslt:
    """hipblasLtCreate once, then hipblasLtMatmulAlgoGetHeuristic per call. The library
    allocates (and clears) a 25 MiB buffer per handle: one handle serves every call."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lib = ctypes.CDLL(path)
        self.handle = ctypes.c_void_p()
        status = self.lib.hipblasLtCreate(ctypes.byref(self.handle))
        if status != 0:
            raise RuntimeError(f"hipblasLtCreate returned status {status}")
        version = ctypes.c_int()
        self.lib.hipblasLtGetVersion(self.handle, ctypes.byref(version))
        self.version = version.value  # e.g. 100100 for 1.1.0 (the library's own number)

    def _set(self, setter: Any, target: Any, attribute: int, value: Any) -> int:
        return int(setter(target, attribute, ctypes.byref(value), ctypes.sizeof(value)))

    def _layout(self, data_type: int, rows: int, cols: int, batch: int) -> Any:
        layout = ctypes.c_void_p()
        create = self.lib.hipblasLtMatrixLayoutCreate
        create.argtypes = [
            ctypes.c_void_p,
            ctypes.c_int,
            ctypes.c_uint64,
            ctypes.c_uint64,
            ctypes.c_int64,
        ]
        status = create(ctypes.byref(layout), data_type, rows, cols, max(rows, 1))
        if status != 0:
            raise _SetupFailed("hipblasLtMatrixLayoutCreate", status)
        setter = self.lib.hipblasLtMatrixLayoutSetAttribute
        if batch > 1:
            count = ctypes.c_int32(batch)
            stride = ctypes.c_int64(rows * cols)
            for attribute, value in (
                (_LAYOUT_BATCH_COUNT, count),
                (_LAYOUT_STRIDED_BATCH_OFFSET, stride),
            ):
                status = self._set(setter, layout, attribute, value)
                if status != 0:
                    raise _SetupFailed("hipblasLtMatrixLayoutSetAttribute", status)
        return layout

    def heuristic(self, call: dict[str, Any]) -> dict[str, Any]:
        lib = self.lib
        made: list[tuple[Any, Any]] = []
        ran = -1
        try:
            desc = ctypes.c_void_p()
            status = lib.hipblasLtMatmulDescCreate(
                ctypes.byref(desc), call["compute_type"], call["scale_type"]
            )
            if status != 0:
                raise _SetupFailed("hipblasLtMatmulDescCreate", status)
            made.append((lib.hipblasLtMatmulDescDestroy, desc))
            for attribute, key in ((_DESC_TRANSA, "trans_a"), (_DESC_TRANSB, "trans_b")):
                value = ctypes.c_int32(call[key])
                status = self._set(lib.hipblasLtMatmulDescSetAttribute, desc, attribute, value)
                if status != 0:
                    raise _SetupFailed("hipblasLtMatmulDescSetAttribute", status)
            m, n, k, batch = call["m"], call["n"], call["k"], call["batch_count"]
            # Column-major, as hipBLASLt: op(A) is m x k, op(B) is k x n, C and D m x n.
            a_shape = (m, k) if call["trans_a"] == 111 else (k, m)
            b_shape = (k, n) if call["trans_b"] == 111 else (n, k)
            layouts = []
            for data_type, (rows, cols) in (
                (call["a_type"], a_shape),
                (call["b_type"], b_shape),
                (call["c_type"], (m, n)),
                (call["d_type"], (m, n)),
            ):
                layout = self._layout(data_type, rows, cols, batch)
                made.append((lib.hipblasLtMatrixLayoutDestroy, layout))
                layouts.append(layout)
            preference = ctypes.c_void_p()
            status = lib.hipblasLtMatmulPreferenceCreate(ctypes.byref(preference))
            if status != 0:
                raise _SetupFailed("hipblasLtMatmulPreferenceCreate", status)
            made.append((lib.hipblasLtMatmulPreferenceDestroy, preference))
            cap = ctypes.c_uint64(call["max_workspace_bytes"])
            status = self._set(
                lib.hipblasLtMatmulPreferenceSetAttribute,
                preference,
                _PREF_MAX_WORKSPACE_BYTES,
                cap,
            )
            if status != 0:
                raise _SetupFailed("hipblasLtMatmulPreferenceSetAttribute", status)
            wanted = max(1, int(call["algorithms"]))
            results = (_HeuristicResult * wanted)()
            returned = ctypes.c_int(0)
            status = lib.hipblasLtMatmulAlgoGetHeuristic(
                self.handle, desc, *layouts, preference, wanted, results, ctypes.byref(returned)
            )
            if call.get("run") and status == 0 and returned.value > 0:
                ran = self._matmul(desc, layouts, results[0])
        except _SetupFailed as failed:
            return {"stage": failed.stage, "status": failed.status}
        finally:
            for destroy, target in reversed(made):
                destroy(target)
        algorithms = [
            {
                "workspace_bytes": int(results[i].workspace_size),
                "id": bytes(results[i].algo_data).hex(),
            }
            for i in range(min(returned.value, wanted))
            if results[i].state == 0
        ]
        answer: dict[str, Any] = {"status": int(status), "algorithms": algorithms}
        if call.get("run"):
            answer["run_status"] = ran
        return answer

    def _matmul(self, desc: Any, layouts: list[Any], result: _HeuristicResult) -> int:
        """hipblasLtMatmul with the first algorithm and dummy host buffers, so that the library
        writes its call log (HIPBLASLT_LOG_MASK); no kernel can launch on the virtual device,
        so the status is an error, after the log line."""
        dummy = ctypes.create_string_buffer(1 << 16)
        alpha, beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
        algo = ctypes.create_string_buffer(bytes(result.algo_data), 24)
        ctypes.c_size_t.from_buffer(algo, 16).value = result.algo_max_workspace_bytes
        workspace = ctypes.create_string_buffer(max(1, result.workspace_size))
        function = self.lib.hipblasLtMatmul
        function.argtypes = [ctypes.c_void_p] * 14 + [ctypes.c_size_t, ctypes.c_void_p]
        return int(
            function(
                self.handle,
                desc,
                ctypes.byref(alpha),
                dummy,
                layouts[0],
                dummy,
                layouts[1],
                ctypes.byref(beta),
                dummy,
                layouts[2],
                dummy,
                layouts[3],
                algo,
                workspace,
                result.workspace_size,
                None,
            )
        )


class _SetupFailed(Exception):
    def __init__(self, stage: str, status: int) -> None:
        super().__init__(stage)
        self.stage, self.status = stage, status
