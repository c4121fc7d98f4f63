"""Where the calls to size come from: the command line, call logs and workload files.

`hipmem size`, `hipmem recommend` and `hipmem check` share this, so they accept the same
sources with the same options (`CallSources` is filled from options in hipmem_cli/options.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sizing.call_spec import Call, parse_call
from sizing.errors import UsageError


@dataclass
class CallSources:
    call_texts: list[str] = field(default_factory=list)
    from_logs: list[Path] = field(default_factory=list)
    workloads: list[Path] = field(default_factory=list)
    strict: bool = False


def gather_calls(sources: CallSources) -> list[Call]:
    """Every call the user named, parsed and checked before any worker starts."""
    if sources.from_logs or sources.workloads:
        raise UsageError("--from-log and --workload are not implemented yet")
    calls = [parse_call(text) for text in sources.call_texts]
    if not calls:
        raise UsageError(
            "no calls to size: give CALL arguments, e.g. rocsolver_dgetrf:m=1024,n=1024"
        )
    return calls
