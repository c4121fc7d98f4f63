"""The size-query worker: the only process that loads the vendor libraries.

It runs as a separate process (see `sizing/worker/process.py`) so that a vendor abort or crash
never takes hipmem down; it may run under a different dynamic loader and glibc than the
parent, so it imports nothing but the standard library and is started as a script.

Protocol: JSON lines. The worker first writes a `ready` object (library versions, optional
symbols). Then, per request line:
  {"op": "size", "calls": [CALL, ...]}    -> one line per call, in order, flushed each:
      {"status": INT, "bytes": INT} or {"missing_symbol": NAME}
  {"op": "size_points", "call": CALL, "slots": [INDEX, ...], "points": [[VALUE, ...], ...]}
      -> one line per point, as "size" answers: CALL with the argument at each slot replaced
      by the point's value (a sweep: the call is sent once, then only what changes).
  {"op": "session", "calls": [CALL, ...]} -> {"status": INT, "bytes": INT}: all calls inside
      one size query on one handle: the running maximum the library itself keeps.
  {"op": "run", "calls": [CALL, ...]}     -> one {"status": INT} line per call: each call made
      for real, outside any size query (null device pointers: the library logs the call, then
      rejects it). Used to make rocBLAS write its call logs, which it skips in query mode
      (`sizing/calls/log_recorder.py`, `hipmem.record_call_logs`).
  {"op": "execute", "call": CALL, "workspace_bytes": S} -> {"status": INT, "launches": INT,
      "hip_errors": INT, "first_error": STR, "kernels": [NAME, ...]}: the call made for real
      with a workspace of its own of S bytes (rocblas_set_workspace), on the virtual device in
      execute mode (kernels launch as no-ops and are recorded by name; sizing/minimum.py).
      Pointer arguments are ["buffer", BYTES] or ["pointer_array", BYTES, COUNT]: zero-filled
      memory of that size, reserved lazily (mmap MAP_NORESERVE: untouched pages cost nothing).
  {"op": "rocsolver_log", "action": "begin"|"end"} -> {"status": INT}: rocSOLVER logs only
      between rocsolver_log_begin() and rocsolver_log_end() (ROCSOLVER_LAYER picks what).
  {"op": "hipblaslt", "library": PATH, "calls": [MATMUL, ...]} -> one line per call:
      {"status": INT, "algorithms": [{"workspace_bytes": INT, "id": HEX}, ...]} from
      hipblasLtMatmulAlgoGetHeuristic (ranked, best first), or {"stage": NAME, "status": INT}
      when a set-up step failed. MATMUL has m, n, k, trans_a, trans_b (hipblasOperation_t),
      a/b/c/d_type (hipDataType), compute_type (hipblasComputeType_t), scale_type,
      batch_count, max_workspace_bytes and algorithms (how many to ask for).
CALL is {"function": NAME, "library": "rocblas"|"rocsolver", "args": [[KIND, VALUE], ...]}.
Because answers are flushed one by one, the parent knows which call was running when the
worker died: the first one it has no answer for.
"""

from __future__ import annotations

import ctypes
import json
import os
import struct
import sys
from typing import Any

STATUS_SIZE_INCREASED = 9
STATUS_SIZE_UNCHANGED = 10
OPTIONAL_SYMBOLS = (
    "rocblas_set_device_memory_size",
    "rocblas_is_user_managing_device_memory",
    "rocblas_set_workspace",
    "rocblas_is_managing_device_memory",
)

_POINTER_KINDS = {"buffer": "pointer", "pointer_array": "pointer"}  # executed calls' buffers
_CTYPES = {
    "i8": ctypes.c_int8,
    "i32": ctypes.c_int32,
    "i64": ctypes.c_int64,
    "u32": ctypes.c_uint32,
    "f32": ctypes.c_float,
    "f64": ctypes.c_double,
    "handle": ctypes.c_void_p,
    "pointer": ctypes.c_void_p,
    "scalar": ctypes.c_void_p,
}


