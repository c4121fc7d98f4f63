"""`--rocm VERSION` (or `HIPMEM_ROCM`): which ROCm release(s) a request is answered with, for
size, recommend, check and routines. Where each release is found: sizing/rocm/locator.py."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hipmem._core.errors import UsageError as HipmemUsageError

from ..errors import SizingUsageError
from .locator import Libraries, locate
from .on_demand import OnDemand
from .releases import normalise, sort_key

ROCM_ENV = "HIPMEM_ROCM"


def requested(option: str | None) -> tuple[list[str], str]:
    """The releases asked for (none: the default rule) and how they were asked."""
    if option is not None:
        text, asked_as = option, "--rocm"
    else:
        text, asked_as = os.environ.get(ROCM_ENV, ""), ROCM_ENV
    names: list[str] = []
    pieces = [piece.strip() for piece in text.split(",")] if text.strip() else []
    for part in pieces:
        with _from_environment(asked_as):
            if not part:  # `7.2,,6.4` or `7.2,`: a release left out, not a list to guess at
                raise SizingUsageError("a release is missing between commas", parameter="rocm",
                                       value=text)  # fmt: skip
            name = normalise(part)
        if name not in names:
            names.append(name)
    return names, asked_as


@contextmanager
def _from_environment(asked_as: str) -> Iterator[None]:
    """An error about the `rocm` parameter names HIPMEM_ROCM when that is where it came from
    (the CLI's error line names --rocm otherwise)."""
    try:
        yield
    except HipmemUsageError as err:  # the sizing library's, or a shared one (release_text)
        if asked_as != ROCM_ENV or err.parameter != "rocm":
            raise
        raise SizingUsageError(err.detail, parameter=ROCM_ENV, value=err.value) from None


def one_release(
    option: str | None, rocm_dir: Path | None, command: str, fetch: OnDemand | None = None
) -> Libraries:
    """The libraries of the single release recommend/check/routines answer with."""
    names, asked_as = requested(option)
    if len(names) > 1:
        raise SizingUsageError(
            f"{asked_as} {','.join(names)}: {command} takes one release "
            f"(`hipmem size --rocm {','.join(names)}` compares them)"
        )
    with _from_environment(asked_as):
        return locate(rocm_dir, names[0] if names else None, fetch)


def releases(
    option: str | None, rocm_dir: Path | None, fetch: OnDemand | None = None
) -> list[Libraries]:
    """The libraries of every release asked for (one when none was)."""
    names, asked_as = requested(option)
    with _from_environment(asked_as):
        wanted: list[str | None] = [*names] if names else [None]
        return [locate(rocm_dir, name, fetch) for name in wanted]


def several_cached_warning(libraries: Libraries) -> str | None:
    """recommend/check warn when the cache holds several releases and none was chosen."""
    if not (libraries.other_cached and libraries.why.startswith("the newest")):
        return None
    held = ", ".join(sorted([*libraries.other_cached, libraries.rocm or "?"], key=sort_key))
    return (
        f"the cache holds ROCm {held} and none was chosen: this answer is for ROCm "
        f"{libraries.rocm}; pin the release you deploy with --rocm or {ROCM_ENV}"
    )
