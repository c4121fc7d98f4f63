"""PyTorch's allocator setting strings (the value of PYTORCH_CUDA_ALLOC_CONF and its siblings),
as hipmem accepts and writes them.

PyTorch's own grammar (c10's ConfigTokenizer): `key:value` pairs joined by commas; a value is a
word, or a bracketed list of `boundary:divisions` items for `roundup_power2_divisions`
(`[256:1,512:2,>:8]`). hipmem accepts that shape with keys of lower-case letters, digits and
underscores and values of letters, digits and dots, and no spaces: nothing PyTorch would read
differently, and no quote, `$`, backquote, `;` or newline, so that a string accepted here can
be written into a shell file in single quotes, a dotenv file, YAML, JSON or GitHub's env file
as it is. Whether PyTorch knows a key is PyTorch's to say (it names the key it refuses).

Both libraries use this: the replay library reads settings from specs and snapshots, and the
sizing library's env formats refuse to write anything else (hipmem/_core: one copy).
"""

from __future__ import annotations

import re

from hipmem._core.errors import UsageError

_WORD = r"[A-Za-z0-9.]+"
_ITEM = r"(?:[0-9]+|>):[0-9]+"
_VALUE = rf"(?:{_WORD}|\[{_ITEM}(?:,{_ITEM})*\])"
_PAIR = rf"[a-z0-9_]+:{_VALUE}"
_SETTINGS = re.compile(rf"(?:{_PAIR}(?:,{_PAIR})*)?")
_SPLIT = re.compile(rf"([a-z0-9_]+):({_VALUE})")
MAX_CHARS = 1000  # a real setting string is a few dozen characters


class BadAllocConf(UsageError):
    """A setting string that is not PyTorch's `key:value,...` shape."""


def is_alloc_conf(text: str) -> bool:
    """True when `text` is a setting string of the shape above ("" is PyTorch's defaults)."""
    return len(text) <= MAX_CHARS and _SETTINGS.fullmatch(text) is not None


def check_alloc_conf(text: str, *, parameter: str = "settings") -> str:
    """`text` when it is a setting string, else a usage error naming `parameter`."""
    if len(text) > MAX_CHARS:
        raise BadAllocConf(
            f"{len(text):,} characters, more than {MAX_CHARS:,}", parameter=parameter
        )
    if not is_alloc_conf(text):
        raise BadAllocConf(
            "expected PyTorch's allocator settings, key:value pairs joined by commas, e.g. "
            "expandable_segments:True,max_split_size_mb:256 or "
            "roundup_power2_divisions:[256:1,512:2,>:8] (no spaces or quotes)",
            parameter=parameter,
            value=text,
        )
    return text


def settings_pairs(text: str) -> list[tuple[str, str]]:
    """The (key, value) pairs of a setting string, in order (`check_alloc_conf` it first)."""
    return [(m.group(1), m.group(2)) for m in _SPLIT.finditer(check_alloc_conf(text))]
