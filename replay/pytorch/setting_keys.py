"""The allocator-setting keys a PyTorch build accepts, read from that build's own c10 headers,
so that a mistyped key (`expandable_segment`) is refused before any replay, with the keys
nearest to it, instead of ending in PyTorch's bare "Unrecognized key".

PyTorch declares its keys in two sets (PyTorch >= 2.9): the keys every device shares, in
`c10/core/AllocatorConfig.h` (`getMutableKeys()`), and the CUDA allocator's own, in
`c10/cuda/CUDAAllocatorConfig.h` (`getKeys()`, from 2.10). Adjacent string literals are one
string there, as in C (`"release_lock_on_cud" "amalloc"`, written so to survive hipify). A
build whose headers do not declare both sets (2.9's CUDA keys live in its .cpp) gets no check
here before the replay; PyTorch's own refusal, which names the key, is then turned into the
same usage error (`refused_key`) as soon as the allocator starts. From 2.14 the shared set is
declared in a .cpp again, so that is the path the newest releases take.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cache
from pathlib import Path

from hipmem._core.alloc_conf import settings_pairs
from hipmem._core.close_names import did_you_mean

from ..errors import ReplayUsageError

# (header, the function whose braces hold the set's literals)
_SETS = (
    ("c10/core/AllocatorConfig.h", "getMutableKeys"),
    ("c10/cuda/CUDAAllocatorConfig.h", "getKeys"),
)
_LITERAL = re.compile(r'"([^"\\]*)"')
_LINE_COMMENT = re.compile(r"//[^\n]*")


# The shared keys every supported release (2.4 on) accepts, and the ones hipmem recommends:
# the hint for a mistyped key when a build's headers do not declare its shared set.
_SHARED_SINCE_2_4 = frozenset(
    {"expandable_segments", "max_split_size_mb", "roundup_power2_divisions",
     "garbage_collection_threshold"}
)  # fmt: skip
# 2.9 on: "Unrecognized key 'x' in CUDA allocator config"; 2.4: "Unrecognized CachingAllocator
# option: x".
_UNRECOGNIZED = re.compile(r"Unrecognized key '([^']{1,100})'|Unrecognized CachingAllocator "
                           r"option: ([A-Za-z0-9_]{1,100})")  # fmt: skip


def accepted_keys(include_dirs: Iterable[Path]) -> frozenset[str] | None:
    """Every key the build's headers declare, or None when a set is not declared there."""
    sets = _declared_sets(tuple(include_dirs))
    return None if None in sets else frozenset().union(*(s for s in sets if s is not None))


@cache
def _declared_sets(include_dirs: tuple[Path, ...]) -> tuple[frozenset[str] | None, ...]:
    return tuple(
        None if (found := _declared(include_dirs, header, function)) is None else frozenset(found)
        for header, function in _SETS
    )


def refused_key(
    what: str, conf: str, version: str, include_dirs: Iterable[Path]
) -> ReplayUsageError | None:
    """PyTorch's own refusal of a key (`what`, its words) as the usage error
    `check_setting_keys` gives, or None when `what` is not such a refusal."""
    found = _UNRECOGNIZED.search(what)
    if found is None:
        return None
    declared = _declared_sets(tuple(include_dirs))
    known = _SHARED_SINCE_2_4.union(*(s for s in declared if s is not None))
    key = found[1] or found[2]
    hint = did_you_mean(key, sorted(known), quote="'")
    return ReplayUsageError(
        f"PyTorch {version} has no allocator setting '{key}' (in {conf!r}){hint}"
    )


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
