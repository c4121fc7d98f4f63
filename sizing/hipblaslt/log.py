"""hipBLASLt's bench log: with `HIPBLASLT_LOG_MASK=32` the library writes one
`hipblaslt-bench ...` command line per hipblasLtMatmul (to `HIPBLASLT_LOG_FILE`, else stderr):

    hipblaslt-bench --api_method c -m 8192 -n 16 -k 8192 --lda 8192 ... --transA T --transB N
      --batch_count 1 ... --a_type bf16_r --b_type bf16_r --c_type bf16_r --d_type bf16_r
      --scale_type f32_r --bias_type f32_r --compute_type f32_r --algo_method index ...

The lines are data: split on whitespace and read as options, never run. The log does not
record the workspace cap the application passed, so each call gets the default cap
(PyTorch's). Read with the same bounds as the rocBLAS logs (`sizing/calls/log_lines.py`): lines
longer than 64 KiB are skipped, a line with no end stops the read, at most 100,000 distinct
calls; a line that is not a readable call is reported with its number.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..calls.input_files import NotAFile, UnreadableInput, open_input
from ..calls.log_lines import MAX_LINE_BYTES, bounded_lines
from ..errors import CallLogError, NotACallLog, SizingError
from .matmul import MatmulCall, parse_matmul

PROGRAM = "hipblaslt-bench"
MAX_DISTINCT_CALLS = 100_000
_SNIFF_BYTES = 1 << 16
# hipblaslt-bench option -> the call spec's argument
_OPTIONS = {
    "-m": "m",
    "-n": "n",
    "-k": "k",
    "--transA": "transA",
    "--transB": "transB",
    "--a_type": "a_type",
    "--b_type": "b_type",
    "--c_type": "c_type",
    "--d_type": "d_type",
    "--compute_type": "compute_type",
    "--batch_count": "batch_count",
}
_FLAGS = frozenset({"--any_stride"})  # options that take no value


@dataclass
class SkippedLine:
    line_number: int
    reason: str

    def where(self, path: Path) -> str:
        return f"{path}:{self.line_number}: {self.reason}"


@dataclass
class HipblasltLog:
    path: Path
    line_count: int = 0
    calls: dict[MatmulCall, int] = field(default_factory=dict)  # call -> how often
    skipped: list[SkippedLine] = field(default_factory=list)

    @property
    def call_count(self) -> int:
        return sum(self.calls.values())


def is_hipblaslt_log(path: Path) -> bool:
    """Whether the file's start holds a hipblaslt-bench line (cheap: one block). Only
    regular files are looked into: a pipe read here would lose what was read."""
    if not path.is_file():
        return False
    try:
        with open_input(path) as stream:
            return PROGRAM.encode() in stream.read(_SNIFF_BYTES)
    except (OSError, UnreadableInput):
        return False


def read_hipblaslt_log(path: Path) -> HipblasltLog:
    log = HipblasltLog(path)
    seen: dict[bytes, MatmulCall | None] = {}
    try:
        with open_input(path) as stream:
            for number, raw in enumerate(bounded_lines(path, stream, None), start=1):
                log.line_count = number
                if raw is None:
                    log.skipped.append(
                        SkippedLine(number, f"too long (over {MAX_LINE_BYTES:,} bytes)")
                    )
                    continue
                if not raw.strip():
                    continue
                if raw not in seen:
                    try:
                        seen[raw] = _call(raw.decode("utf-8", "replace"))
                    except SizingError as err:
                        seen[raw] = None
                        log.skipped.append(SkippedLine(number, str(err)))
                    if len(seen) > MAX_DISTINCT_CALLS:
                        raise CallLogError(
                            f"{path}:{number}: more than {MAX_DISTINCT_CALLS:,} distinct lines; "
                            "reading stopped"
                        )
                call = seen[raw]  # None: a bad line, reported at its first number
                if call is not None:
                    log.calls[call] = log.calls.get(call, 0) + 1
    except NotAFile as err:
        raise NotACallLog(str(err)) from None
    except UnreadableInput as err:
        raise CallLogError(str(err)) from None
    except OSError as err:
        raise CallLogError(f"{path}: cannot read: {err.strerror or err}") from None
    return log


def _call(text: str) -> MatmulCall:
    tokens = text.split()
    if PROGRAM not in (tokens[0].rsplit("/", 1)[-1] if tokens else ""):
        raise SizingError(f"not a {PROGRAM} line: {text[:60]!r}")
    options: dict[str, str] = {}
    index = 1
    while index < len(tokens):
        token = tokens[index]
        if token in _FLAGS or not token.startswith("-"):
            index += 1
            continue
        if index + 1 >= len(tokens):
            raise SizingError(f"{token[:40]} has no value")
        if token in options:
            raise SizingError(f"{token[:40]} given twice")
        options[token] = tokens[index + 1]
        index += 2
    missing = [name for name in ("-m", "-n", "-k") if name not in options]
    if missing:
        raise SizingError(f"{PROGRAM} line without {', '.join(missing)}")
    args = [f"{_OPTIONS[o]}={v}" for o, v in options.items() if o in _OPTIONS]
    return parse_matmul("hipblaslt_matmul:" + ",".join(args))
