"""hipBLASLt matmul calls: what workspace the heuristic's first algorithm needs.

    hipblaslt_matmul:m=4096,n=16,k=4096,transA=T,transB=N,a_type=bf16_r

Column-major, as hipBLASLt. b/c/d types default to a's, compute to f32_r (HIPBLAS_COMPUTE_32F),
batch_count to 1, max_workspace to PyTorch's default cap (`PYTORCH_DEFAULT_CAP_BYTES`, the
value PyTorch passes as HIPBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES), algorithms (how many the
heuristic is asked for) to 1.

Each call is asked twice of the real library, in the crash-isolated worker: with its cap
(what an application that takes the first choice gets: that algorithm's workspace is the
answer) and with no cap (the first choice hipBLASLt would make with unlimited workspace), so
a cap that changed the first choice is reported. hipBLASLt picks its algorithms by arch and CU
count (per-CU solution files), so both matter.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..calls.spec import DECIMAL
from ..errors import BadArgument, LibraryNotFound, SizingError
from ..rocm.locator import Libraries
from ..rocm.on_demand import OnDemand
from ..worker.process import Crash, WorkerProcess
from ..worker.virtual_device import Device
from .locator import HipblasltBuild, hipblaslt_for, no_data_error

ROUTINE = "hipblaslt_matmul"
# PyTorch's default hipBLASLt workspace on ROCm: 80 MiB since pytorch/pytorch#197201 (2026,
# backported to ROCm/pytorch release/2.13 and 2.14); 76 MiB from PyTorch 2.6 (pytorch#139300).
PYTORCH_DEFAULT_CAP_BYTES = 80 * 1024 * 1024
PYTORCH_DEFAULT_SOURCE = "PyTorch 2.13+ on ROCm (pytorch/pytorch#197201; 76 MiB in 2.6-2.12)"
NO_CAP_BYTES = 2**64 - 1  # "no cap": the largest uint64 the preference takes

# hipDataType (hip/library_types.h), by the data type names rocBLAS calls use.
DATA_TYPES = {
    "f32_r": 0,
    "f64_r": 1,
    "f16_r": 2,
    "i8_r": 3,
    "i32_r": 10,
    "bf16_r": 14,
    "f8_r": 28,  # OCP E4M3
    "bf8_r": 29,  # OCP E5M2
    "f8_fnuz_r": 1000,
    "bf8_fnuz_r": 1001,
}
# hipblasComputeType_t (hipblas-common.h), by the data type its accumulator has.
COMPUTE_TYPES = {"f16_r": 0, "f32_r": 2, "f64_r": 7, "i32_r": 9}
SCALE_OF_COMPUTE = {"f16_r": "f16_r", "f32_r": "f32_r", "f64_r": "f64_r", "i32_r": "f32_r"}
OPERATIONS = {"n": 111, "t": 112, "c": 113}
STATUS_NAMES = {
    0: "HIPBLAS_STATUS_SUCCESS",
    1: "HIPBLAS_STATUS_NOT_INITIALIZED",
    2: "HIPBLAS_STATUS_ALLOC_FAILED",
    3: "HIPBLAS_STATUS_INVALID_VALUE",
    4: "HIPBLAS_STATUS_MAPPING_ERROR",
    5: "HIPBLAS_STATUS_EXECUTION_FAILED",
    6: "HIPBLAS_STATUS_INTERNAL_ERROR",
    7: "HIPBLAS_STATUS_NOT_SUPPORTED",
    8: "HIPBLAS_STATUS_ARCH_MISMATCH",
    9: "HIPBLAS_STATUS_HANDLE_IS_NULLPTR",
    10: "HIPBLAS_STATUS_INVALID_ENUM",
    11: "HIPBLAS_STATUS_UNKNOWN",
}
_ARGS = (
    "m", "n", "k", "transA", "transB", "a_type", "b_type", "c_type", "d_type",
    "compute_type", "batch_count", "max_workspace", "algorithms",
)  # fmt: skip
_MAX_ALGORITHMS = 64


@dataclass(frozen=True)
class MatmulCall:
    m: int
    n: int
    k: int
    trans_a: str = "N"
    trans_b: str = "N"
    a_type: str = "f16_r"
    b_type: str = "f16_r"
    c_type: str = "f16_r"
    d_type: str = "f16_r"
    compute_type: str = "f32_r"
    batch_count: int = 1
    max_workspace_bytes: int = PYTORCH_DEFAULT_CAP_BYTES
    algorithms: int = 1

    @property
    def label(self) -> str:
        """The spec with every argument (defaults filled in), as the user can type it."""
        return f"{ROUTINE}:" + ",".join(f"{k}={v}" for k, v in self.args.items())

    @property
    def args(self) -> dict[str, int | str]:
        return {
            "m": self.m,
            "n": self.n,
            "k": self.k,
            "transA": self.trans_a,
            "transB": self.trans_b,
            "a_type": self.a_type,
            "b_type": self.b_type,
            "c_type": self.c_type,
            "d_type": self.d_type,
            "compute_type": self.compute_type,
            "batch_count": self.batch_count,
            "max_workspace": self.max_workspace_bytes,
            "algorithms": self.algorithms,
        }

    def shape_label(self) -> str:
        """The call without its cap: the same GEMM asked with another cap has this label."""
        return ",".join(f"{k}={v}" for k, v in self.args.items() if k != "max_workspace")

    def encode(self, cap_bytes: int) -> dict[str, Any]:
        return {
            "m": self.m,
            "n": self.n,
            "k": self.k,
            "trans_a": OPERATIONS[self.trans_a.lower()],
            "trans_b": OPERATIONS[self.trans_b.lower()],
            "a_type": DATA_TYPES[self.a_type],
            "b_type": DATA_TYPES[self.b_type],
            "c_type": DATA_TYPES[self.c_type],
            "d_type": DATA_TYPES[self.d_type],
            "compute_type": COMPUTE_TYPES[self.compute_type],
            "scale_type": DATA_TYPES[SCALE_OF_COMPUTE[self.compute_type]],
            "batch_count": self.batch_count,
            "max_workspace_bytes": cap_bytes,
            "algorithms": self.algorithms,
        }


def is_matmul_spec(text: str) -> bool:
    return text.strip().split(":", 1)[0].strip() == ROUTINE


def parse_matmul(text: str) -> MatmulCall:
    """`hipblaslt_matmul:m=..,n=..,k=..[,...]`; BadArgument (exit 2) naming what is wrong."""
    from hipmem._core.byte_sizes import parse_bytes

    _, _, rest = text.strip().partition(":")
    given: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in rest.split(","))):
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or name not in _ARGS:
            raise BadArgument(
                f"{ROUTINE}: unknown argument {name[:40]!r}; it takes {', '.join(_ARGS)}"
            )
        if name in given:
            raise BadArgument(f"{ROUTINE}: {name}= given twice")
        given[name] = value.strip()
    missing = [name for name in ("m", "n", "k") if name not in given]
    if missing:
        raise BadArgument(f"{ROUTINE}: {', '.join(missing)} required")

    def number(name: str, default: int, low: int = 0) -> int:
        text = given.get(name)
        if text is None:
            return default
        if not DECIMAL.fullmatch(text) or len(text) > 20 or not low <= int(text) < 2**31:
            raise BadArgument(
                f"{ROUTINE}: {name}={text[:40]!r} is not a whole number {low}..2**31-1"
            )
        return int(text)

    def operation(name: str) -> str:
        value = given.get(name, "N").upper()
        if value.lower() not in OPERATIONS:
            raise BadArgument(f"{ROUTINE}: {name}={value[:40]!r}: expected N, T or C")
        return value

    def data_type(name: str, default: str, allowed: dict[str, int]) -> str:
        value = given.get(name, default)
        if value not in allowed:
            raise BadArgument(
                f"{ROUTINE}: {name}={value[:40]!r}: expected one of {', '.join(allowed)}"
            )
        return value

    a_type = data_type("a_type", "f16_r", DATA_TYPES)
    cap = PYTORCH_DEFAULT_CAP_BYTES
    if "max_workspace" in given:
        cap = parse_bytes(given["max_workspace"], name="max_workspace")
    return MatmulCall(
        m=number("m", 0),
        n=number("n", 0),
        k=number("k", 0),
        trans_a=operation("transA"),
        trans_b=operation("transB"),
        a_type=a_type,
        b_type=data_type("b_type", a_type, DATA_TYPES),
        c_type=data_type("c_type", a_type, DATA_TYPES),
        d_type=data_type("d_type", a_type, DATA_TYPES),
        compute_type=data_type("compute_type", "f32_r", COMPUTE_TYPES),
        batch_count=number("batch_count", 1, low=1),
        max_workspace_bytes=cap,
        algorithms=min(number("algorithms", 1, low=1), _MAX_ALGORITHMS),
    )


@dataclass
class Algorithm:
    workspace_bytes: int
    id: str  # the algo's opaque bytes, hex: the same id is the same algorithm

    def as_dict(self) -> dict[str, Any]:
        return {"workspace_bytes": self.workspace_bytes, "id": self.id}


@dataclass
class MatmulResult:
    call: MatmulCall
    bytes: int | None  # the first algorithm's workspace under the cap; None on error
    status: str
    algorithms: list[Algorithm] = field(default_factory=list)  # under the cap, best first
    uncapped: Algorithm | None = None  # the first choice with no cap
    error: SizingError | None = None
    count: int = 1

    @property
    def cap_changed_choice(self) -> bool | None:
        if not self.algorithms or self.uncapped is None:
            return None
        return self.algorithms[0].id != self.uncapped.id

    def as_dict(self) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "routine": ROUTINE,
            "args": self.call.args,
            "bytes": self.bytes,
            "status": self.status,
            "count": self.count,
            "algorithms": [a.as_dict() for a in self.algorithms],
            "uncapped_first": self.uncapped.as_dict() if self.uncapped else None,
            "cap_changed_first_choice": self.cap_changed_choice,
        }
        if self.error is not None:
            payload["error"] = str(self.error)
        return payload


@dataclass
class MatmulReport:
    results: list[MatmulResult]
    build: HipblasltBuild  # the hipBLASLt that answered: version, library, where from
    device: Device

    @property
    def hipblaslt_version(self) -> str | None:
        return self.build.version

    @property
    def failed(self) -> list[MatmulResult]:
        return [r for r in self.results if r.error is not None]

    def as_dict(self) -> dict[str, Any]:
        payload: dict[str, Any] = self.build.as_dict()
        if self.build.notice:
            payload["hipblaslt_notice"] = self.build.notice
        return payload | {"calls": [r.as_dict() for r in self.results]}


def size_matmuls(
    calls: list[MatmulCall],
    device: Device,
    libraries: Libraries,
    worker: WorkerProcess | None = None,
    on_demand: OnDemand | None = None,
) -> MatmulReport:
    """Ask the heuristic for each distinct call, with its cap and with none, of the hipBLASLt
    that goes with `libraries` (`sizing.hipblaslt_locator`; `on_demand`: fetched if missing)."""
    build = hipblaslt_for(libraries, on_demand)
    distinct: dict[MatmulCall, int] = {}
    for call in calls:
        distinct[call] = distinct.get(call, 0) + 1
    unique = list(distinct)
    no_data = no_data_error(build, device.arch.name)
    if no_data is not None:
        results = [
            MatmulResult(
                c, None, "no_solution_data", error=LibraryNotFound(f"{c.label}: {no_data}")
            )
            for c in unique
        ]
        return MatmulReport(_counted(results, distinct), build, device)
    own = worker is None
    process = worker or WorkerProcess(build.runs_with, device)
    try:
        capped = list(
            process.hipblaslt(build.library, [c.encode(c.max_workspace_bytes) for c in unique])
        )
        free = list(process.hipblaslt(build.library, [c.encode(NO_CAP_BYTES) for c in unique]))
    finally:
        if own:
            process.close()
    results = [_result(c, a, b, build) for c, a, b in zip(unique, capped, free, strict=True)]
    return MatmulReport(_counted(results, distinct), build, device)


def _counted(results: list[MatmulResult], counts: dict[MatmulCall, int]) -> list[MatmulResult]:
    for result in results:
        result.count = counts[result.call]
    return results


def _result(
    call: MatmulCall,
    capped: dict[str, Any] | Crash,
    free: dict[str, Any] | Crash,
    build: HipblasltBuild,
) -> MatmulResult:
    where = f"{call.label} ({build.label})"
    for answer in (capped, free):
        if isinstance(answer, Crash):
            text = f"{where}: the vendor library {answer.how}"
            text += f": {answer.last_words}" if answer.last_words else ""
            return MatmulResult(
                call, None, "timed_out" if answer.timed_out else "crashed", error=SizingError(text)
            )
        if "stage" in answer:
            status = STATUS_NAMES.get(int(answer.get("status", 11)), "HIPBLAS_STATUS_UNKNOWN")
            detail = answer.get("error") or status
            return MatmulResult(
                call,
                None,
                status,
                error=SizingError(f"{where}: {answer['stage']} failed: {detail}"),
            )
    assert isinstance(capped, dict) and isinstance(free, dict)
    algorithms = [Algorithm(a["workspace_bytes"], a["id"]) for a in capped["algorithms"]]
    uncapped = [Algorithm(a["workspace_bytes"], a["id"]) for a in free["algorithms"]]
    if not algorithms:
        status = STATUS_NAMES.get(int(capped["status"]), "HIPBLAS_STATUS_UNKNOWN")
        if capped["status"] == 0:
            status = "no_algorithm"
        text = f"{where}: the heuristic returned no algorithm ({status})"
        if uncapped:
            text += (
                f"; with no cap its first choice needs {uncapped[0].workspace_bytes:,} bytes "
                f"(max_workspace={call.max_workspace_bytes:,} is below it)"
            )
        return MatmulResult(
            call, None, status, [], uncapped[0] if uncapped else None, SizingError(text)
        )
    return MatmulResult(
        call,
        algorithms[0].workspace_bytes,
        "success",
        algorithms,
        uncapped[0] if uncapped else None,
    )


# ---- PyTorch's HIPBLASLT_WORKSPACE_SIZE ---------------------------------------------------
# PyTorch reads CUBLASLT_WORKSPACE_SIZE, else HIPBLASLT_WORKSPACE_SIZE (ROCm builds too), an
# integer in KiB, and passes it to the heuristic as HIPBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES
# (aten/src/ATen/cuda/CublasHandlePool.cpp). A smaller value never fails a GEMM: the heuristic
# picks another algorithm (often slower). So "covers" means: every call's first choice is the
# one it gets with no cap.
HIPBLASLT_VARIABLES = ("CUBLASLT_WORKSPACE_SIZE", "HIPBLASLT_WORKSPACE_SIZE")  # PyTorch's order


def recommended_hipblaslt_kib(report: MatmulReport) -> int:
    """The smallest HIPBLASLT_WORKSPACE_SIZE (KiB) that leaves every first choice unchanged:
    the largest workspace of an uncapped first choice, rounded up to whole KiB."""
    needed = [r.uncapped.workspace_bytes for r in report.results if r.uncapped is not None]
    return -(-max(needed, default=0) // 1024)


def with_cap(calls: list[MatmulCall], cap_bytes: int) -> list[MatmulCall]:
    from dataclasses import replace

    return [replace(call, max_workspace_bytes=cap_bytes) for call in calls]


def changed_by_cap(report: MatmulReport) -> list[MatmulResult]:
    """The calls whose first choice under their cap is not the uncapped one (or that got no
    algorithm at all under it)."""
    return [
        r
        for r in report.results
        if r.uncapped is not None and (not r.algorithms or r.algorithms[0].id != r.uncapped.id)
    ]


def size_matmul_specs(
    specs: list[str | MatmulCall],
    device: str | Device,
    *,
    rocm: str | None = None,
    compute_units: int | None = None,
    rocm_dir: str | Path | None = None,
) -> MatmulReport:
    """The Python way to size hipBLASLt calls: specs as the CLI takes them
    (`"hipblaslt_matmul:m=4096,n=16,k=14336,a_type=bf16_r"`), on a device name or Device,
    with the hipBLASLt that goes with the chosen ROCm libraries (default: as `hipmem size`
    picks them; `rocm_dir` as `--rocm-dir`)."""
    from ..rocm.locator import locate
    from ..worker.virtual_device import resolve

    calls = [s if isinstance(s, MatmulCall) else parse_matmul(s) for s in specs]
    target = device if isinstance(device, Device) else resolve(device, compute_units)
    explicit = Path(rocm_dir) if rocm_dir is not None else None
    return size_matmuls(calls, target, locate(explicit, rocm))
