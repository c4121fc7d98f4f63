"""The one bound on a release a user names (`--rocm`, `--torch`, `--rmm`, `HIPMEM_ROCM`,
`HIPMEM_TORCH`), checked before any parser reads it.

The longest real release text is a dozen characters (`2.14.1+cu130`, `25.04.00`, `6.4.3`);
a text of thousands of digits is a mistake or an attack, and would reach Python's limit on
int() of long digit strings (4,300 digits) inside a version parser as an internal error. So
past MAX_RELEASE_CHARS a text is refused as a usage error naming where it came from, with
what a release looks like.
"""

from __future__ import annotations

from hipmem._core.errors import UsageError

MAX_RELEASE_CHARS = 40


class BadRelease(UsageError):
    """A release text that cannot be a release (too long to be one)."""


def check_release_length(text: str, *, parameter: str, example: str) -> str:
    """`text` when it is short enough to be a release; else a usage error naming `parameter`
    and showing a release (`example`, e.g. "2.14 or 2.14.1")."""
    if len(text) > MAX_RELEASE_CHARS:
        raise BadRelease(
            f"{len(text):,} characters is not a release (at most {MAX_RELEASE_CHARS}; a "
            f"release looks like {example})",
            parameter=parameter,
        )
    return text
