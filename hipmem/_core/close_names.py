"""Did you mean: the one place that finds the names closest to a mistyped one.

Every name a user types (a routine, an argument, a device, a resource kind, an allocator
setting, a ROCm release, a log header) is checked against the names hipmem knows, and a name
it does not know gets the nearest ones in its error line. difflib (the standard library)
scores the likeness; ties are broken in name order (difflib alone breaks them in reverse,
which put `dgetrf` after `dgetrs`).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest(word: str, candidates: Iterable[str], *, n: int = 3, cutoff: float = 0.6) -> list[str]:
    """The `n` candidates most like `word` (at least `cutoff` alike), best first."""
    scored = []
    for candidate in dict.fromkeys(candidates):
        matcher = difflib.SequenceMatcher(None, word, candidate)
        if matcher.real_quick_ratio() >= cutoff and matcher.quick_ratio() >= cutoff:
            ratio = matcher.ratio()
            if ratio >= cutoff:
                scored.append((-ratio, candidate))
    return [candidate for _, candidate in sorted(scored)[:n]]


def did_you_mean(
    word: str, candidates: Iterable[str], *, n: int = 3, cutoff: float = 0.6, quote: str = ""
) -> str:
    """`; did you mean X?` (or `X or Y`, `X, Y or Z`) for an error line, or "" when no
    candidate is close. `quote` wraps each name (`'`)."""
    return suggestion(closest(word, candidates, n=n, cutoff=cutoff), quote=quote)


def suggestion(names: list[str], *, quote: str = "") -> str:
    """`; did you mean X, Y or Z?` for names already chosen, or "" for none."""
    close = [f"{quote}{name}{quote}" for name in names]
    if not close:
        return ""
    named = close[0] if len(close) == 1 else f"{', '.join(close[:-1])} or {close[-1]}"
    return f"; did you mean {named}?"
