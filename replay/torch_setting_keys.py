"""The allocator-setting keys a PyTorch build accepts, read from that build's own c10 headers,
so that a mistyped key (`expandable_segment`) is refused before any replay, with the keys
nearest to it, instead of ending in PyTorch's bare "Unrecognized key".

PyTorch declares its keys in two sets (PyTorch >= 2.9): the keys every device shares, in
`c10/core/AllocatorConfig.h` (`getMutableKeys()`), and the CUDA allocator's own, in
`c10/cuda/CUDAAllocatorConfig.h` (`getKeys()`, from 2.10). Adjacent string literals are one
string there, as in C (`"release_lock_on_cud" "amalloc"`, written so to survive hipify). A
build whose headers do not declare both sets (2.9's CUDA keys live in its .cpp) gets no check
here: PyTorch's own refusal, which names the key, is then the answer.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cache
from pathlib import Path

from hipmem._core.alloc_conf import settings_pairs
from hipmem._core.close_names import did_you_mean
from hipmem.replay.errors import ReplayUsageError

# (header, the function whose braces hold the set's literals)
_SETS = (
    ("c10/core/AllocatorConfig.h", "getMutableKeys"),
    ("c10/cuda/CUDAAllocatorConfig.h", "getKeys"),
)
_LITERAL = re.compile(r'"([^"\\]*)"')
_LINE_COMMENT = re.compile(r"//[^\n]*")


def accepted_keys(include_dirs: Iterable[Path]) -> frozenset[str] | None:
    """Every key the build's headers declare, or None when a set is not declared there."""
    return _accepted_keys(tuple(include_dirs))


@cache
def _accepted_keys(include_dirs: tuple[Path, ...]) -> frozenset[str] | None:
    keys: set[str] = set()
    for header, function in _SETS:
        found = _declared(include_dirs, header, function)
        if found is None:
            return None
        keys |= found
    return frozenset(keys)


def _declared(include_dirs: tuple[Path, ...], header: str, function: str) -> set[str] | None:
    for folder in include_dirs:
        try:
            text = (folder / header).read_text(errors="replace")
        except OSError:
            continue
        body = re.search(
            rf"\b{function}\(\)\s*\{{[^{{}}]*?keys\s*\{{(?P<keys>[^}}]*)\}}", text, re.S
        )
        if body is None:
            return None
        # One initialiser item per comma; adjacent literals within an item are one string.
        items = _LINE_COMMENT.sub("", body["keys"]).split(",")
        return {"".join(_LITERAL.findall(item)) for item in items if _LITERAL.search(item)}
    return None


def check_setting_keys(conf: str, version: str, include_dirs: Iterable[Path]) -> None:
    """A usage error for the first key of `conf` that PyTorch `version` does not accept."""
    keys = accepted_keys(include_dirs)
    if keys is None or not conf:
        return
    for key, _ in settings_pairs(conf):
        if key not in keys:
            hint = did_you_mean(key, sorted(keys), quote="'")
            known = "" if hint else f" (it takes {', '.join(sorted(keys))})"
            raise ReplayUsageError(
                f"PyTorch {version} has no allocator setting '{key}' (in {conf!r}){hint}{known}"
            )