def _pack_scalar(element: str, value: float) -> bytes:
    """A host scalar as the library reads it; 16 bytes so any element type fits."""
    if element == "f16":
        packed = struct.pack("<e", value)
    elif element == "bf16":
        packed = struct.pack("<f", value)[2:]  # bfloat16 is the top half of a float32
    elif element in ("f32", "c32"):
        packed = struct.pack("<f", value) + (b"\0" * 4 if element == "c32" else b"")
    elif element == "i32":
        packed = struct.pack("<i", int(value))
    elif element == "i64":
        packed = struct.pack("<q", int(value))
    else:  # f64, c64, or unknown: a double is the widest real
        packed = struct.pack("<d", value)
    return packed.ljust(16, b"\0")


_PROT_READ_WRITE = 0x3
_MAP_PRIVATE_ANONYMOUS_NORESERVE = 0x02 | 0x20 | 0x4000
_MAP_FAILED = ctypes.c_void_p(-1).value
_KERNEL_LIST_BYTES = 1 << 22


class LazyBuffers:
    """Zero-filled memory for one executed call, reserved lazily and unmapped afterwards."""

    def __init__(self) -> None:
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.libc.mmap.restype = ctypes.c_void_p
        self.libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                   ctypes.c_int, ctypes.c_int, ctypes.c_long]  # fmt: skip
        self.libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        self.maps: list[tuple[int, int]] = []

    def get(self, size_bytes: int) -> int | None:
        """An address of `size_bytes` zeroed bytes (None for 0 bytes: a null pointer)."""
        if size_bytes <= 0:
            return None
        address = self.libc.mmap(None, size_bytes, _PROT_READ_WRITE,
                                 _MAP_PRIVATE_ANONYMOUS_NORESERVE, -1, 0)  # fmt: skip
        if address in (None, _MAP_FAILED):
            raise MemoryError(f"mmap of {size_bytes} bytes failed")
        self.maps.append((address, size_bytes))
        return int(address)

    def pointer_array(self, size_bytes: int, count: int) -> int | None:
        """An array of `count` device pointers, each to its own `size_bytes` buffer."""
        if count <= 0:
            return None
        array = self.get(count * ctypes.sizeof(ctypes.c_void_p))
        pointers = (ctypes.c_void_p * count).from_address(array or 0)
        for index in range(count):
            pointers[index] = self.get(size_bytes)
        return array

    def release(self) -> None:
        for address, size_bytes in self.maps:
            self.libc.munmap(address, size_bytes)
        self.maps.clear()


