"""Read the calls an application made from rocBLAS/rocSOLVER call logs.

Formats (`log_formats.py`; each line is classified on its own, so pasted mixtures work
too): rocBLAS bench, trace and profile logs, rocSOLVER bench logs (a `ROCSOLVER LOG FILE`
header, version lines, then bench lines), and bench command lines pasted into a file.
Logs are large and repetitive, so the reader counts identical lines while streaming (memory
grows with the number of distinct lines, not the file) and parses each distinct line once.
Lines that are not calls are never dropped silently: each kind is counted with line numbers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hipmem._core.progress import ProgressCallback

from ..errors import CallLogError, CallLogRefused, NotACallLog, SizingError
from ..rocm.catalog import Catalog, load_catalog
from .input_files import NotAFile, UnreadableInput, open_input
from .log_formats import (
    BAD_ARGUMENT,
    BENCH_COMMANDS,
    NEWER_LIBRARY,
    NOT_A_CALL,
    ROCBLAS_BENCH,
    ROCSOLVER_BENCH,
    TOO_LONG,
    LineError,
    LineParser,
    NoWorkspace,
)
from .log_lines import MAX_LINE_BYTES, bounded_lines
from .spec import Call
from .strict_yaml import StrictYamlError

# Bounds that keep memory and time proportional to what a real log holds, whatever a file
# holds: the calls kept, the problems listed (the rest are counted), and the distinct lines
# held before parsing (a line's own bound is log_lines.MAX_LINE_BYTES).
MAX_DISTINCT_CALLS = 100_000
MAX_LISTED_PROBLEMS = 1_000
_DISTINCT_LINES_HELD = 100_000

_VERSION_LINE = re.compile(r"^(rocSOLVER|rocBLAS) Version: ([\d.]+?)\.?$")


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
            for number, raw in enumerate(bounded_lines(path, stream, progress), start=1):
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
    except NotAFile as err:
        raise NotACallLog(str(err)) from None
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


class _LogReader:
    """Turns distinct lines into calls and problems, remembering which formats it saw."""

    def __init__(self, path: Path, catalog: Catalog) -> None:
        self.path = path
        self.catalog = catalog
        self.parser = LineParser(catalog)
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
            format_name, calls = self.parser.parse(text, self.rocsolver_header)
        except NoWorkspace as named:
            self.no_workspace[str(named)] = self.no_workspace.get(str(named), 0) + count
            return
        except LineError as err:
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


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".") if part.isdigit())
