"""Where the calls to size come from: the command line (and, later, logs and workload files).

`hipmem size` and `hipmem recommend` share this, so they accept the same sources.
"""

from __future__ import annotations

from sizing.call_spec import Call, parse_call
from sizing.errors import UsageError


def gather_calls(call_texts: list[str]) -> list[Call]:
    """Every call the user named, parsed and checked before any worker starts."""
    calls = [parse_call(text) for text in call_texts]
    if not calls:
        raise UsageError(
            "no calls to size: give CALL arguments, e.g. rocsolver_dgetrf:m=1024,n=1024"
        )
    return calls