class Worker:
    def __init__(self, rocblas_path: str, rocsolver_path: str) -> None:
        self.rocblas = ctypes.CDLL(rocblas_path)
        self.rocsolver = ctypes.CDLL(rocsolver_path) if rocsolver_path else None
        self.handle = ctypes.c_void_p()
        status = self.rocblas.rocblas_create_handle(ctypes.byref(self.handle))
        if status != 0:
            raise RuntimeError(f"rocblas_create_handle returned status {status}")
        self.functions: dict[tuple[str, tuple[str, ...]], Any] = {}
        self.keep_alive: list[Any] = []
        self._dummy = ctypes.create_string_buffer(1 << 16)
        self.dummy_pointer = ctypes.cast(self._dummy, ctypes.c_void_p)

    def ready(self) -> dict[str, Any]:
        versions = {"rocblas": self._version(self.rocblas, "rocblas_get_version_string")}
        if self.rocsolver is not None:
            versions["rocsolver"] = self._version(self.rocsolver, "rocsolver_get_version_string")
        optional = {name: hasattr(self.rocblas, name) for name in OPTIONAL_SYMBOLS}
        default_bytes = ctypes.c_size_t()
        self.rocblas.rocblas_get_device_memory_size(self.handle, ctypes.byref(default_bytes))
        return {
            "ready": True,
            "versions": versions,
            "optional_symbols": optional,
            "handle_default_bytes": default_bytes.value,
        }

    @staticmethod
    def _version(library: Any, symbol: str) -> str:
        text = ctypes.create_string_buffer(256)
        getattr(library, symbol)(text, ctypes.c_size_t(len(text)))
        return text.value.decode().rstrip(".")

    def _function(self, call: dict[str, Any]) -> Any:
        kinds = tuple(argument[0] for argument in call["args"])
        key = (call["function"], kinds)
        if key not in self.functions:
            library = self.rocsolver if call["library"] == "rocsolver" else self.rocblas
            function = getattr(library, call["function"])  # AttributeError: missing symbol
            function.argtypes = [_CTYPES[_POINTER_KINDS.get(kind, kind)] for kind in kinds]
            function.restype = ctypes.c_int
            self.functions[key] = function
        return self.functions[key]

    def _arguments(self, call: dict[str, Any]) -> list[Any]:
        values: list[Any] = []
        for kind, value in call["args"]:
            if kind == "handle":
                values.append(self.handle)
            elif kind == "pointer":
                # Never read in query mode, but a few routines (tbmv) check them for null
                # before answering: give each a zeroed host block, not null.
                values.append(self.dummy_pointer)
            elif kind == "scalar":
                buffer = ctypes.create_string_buffer(_pack_scalar(value[0], value[1]), 16)
                self.keep_alive.append(buffer)
                values.append(ctypes.cast(buffer, ctypes.c_void_p))
            else:
                values.append(value)
        return values

    def size_one(self, call: dict[str, Any]) -> dict[str, Any]:
        try:
            function = self._function(call)
        except AttributeError:
            return {"missing_symbol": call["function"]}
        arguments = self._arguments(call)
        self.rocblas.rocblas_start_device_memory_size_query(self.handle)
        status = function(*arguments)
        size = ctypes.c_size_t()
        self.rocblas.rocblas_stop_device_memory_size_query(self.handle, ctypes.byref(size))
        self.keep_alive.clear()
        return {"status": status, "bytes": size.value}

    def size_points(self, call: dict[str, Any], slots: list[int], points: list[list[Any]]) -> None:
        """Size `call` at every point, writing each answer as it comes (see the protocol)."""
        try:
            function = self._function(call)
        except AttributeError:
            for _ in points:
                _write({"missing_symbol": call["function"]})
            return
        arguments = self._arguments(call)
        size = ctypes.c_size_t()
        size_pointer = ctypes.byref(size)
        start = self.rocblas.rocblas_start_device_memory_size_query
        stop = self.rocblas.rocblas_stop_device_memory_size_query
        handle = self.handle
        sys.stdout.flush()
        out = sys.stdout.fileno()
        for point in points:
            for slot, value in zip(slots, point, strict=True):
                arguments[slot] = value
            start(handle)
            status = function(*arguments)
            stop(handle, size_pointer)
            # Each answer written at once (not buffered): after a crash, the parent knows
            # which point was running. The same JSON as _write, formatted directly.
            os.write(out, b'{"status": %d, "bytes": %d}\n' % (status, size.value))
        self.keep_alive.clear()

    def run(self, call: dict[str, Any]) -> dict[str, Any]:
        try:
            function = self._function(call)
        except AttributeError:
            return {"missing_symbol": call["function"]}
        status = function(*self._arguments(call))
        self.keep_alive.clear()
        return {"status": status}

    def execute(self, call: dict[str, Any], workspace_bytes: int) -> dict[str, Any]:
        """Make the call for real with a user workspace of `workspace_bytes` (1 = "none":
        rocblas_set_workspace(h, ptr, 0) would hand the memory back to rocBLAS)."""
        try:
            function = self._function(call)
        except AttributeError:
            return {"missing_symbol": call["function"]}
        begin = getattr(self.rocblas, "hipmemExecuteBegin", None)
        end = getattr(self.rocblas, "hipmemExecuteEnd", None)
        if begin is None or end is None:
            return {"not_virtual": True}  # a real HIP runtime: nothing is executed here
        end.restype = ctypes.c_ulong
        memory = LazyBuffers()
        try:
            arguments = self._execute_arguments(call, memory)
            workspace = memory.get(max(1, workspace_bytes))
            set_status = self.rocblas.rocblas_set_workspace(
                self.handle, ctypes.c_void_p(workspace), ctypes.c_size_t(max(1, workspace_bytes))
            )
            begin()
            status = function(*arguments)
            errors = ctypes.c_ulong()
            first_error = ctypes.create_string_buffer(256)
            kernels = ctypes.create_string_buffer(_KERNEL_LIST_BYTES)
            launches = end(ctypes.byref(errors), first_error, ctypes.c_size_t(256),
                           kernels, ctypes.c_size_t(_KERNEL_LIST_BYTES))  # fmt: skip
        finally:
            # Back to a rocBLAS-managed workspace before the user's memory goes away.
            self.rocblas.rocblas_set_workspace(self.handle, None, ctypes.c_size_t(0))
            memory.release()
            self.keep_alive.clear()
        return {
            "status": status,
            "set_workspace_status": set_status,
            "launches": launches,
            "hip_errors": errors.value,
            "first_error": first_error.value.decode(errors="replace"),
            "kernels": kernels.value.decode(errors="replace").split("\n")[:-1],
        }

    def _execute_arguments(self, call: dict[str, Any], memory: LazyBuffers) -> list[Any]:
        values: list[Any] = []
        plain: dict[str, Any] = {"args": []}  # everything but the buffers, converted as for a query
        for argument in call["args"]:
            if argument[0] == "buffer":
                values.append(memory.get(int(argument[1])))
            elif argument[0] == "pointer_array":
                values.append(memory.pointer_array(int(argument[1]), int(argument[2])))
            else:
                plain["args"] = [argument]
                values.extend(self._arguments(plain))
        return values

    def session(self, calls: list[dict[str, Any]]) -> dict[str, Any]:
        self.rocblas.rocblas_start_device_memory_size_query(self.handle)
        worst = 0
        for call in calls:
            status = self._function(call)(*self._arguments(call))
            if status not in (STATUS_SIZE_INCREASED, STATUS_SIZE_UNCHANGED):
                worst = status
        size = ctypes.c_size_t()
        self.rocblas.rocblas_stop_device_memory_size_query(self.handle, ctypes.byref(size))
        self.keep_alive.clear()
        return {"status": worst, "bytes": size.value}


