"""The line formats of rocBLAS/rocSOLVER call logs, and the call each line names.

  - rocBLAS bench log (ROCBLAS_LAYER=2): `./rocblas-bench -f gemm -r f32_r --transposeA N ...`
  - rocBLAS trace log (ROCBLAS_LAYER=1): `rocblas_sgemm,N,T,1024,512,256,1,0x...,1024,...`
  - rocBLAS profile YAML (ROCBLAS_LAYER=4):
    `- { rocblas_function: "rocblas_sgemm", ..., call_count: 2 }`
  - rocSOLVER bench log (ROCSOLVER_LAYER=2): `./rocsolver-bench -f getrf -r d -m 1024 ...`
  - `rocblas-bench` / `rocsolver-bench` command lines pasted into a text file.

The lines look like shell commands: they are data, split with `shlex` and never executed.
`logs.py` reads a whole log with it, one distinct line at a time.
"""

from __future__ import annotations

import re
import shlex

from ..rocm.catalog import Catalog, Routine
from .spec import Call, Value, make_call
from .strict_yaml import StrictYamlError, load_strict

# Kinds of line that are not calls (logs.Problem.kind).
NOT_A_CALL = "not a call"
TRUNCATED = "truncated"
UNKNOWN_FUNCTION = "unknown function"
BAD_ARGUMENT = "bad argument"
NEWER_LIBRARY = "newer library"
TOO_LONG = "too long"

ROCBLAS_BENCH = "rocBLAS bench log"
ROCBLAS_TRACE = "rocBLAS trace log"
ROCBLAS_PROFILE = "rocBLAS profile YAML"
ROCSOLVER_BENCH = "rocSOLVER bench log"
BENCH_COMMANDS = "bench command lines"

MAX_COUNT = 2**63 - 1  # a profile line's call_count, at most (an int64)

# rocblas-bench's -r / --a_type spellings -> the routine name's precision prefix.
_BLAS_PRECISION = {
    "f32_r": "s", "s": "s", "f64_r": "d", "d": "d", "f32_c": "c", "c": "c",
    "f64_c": "z", "z": "z", "f16_r": "h", "h": "h", "bf16_r": "bf",
}  # fmt: skip
# Mixed-precision batched gemv: (a_type, c_type) -> prefix (hshgemv_batched, ...).
_MIXED_GEMV = {
    ("f16_r", "f16_r"): "hsh",
    ("f16_r", "f32_r"): "hss",
    ("bf16_r", "bf16_r"): "tst",
    ("bf16_r", "f32_r"): "tss",
}
# Bench/profile argument names -> the header's parameter names, first one the routine has.
# (rocBLAS logs dot_ex's x/y/result/execution types as a/b/c/compute types.)
_ALIASES = {
    "transposea": ("transA", "trans"),
    "transa": ("transA", "trans"),
    "trans": ("trans", "transA"),
    "transposeb": ("transB",),
    "batch": ("batch_count",),
    "a_type": ("a_type", "x_type"),
    "b_type": ("b_type", "y_type", "result_type"),
    "c_type": ("c_type", "result_type"),
    "compute_type": ("compute_type", "execution_type"),
    # The profile log writes batch strides as bs<matrix>.
    "bsa": ("stride_a", "stride_A", "strideA"),
    "bsb": ("stride_b", "stride_B"),
    "bsc": ("stride_c", "stride_C"),
    "bsd": ("stride_d",),
    "bsx": ("stridex", "stride_x"),
    "bsy": ("stridey", "stride_y"),
    "bsinva": ("stride_invA",),
}
# rocBLAS's trace and profile logs name the batched trsm forms the other way round.
_BATCH_FIRST = re.compile(r"^rocblas_(strided_batched|batched)_(\w+?)(_64)?$")
# Arguments of the bench programs (or profile keys) that are not the routine's: how often to
# run, the imaginary part of a scalar, atomics mode (a handle setting), the API variant.
_NOT_ARGUMENTS = frozenset(
    {"f", "r", "api", "i", "iters", "j", "cold_iters", "alphai", "betai", "atomics_not_allowed",
     "atomics_mode", "initialization", "outofplace", "call_count", "rocblas_function", "perf",
     "device", "verify", "v", "unit_check", "timing", "c_noalias_d"}
)  # fmt: skip
_ATOMICS = ("atomics_allowed", "atomics_not_allowed")
_SHELL_OPERATORS = frozenset({">", ">>", "|", "||", "&&", ";", "&", "2>&1", "1>&2", "<"})
_NUMBER = re.compile(r"^-?\d+(\.\d*)?([eE][-+]?\d+)?$")


