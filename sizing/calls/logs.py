"""Read the calls an application made from rocBLAS/rocSOLVER call logs.

Formats (each line is classified on its own, so pasted mixtures work too):
  - rocBLAS bench log (ROCBLAS_LAYER=2): `./rocblas-bench -f gemm -r f32_r --transposeA N ...`
  - rocBLAS trace log (ROCBLAS_LAYER=1): `rocblas_sgemm,N,T,1024,512,256,1,0x...,1024,...`
  - rocBLAS profile YAML (ROCBLAS_LAYER=4):
    `- { rocblas_function: "rocblas_sgemm", ..., call_count: 2 }`
  - rocSOLVER bench log (ROCSOLVER_LAYER=2): a `ROCSOLVER LOG FILE` header, version lines, then
    `./rocsolver-bench -f getrf -r d -m 1024 -n 1024 --lda 1024`
  - `rocblas-bench` / `rocsolver-bench` command lines pasted into a text file.

The lines look like shell commands: they are data, split with `shlex` and never executed.
Logs are large and repetitive, so the reader counts identical lines while streaming (memory
grows with the number of distinct lines, not the file) and parses each distinct line once.
Lines that are not calls are never dropped silently: each kind is counted with line numbers.
"""

from __future__ import annotations

import os
import re
import shlex
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from hipmem._core.progress import ProgressCallback

from ..errors import CallLogError, CallLogRefused, SizingError
from ..rocm.catalog import Catalog, Routine, load_catalog
from .input_files import UnreadableInput, open_input
from .spec import Call, Value, make_call
from .strict_yaml import StrictYamlError, load_strict

# Kinds of line that are not calls (Problem.kind).
NOT_A_CALL = "not a call"
TRUNCATED = "truncated"
UNKNOWN_FUNCTION = "unknown function"
BAD_ARGUMENT = "bad argument"
NEWER_LIBRARY = "newer library"
TOO_LONG = "too long"

# Bounds that keep memory and time proportional to what a real log holds, whatever a file
# holds: one line (the longest real ones, gemm_ex traces, are under 1 KiB), the calls kept,
# the problems listed (the rest are counted), and the distinct lines held before parsing.
MAX_LINE_BYTES = 64 << 10
MAX_DISTINCT_CALLS = 100_000
MAX_LISTED_PROBLEMS = 1_000
MAX_COUNT = 2**63 - 1
_DISTINCT_LINES_HELD = 100_000
_BLOCK_BYTES = 1 << 20
_ENDLESS_LINE_BYTES = 64 << 20

ROCBLAS_BENCH = "rocBLAS bench log"
ROCBLAS_TRACE = "rocBLAS trace log"
ROCBLAS_PROFILE = "rocBLAS profile YAML"
ROCSOLVER_BENCH = "rocSOLVER bench log"
BENCH_COMMANDS = "bench command lines"

_PROGRESS_EVERY_LINES = 1 << 16

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
_VERSION_LINE = re.compile(r"^(rocSOLVER|rocBLAS) Version: ([\d.]+?)\.?$")
_NUMBER = re.compile(r"^-?\d+(\.\d*)?([eE][-+]?\d+)?$")


@dataclass
class Problem:
    """A line (and every identical one) that is not a call hipmem can size."""

    line_number: int  # the first line with this text
    kind: str  # NOT_A_CALL, TRUNCATED, UNKNOWN_FUNCTION, BAD_ARGUMENT, NEWER_LIBRARY
    message: str
    count: int = 1  # identical lines

    def where(self, path: Path) -> str:
        more = f" (and {self.count - 1:,} identical lines)" if self.count > 1 else ""
        return f"{path}:{self.line_number}: {self.kind}: {self.message}{more}"


@dataclass
class CallLog:
    """What one log file held: its calls with their counts, and every line that was not one."""

    path: Path
    format: str  # e.g. "rocBLAS bench log"; "a + b" when lines of several formats were seen
    line_count: int
    calls: list[tuple[Call, int]]  # distinct calls, first seen first, with how often
    problems: list[Problem]  # sorted by line number
    no_workspace: dict[str, int] = field(default_factory=dict)  # API calls that need none
    ignored_line_count: int = 0  # blank lines, comments, log headers
    versions: dict[str, str] = field(default_factory=dict)  # from a rocSOLVER log header
    unlisted_problem_lines: int = 0  # lines that are not calls, past MAX_LISTED_PROBLEMS

    @property
    def call_count(self) -> int:
        return sum(count for _, count in self.calls)

    @property
    def skipped_line_count(self) -> int:
        return sum(problem.count for problem in self.problems) + self.unlisted_problem_lines

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "format": self.format,
            "lines": self.line_count,
            "calls": self.call_count,
            "distinct_calls": len(self.calls),
            "no_workspace_calls": dict(self.no_workspace),
            "problems": [
                {"line": p.line_number, "kind": p.kind, "message": p.message, "count": p.count}
                for p in self.problems
            ],
            "unlisted_problem_lines": self.unlisted_problem_lines,
        }