def _load_beside(name: str) -> Any:
    """A module of this folder, loaded by its path: run as a script under `python -I -S`,
    the worker has neither this folder nor hipmem on sys.path, and imports nothing else."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"hipmem_worker_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write(payload: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(payload) + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    rocblas_path, rocsolver_path = argv[1], argv[2]
    try:
        worker = Worker(rocblas_path, rocsolver_path)
        _write(worker.ready())
    except (OSError, RuntimeError) as err:
        _write({"ready": False, "error": str(err)})
        return 1
    hipblaslt: Any = None  # a Hipblaslt (hipblaslt_heuristic.py), made on the first request
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "size":
            for call in request["calls"]:
                _write(worker.size_one(call))
        elif request["op"] == "size_points":
            worker.size_points(request["call"], request["slots"], request["points"])
        elif request["op"] == "run":
            for call in request["calls"]:
                _write(worker.run(call))
        elif request["op"] == "execute":
            _write(worker.execute(request["call"], int(request["workspace_bytes"])))
        elif request["op"] == "rocsolver_log" and worker.rocsolver is not None:
            function = getattr(worker.rocsolver, f"rocsolver_log_{request['action']}")
            _write({"status": function()})
        elif request["op"] == "session":
            _write(worker.session(request["calls"]))
        elif request["op"] == "hipblaslt":
            if hipblaslt is None or hipblaslt.path != request["library"]:
                try:
                    hipblaslt = _load_beside("hipblaslt_heuristic").Hipblaslt(request["library"])
                except (OSError, RuntimeError) as err:
                    for _ in request["calls"]:
                        _write({"stage": "hipblasLtCreate", "error": str(err)})
                    continue
            for call in request["calls"]:
                _write(hipblaslt.heuristic(call))
        elif request["op"] == "exit":
            break
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