class NoWorkspace(Exception):
    """The line names a real API function that is outside the catalog (needs no workspace)."""


class LineError(Exception):
    """The line is not a call hipmem can size: `kind` (NOT_A_CALL, ...) and why."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class LineParser:
    """The call (or calls) one line names, and its format; LineError, NoWorkspace or
    StrictYamlError (a YAML alias) when it names none."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self.rocsolver_header = False

    def parse(self, text: str, rocsolver_header: bool) -> tuple[str, list[tuple[Call, int]]]:
        """`rocsolver_header`: the log began as a rocSOLVER log does (its bench lines are
        then a rocSOLVER bench log, not pasted command lines)."""
        self.rocsolver_header = rocsolver_header
        return self._parse(text)

    def _parse(self, text: str) -> tuple[str, list[tuple[Call, int]]]:
        if text.startswith("- {") or text.startswith("- rocblas_function"):
            return ROCBLAS_PROFILE, [self._profile_entry(text)]
        if "rocblas-bench" in text or "rocsolver-bench" in text:
            return self._bench_line(text)
        if re.match(r"^\w+,", text):
            return ROCBLAS_TRACE, [(self._trace_line(text), 1)]
        raise LineError(NOT_A_CALL, _clip(text))

    # -- bench lines ------------------------------------------------------------------------
    def _bench_line(self, text: str) -> tuple[str, list[tuple[Call, int]]]:
        try:
            lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True  # keeps `--lda` and `f32_r` whole; `;` `>` `|` apart
            tokens = list(lexer)
        except ValueError as err:  # an unclosed quote: the line was cut off
            raise LineError(TRUNCATED, f"{err}: {_clip(text)}") from None
        start = next(
            (i for i, t in enumerate(tokens) if t.rsplit("/", 1)[-1].endswith("-bench")), None
        )
        if start is None:
            raise LineError(NOT_A_CALL, f"no rocblas-bench/rocsolver-bench command: {_clip(text)}")
        program = tokens[start].rsplit("/", 1)[-1]
        options = _bench_options(tokens[start + 1 :], text)
        if "f" not in options:
            raise LineError(TRUNCATED, f"no -f FUNCTION: {_clip(text)}")
        if program == "rocsolver-bench":
            call = self._rocsolver_bench(options)
            kind = ROCSOLVER_BENCH if self.rocsolver_header else BENCH_COMMANDS
        elif program == "rocblas-bench":
            call = self._rocblas_bench(options)
            kind = ROCBLAS_BENCH if tokens[start] == "./rocblas-bench" else BENCH_COMMANDS
        else:
            raise LineError(NOT_A_CALL, f"unknown program {program}: {_clip(text)}")
        return kind, [(call, 1)]

    def _rocsolver_bench(self, options: dict[str, str]) -> Call:
        precision = options.get("r", "")
        function = options["f"]
        if precision not in ("s", "d", "c", "z"):
            raise LineError(BAD_ARGUMENT, f"rocsolver-bench -r {precision!r} is not s, d, c or z")
        routine = self._routine(f"rocsolver_{precision}{function}")
        return self._named_call(routine, options)

    def _rocblas_bench(self, options: dict[str, str]) -> Call:
        function = options["f"]
        ilp64 = options.get("api") in ("1", "3") or function.endswith("_64")
        function = function.removesuffix("_64")
        suffix = "_64" if ilp64 else ""
        used = {"f", "r", "api"}
        if function.endswith("_ex"):
            routine = self._routine(f"rocblas_{function}{suffix}")
            if "r" in options and routine.param("x_type") and "a_type" not in options:
                options = options | {"a_type": options["r"]}  # nrm2_ex logs its type as -r
        else:
            family, batch = _split_batch(function)
            prefix, family, used_types = _blas_prefix(family, options)
            used |= used_types
            routine = self._routine(f"rocblas_{prefix}{family}{batch}{suffix}")
        return self._named_call(routine, {k: v for k, v in options.items() if k not in used})

    # -- profile entries --------------------------------------------------------------------
    def _profile_entry(self, text: str) -> tuple[Call, int]:
        try:
            # Aliases are refused before they are expanded, repeated keys refused.
            loaded = load_strict(text)
        except StrictYamlError as err:
            if "alias" in str(err):
                raise
            if "given twice" in str(err):
                raise LineError(BAD_ARGUMENT, str(err)) from None
            raise LineError(TRUNCATED, f"not a complete YAML entry ({err})") from None
        entry = loaded[0] if isinstance(loaded, list) and loaded else None
        if not isinstance(entry, dict) or "rocblas_function" not in entry:
            raise LineError(NOT_A_CALL, f"a YAML entry without rocblas_function: {_clip(text)}")
        routine = self._routine(_rocblas_name(str(entry["rocblas_function"])))
        count = entry.get("call_count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_COUNT:
            raise LineError(
                BAD_ARGUMENT, f"call_count {_clip(repr(count))} is not a whole number 1..2**63-1"
            )
        options = {str(k): _yaml_text(v) for k, v in entry.items()}
        return self._named_call(routine, options), count

    # -- trace lines ------------------------------------------------------------------------
    def _trace_line(self, text: str) -> Call:
        fields = [f.strip() for f in split_trace_fields(text)]
        routine = self._routine(_rocblas_name(fields[0]))
        values = fields[1:]
        while values and values[-1] in _ATOMICS:
            values.pop()
        params = routine.params[1:]  # the handle is not logged
        if len(values) == len(params) - 1 and params[-1].name == "result":
            params = params[:-1]  # nor the result pointer of a reduction
        if len(values) != len(params):
            # rocBLAS traces a few routines in an order of their own (tpmv, asum, ...); their
            # bench lines name every argument.
            raise LineError(
                TRUNCATED if len(values) < len(params) else BAD_ARGUMENT,
                f"{routine.name}: {len(values)} fields where the header has {len(params)} "
                "(cut off, or a trace layout hipmem cannot read: log with ROCBLAS_LAYER=2)",
            )
        given: dict[str, Value] = {}
        for param, value in zip(params, values, strict=True):
            if param.user_settable:
                given[param.name] = self._value(routine, param.name, value)
        return make_call(routine, given, self.catalog)

    # -- shared -----------------------------------------------------------------------------
    def _routine(self, name: str) -> Routine:
        routine = self.catalog.routines.get(name)
        if routine is not None:
            return routine
        if name in self.catalog.other_functions:
            raise NoWorkspace(name)
        raise LineError(UNKNOWN_FUNCTION, f"{name} is not a routine hipmem knows")

    def _named_call(self, routine: Routine, options: dict[str, str]) -> Call:
        settable = {p.name for p in routine.params if p.user_settable}
        by_folded = {_fold(name): name for name in settable}
        given: dict[str, Value] = {}
        for key, value in options.items():
            if key in _NOT_ARGUMENTS or (key == "strideP" and "strideP" not in settable):
                continue  # rocSOLVER logs a strideP for the npvt routines too
            name = next(
                (a for a in _ALIASES.get(key.lower(), ()) if a in settable), None
            ) or by_folded.get(_fold(key))
            if name is None:
                raise LineError(BAD_ARGUMENT, f"{routine.name} has no argument '{key}'")
            if name in given:
                raise LineError(BAD_ARGUMENT, f"{routine.name}: argument {name} given twice")
            given[name] = self._value(routine, name, value)
        return make_call(routine, given, self.catalog)

    def _value(self, routine: Routine, name: str, raw: str) -> Value:
        """A logged value as make_call reads it: enum numbers to names, "(re,im)" to re."""
        param = routine.param(name)
        assert param is not None
        if param.kind == "enum" and param.enum and raw.lstrip("-").isdigit():
            names = {v: k for k, v in self.catalog.enums[param.enum].items()}
            return names.get(int(raw), raw)
        if param.kind == "host_scalar" and raw.startswith("("):
            return raw.strip("()").split(",")[0]
        if name == "flags" and raw == "none":
            return 0
        return raw


def _bench_options(tokens: list[str], text: str) -> dict[str, str]:
    """`-f gemm -r f32_r --flag --lda 64` -> {"f": "gemm", "r": "f32_r", "flag": "", ...}."""
    options: dict[str, str] = {}
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token in _SHELL_OPERATORS or token[0] in "();<>|&":
            break  # a redirection or a second command after a pasted one: not the routine's
        # rocBLAS writes `stride_x 64` without dashes for iamax/iamin: a bare name is an
        # option name when a value follows it.
        bare_name = re.match(r"^[A-Za-z_]\w*$", token) and index + 1 < len(tokens)
        if (not token.startswith("-") and not bare_name) or _NUMBER.match(token):
            raise LineError(BAD_ARGUMENT, f"unexpected '{token}' in: {_clip(text)}")
        name = token.lstrip("-")
        if name in options:  # as on the command line: a repeated option is an error
            raise LineError(BAD_ARGUMENT, f"option {token} given twice")
        following = tokens[index + 1] if index + 1 < len(tokens) else None
        if following is not None and (not following.startswith("-") or _NUMBER.match(following)):
            options[name] = following
            index += 2
        else:
            options[name] = ""
            index += 1
    return options


def split_trace_fields(text: str) -> list[str]:
    """Split a trace line at its commas, except those inside a "(re,im)" complex scalar.

    One pass over the pieces (a regular expression with a look-ahead to the next paren took
    quadratic time on a line of many commas)."""
    fields: list[str] = []
    pending: list[str] = []  # the pieces of an open "(re,im" so far
    for piece in text.split(","):
        if pending:
            pending.append(piece)
            if ")" in piece:
                fields.append(",".join(pending))
                pending = []
        elif piece.lstrip().startswith("(") and ")" not in piece:
            pending = [piece]
        else:
            fields.append(piece)
    fields.extend(pending)  # a paren never closed: its commas were separators after all
    return fields


def _rocblas_name(name: str) -> str:
    """The C name of a function as a rocBLAS trace/profile log names it."""
    name = name if name.startswith("rocblas_") else f"rocblas_{name}"
    flipped = _BATCH_FIRST.match(name)
    if flipped:
        return f"rocblas_{flipped.group(2)}_{flipped.group(1)}{flipped.group(3) or ''}"
    return name


def _split_batch(function: str) -> tuple[str, str]:
    for suffix in ("_strided_batched", "_batched"):
        if function.endswith(suffix):
            return function.removesuffix(suffix), suffix
    return function, ""


def _blas_prefix(family: str, options: dict[str, str]) -> tuple[str, str, set[str]]:
    """rocblas-bench names the family and the data type; the C name has a prefix."""
    if "r" not in options and family == "gemv":
        pair = (options.get("a_type", ""), options.get("c_type", ""))
        if pair not in _MIXED_GEMV:
            raise LineError(BAD_ARGUMENT, f"gemv with a_type/c_type {pair} is not a rocBLAS gemv")
        return _MIXED_GEMV[pair], family, {"a_type", "c_type", "compute_type"}
    datatype = options.get("r", "")
    precision = _BLAS_PRECISION.get(datatype)
    if precision is None:
        raise LineError(BAD_ARGUMENT, f"-r {datatype!r} is not a rocBLAS data type")
    complex_type = precision in ("c", "z")
    if family in ("asum", "nrm2") and complex_type:
        return {"c": "sc", "z": "dz"}[precision], family, set()  # real result of complex x
    if family in ("iamax", "iamin"):
        return "i" + precision, family[1:], set()
    if family == "dot" and complex_type:
        # rocBLAS logs zdotu and zdotc alike as `-f dot -r f64_c`; they need the same space.
        return precision, "dotu", set()
    return precision, family, set()


def _fold(name: str) -> str:
    """Spelling-insensitive name: stride_a, strideA and stride_A are one argument."""
    return name.replace("_", "").lower()


def _yaml_text(value: object) -> str:
    return "none" if value is None else str(value)


def _clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