class _NoWorkspace(Exception):
    """The line names a real API function that is outside the catalog (needs no workspace)."""


class _LineError(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def read_call_log(
    path: Path, catalog: Catalog | None = None, progress: ProgressCallback | None = None
) -> CallLog:
    """Stream one log file; every distinct line parsed once. Raises CallLogError when the
    file is a rocSOLVER trace/profile log (they record no arguments), cannot be read, or
    goes past a bound (`MAX_DISTINCT_CALLS`, a line with no end); CallLogRefused (usage)
    for a YAML alias in a profile line."""
    catalog = catalog or load_catalog()
    reader = _LogReader(path, catalog)
    distinct: dict[bytes, list[int]] = {}  # line -> [first line number, count]
    number = 0
    try:
        with open_input(path) as stream:
            for number, raw in enumerate(_bounded_lines(path, stream, progress), start=1):
                if raw is None:
                    reader.too_long(number)
                    continue
                entry = distinct.get(raw)
                if entry is None:
                    distinct[raw] = [number, 1]
                    if len(distinct) >= _DISTINCT_LINES_HELD:  # parse them, let them go
                        _parse_lines(reader, distinct)
                else:
                    entry[1] += 1
    except UnreadableInput as err:
        raise CallLogError(str(err)) from None
    except OSError as err:
        raise CallLogError(f"{path}: cannot read: {err.strerror or err}") from None
    _parse_lines(reader, distinct)
    return reader.finish(number)


def _parse_lines(reader: _LogReader, distinct: dict[bytes, list[int]]) -> None:
    for text, (first_line, count) in distinct.items():
        reader.add(text.decode("utf-8", "replace").strip(), first_line, count)
    distinct.clear()


def _bounded_lines(
    path: Path, stream: BinaryIO, progress: ProgressCallback | None
) -> Iterator[bytes | None]:
    """The file's lines (without their \\n), read in blocks; None for a line longer than
    MAX_LINE_BYTES (the rest of it is read past). Memory stays within a block and a line
    whatever the file holds; a "line" with no end in `_ENDLESS_LINE_BYTES` (a stream of
    zeros) ends the read with CallLogError."""
    total_bytes = _size_if_regular(stream)
    done_bytes = 0
    carry = b""
    skipped_bytes = -1  # >= 0 while reading past an over-long line
    while chunk := stream.read(_BLOCK_BYTES):
        done_bytes += len(chunk)
        if skipped_bytes >= 0:
            end = chunk.find(b"\n")
            if end < 0:
                skipped_bytes += len(chunk)
                if skipped_bytes > _ENDLESS_LINE_BYTES:
                    raise CallLogError(
                        f"{path}: a line with no end after {_ENDLESS_LINE_BYTES >> 20} MiB: "
                        "not a call log, reading stopped"
                    )
                continue
            chunk, skipped_bytes = chunk[end + 1 :], -1
        lines = (carry + chunk).split(b"\n")
        carry = lines.pop()
        for line in lines:
            yield line if len(line) <= MAX_LINE_BYTES else None
        if len(carry) > MAX_LINE_BYTES:
            yield None
            carry, skipped_bytes = b"", len(carry)
        if progress is not None:
            progress(done_bytes, total_bytes, "")
    if carry:
        yield carry


def _size_if_regular(stream: BinaryIO) -> int | None:
    info = os.fstat(stream.fileno())
    return info.st_size if stat.S_ISREG(info.st_mode) else None


class _LogReader:
    """Turns distinct lines into calls and problems, remembering which formats it saw."""

    def __init__(self, path: Path, catalog: Catalog) -> None:
        self.path = path
        self.catalog = catalog
        self.calls: dict[tuple[Any, ...], list[Any]] = {}  # key -> [Call, count]
        # (kind, message) -> Problem: a line met again in a later batch adds to its count.
        self.problems: dict[tuple[str, str], Problem] = {}
        self.unlisted_problem_lines = 0  # past MAX_LISTED_PROBLEMS: counted only
        self.no_workspace: dict[str, int] = {}
        self.formats: dict[str, int] = {}
        self.ignored = 0
        self.versions: dict[str, str] = {}
        self.rocsolver_header = False
        self.rocsolver_unsizable = 0  # trace-tree / profile lines of a rocSOLVER log
        self.rocsolver_unsizable_first = 0  # the first such line's number

    def add(self, text: str, line_number: int, count: int) -> None:
        if not text or text.startswith("#") or text == "ROCSOLVER LOG FILE":
            self.rocsolver_header |= text == "ROCSOLVER LOG FILE"
            self.ignored += count
            return
        version = _VERSION_LINE.match(text)
        if version:
            self._version(version.group(1).lower(), version.group(2), line_number, count)
            return
        if text.startswith("-------") or re.match(r"^rocsolver_\w+: Calls: ", text):
            # A rocSOLVER trace tree or profile summary: routine names without arguments.
            self.rocsolver_unsizable += count
            self.rocsolver_unsizable_first = self.rocsolver_unsizable_first or line_number
            return
        try:
            format_name, calls = self._parse(text)
        except _NoWorkspace as named:
            self.no_workspace[str(named)] = self.no_workspace.get(str(named), 0) + count
            return
        except _LineError as err:
            self.problem(Problem(line_number, err.kind, str(err), count))
            return
        except StrictYamlError as err:  # an alias: a hostile file, never a rocBLAS log
            raise CallLogRefused(f"{self.path}:{line_number}: {err}") from None
        except SizingError as err:  # make_call: an argument the catalog rejects
            self.problem(Problem(line_number, BAD_ARGUMENT, str(err), count))
            return
        self.formats[format_name] = self.formats.get(format_name, 0) + count
        for call, times in calls:
            self._count(call, times * count, line_number)

    def _count(self, call: Call, times: int, line_number: int) -> None:
        entry = self.calls.get(call.key())
        if entry is None:
            if len(self.calls) >= MAX_DISTINCT_CALLS:
                raise CallLogError(
                    f"{self.path}:{line_number}: more than {MAX_DISTINCT_CALLS:,} distinct "
                    "calls; hipmem stops there (split the log, or size its largest calls)"
                )
            entry = self.calls[call.key()] = [call, 0]
        entry[1] += times

    def problem(self, found: Problem) -> None:
        """Record a line that is not a call; identical ones add to the first one's count."""
        key = (found.kind, found.message)
        known = self.problems.get(key)
        if known is not None:
            known.count += found.count
            known.line_number = min(known.line_number, found.line_number)
        elif len(self.problems) < MAX_LISTED_PROBLEMS:
            self.problems[key] = found
        else:
            self.unlisted_problem_lines += found.count

    def too_long(self, line_number: int) -> None:
        message = f"longer than {MAX_LINE_BYTES:,} bytes, skipped unread"
        self.problem(Problem(line_number, TOO_LONG, message))

    def _version(self, library: str, version: str, line_number: int, count: int) -> None:
        self.versions[library] = version
        self.ignored += count
        known = self.catalog.versions.get(library)
        if known and _version_tuple(version) > _version_tuple(known):
            message = (
                f"written by {library} {version}, newer than the {known} whose headers hipmem's "
                "catalog comes from: its routines or arguments may differ"
            )
            self.problem(Problem(line_number, NEWER_LIBRARY, message, count))

    def _parse(self, text: str) -> tuple[str, list[tuple[Call, int]]]:
        if text.startswith("- {") or text.startswith("- rocblas_function"):
            return ROCBLAS_PROFILE, [self._profile_entry(text)]
        if "rocblas-bench" in text or "rocsolver-bench" in text:
            return self._bench_line(text)
        if re.match(r"^\w+,", text):
            return ROCBLAS_TRACE, [(self._trace_line(text), 1)]
        raise _LineError(NOT_A_CALL, _clip(text))

    # -- bench lines ------------------------------------------------------------------------
    def _bench_line(self, text: str) -> tuple[str, list[tuple[Call, int]]]:
        try:
            lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True  # keeps `--lda` and `f32_r` whole; `;` `>` `|` apart
            tokens = list(lexer)
        except ValueError as err:  # an unclosed quote: the line was cut off
            raise _LineError(TRUNCATED, f"{err}: {_clip(text)}") from None
        start = next(
            (i for i, t in enumerate(tokens) if t.rsplit("/", 1)[-1].endswith("-bench")), None
        )
        if start is None:
            raise _LineError(NOT_A_CALL, f"no rocblas-bench/rocsolver-bench command: {_clip(text)}")
        program = tokens[start].rsplit("/", 1)[-1]
        options = _bench_options(tokens[start + 1 :], text)
        if "f" not in options:
            raise _LineError(TRUNCATED, f"no -f FUNCTION: {_clip(text)}")
        if program == "rocsolver-bench":
            call = self._rocsolver_bench(options)
            kind = ROCSOLVER_BENCH if self.rocsolver_header else BENCH_COMMANDS
        elif program == "rocblas-bench":
            call = self._rocblas_bench(options)
            kind = ROCBLAS_BENCH if tokens[start] == "./rocblas-bench" else BENCH_COMMANDS
        else:
            raise _LineError(NOT_A_CALL, f"unknown program {program}: {_clip(text)}")
        return kind, [(call, 1)]

    def _rocsolver_bench(self, options: dict[str, str]) -> Call:
        precision = options.get("r", "")
        function = options["f"]
        if precision not in ("s", "d", "c", "z"):
            raise _LineError(BAD_ARGUMENT, f"rocsolver-bench -r {precision!r} is not s, d, c or z")
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
                raise _LineError(BAD_ARGUMENT, str(err)) from None
            raise _LineError(TRUNCATED, f"not a complete YAML entry ({err})") from None
        entry = loaded[0] if isinstance(loaded, list) and loaded else None
        if not isinstance(entry, dict) or "rocblas_function" not in entry:
            raise _LineError(NOT_A_CALL, f"a YAML entry without rocblas_function: {_clip(text)}")
        routine = self._routine(_rocblas_name(str(entry["rocblas_function"])))
        count = entry.get("call_count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_COUNT:
            raise _LineError(
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
            raise _LineError(
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
            raise _NoWorkspace(name)
        raise _LineError(UNKNOWN_FUNCTION, f"{name} is not a routine hipmem knows")

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
                raise _LineError(BAD_ARGUMENT, f"{routine.name} has no argument '{key}'")
            if name in given:
                raise _LineError(BAD_ARGUMENT, f"{routine.name}: argument {name} given twice")
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

    def finish(self, line_count: int) -> CallLog:
        if not self.calls and self.rocsolver_unsizable:
            raise CallLogError(
                f"{self.path}: a rocSOLVER trace or profile log records no call arguments; "
                "log with ROCSOLVER_LAYER=2 (bench) to size its calls"
            )
        if self.rocsolver_unsizable:
            self.problem(
                Problem(
                    self.rocsolver_unsizable_first,
                    NOT_A_CALL,
                    "rocSOLVER trace/profile lines record no arguments",
                    self.rocsolver_unsizable,
                )
            )
        problems = sorted(self.problems.values(), key=lambda p: p.line_number)
        if BENCH_COMMANDS in self.formats:  # pasted commands, some of them `./rocblas-bench`
            for logged in (ROCBLAS_BENCH, ROCSOLVER_BENCH):
                self.formats[BENCH_COMMANDS] += self.formats.pop(logged, 0)
        formats = sorted(self.formats, key=lambda f: -self.formats[f])
        return CallLog(
            path=self.path,
            format=" + ".join(formats) if formats else "no calls",
            line_count=line_count,
            calls=[(call, count) for call, count in self.calls.values()],
            problems=problems,
            unlisted_problem_lines=self.unlisted_problem_lines,
            no_workspace=self.no_workspace,
            ignored_line_count=self.ignored,
            versions=self.versions,
        )


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
            raise _LineError(BAD_ARGUMENT, f"unexpected '{token}' in: {_clip(text)}")
        name = token.lstrip("-")
        if name in options:  # as on the command line: a repeated option is an error
            raise _LineError(BAD_ARGUMENT, f"option {token} given twice")
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
            raise _LineError(BAD_ARGUMENT, f"gemv with a_type/c_type {pair} is not a rocBLAS gemv")
        return _MIXED_GEMV[pair], family, {"a_type", "c_type", "compute_type"}
    datatype = options.get("r", "")
    precision = _BLAS_PRECISION.get(datatype)
    if precision is None:
        raise _LineError(BAD_ARGUMENT, f"-r {datatype!r} is not a rocBLAS data type")
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


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".") if part.isdigit())
