"""PyTorch's allocator setting strings (the value of PYTORCH_CUDA_ALLOC_CONF and its siblings),
as hipmem accepts and writes them.

PyTorch's own grammar (c10's ConfigTokenizer): `key:value` pairs joined by commas; a value is a
word, or a bracketed list of `boundary:divisions` items for `roundup_power2_divisions`
(`[256:1,512:2,>:8]`). hipmem accepts that shape with keys of lower-case letters, digits and
underscores and values of letters, digits and dots, and no spaces: nothing PyTorch would read
differently, and no quote, `$`, backquote, `;` or newline, so that a string accepted here can
be written into a shell file in single quotes, a dotenv file, YAML, JSON or GitHub's env file
as it is. Whether PyTorch knows a key is PyTorch's to say (it names the key it refuses).

Each value is then held to its key's grammar (`alloc_conf_problem`), so that a value PyTorch
would refuse, or read as something else, never reaches it: `max_split_size_mb:1e400` is ours
to refuse ("not a whole number of MiB"), where PyTorch's `stoi` would read `1` and answer "too
small, must be >= 20". hipmem's grammar is a subset of what every PyTorch it drives (2.4 on)
takes: plain decimal digits where PyTorch reads an integer (its `stoi`/`stoull` would take
`32abc` as 32), bounded by what PyTorch 2.4's `stoi` reads (2**31 - 1); a fraction as digits
and one point; `True`/`False` exactly. Keys whose values have no rule here (keys new in a
later PyTorch) keep the shape rule only.

Both libraries use this: the replay library reads settings from specs and snapshots, and the
sizing library's env formats refuse to write anything else (hipmem/_core: one copy).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable

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
    """`text` when it is a setting string PyTorch takes, else a usage error naming `parameter`
    (a Python parameter, a flag such as `--alloc-conf`, or a variable's name)."""
    problem = alloc_conf_problem(text)
    if problem is None:
        return text
    if len(text) > MAX_CHARS:
        raise BadAllocConf(problem, parameter=parameter)
    raise BadAllocConf(problem, parameter=parameter, value=text)


def validate_alloc_conf(text: str, where: str) -> str:
    """`text` when it is a setting string PyTorch takes, else a usage error whose one line
    starts with `where` (`--alloc-conf`, `PYTORCH_CUDA_ALLOC_CONF`, `run.pickle#dev0: the
    recorded settings`): `where: max_split_size_mb: '1e400' is not a whole number of MiB`."""
    problem = alloc_conf_problem(text)
    if problem is not None:
        raise BadAllocConf(f"{where}: {problem}")
    return text


def alloc_conf_problem(text: str) -> str | None:
    """What is wrong with `text` as PyTorch's allocator settings, said without where it came
    from; None when PyTorch takes it."""
    if len(text) > MAX_CHARS:
        return f"{len(text):,} characters, more than {MAX_CHARS:,}"
    if not is_alloc_conf(text):
        return (
            "expected PyTorch's allocator settings, key:value pairs joined by commas, e.g. "
            "expandable_segments:True,max_split_size_mb:256 or "
            "roundup_power2_divisions:[256:1,512:2,>:8] (no spaces or quotes)"
        )
    for match in _SPLIT.finditer(text):
        problem = setting_value_problem(match.group(1), match.group(2))
        if problem is not None:
            return problem
    return None


def setting_value_problem(key: str, value: str) -> str | None:
    """What is wrong with `value` for PyTorch's setting `key` (`key: 'value' is ...`), or None
    when PyTorch takes it (or hipmem has no rule for the key)."""
    rule = _VALUE_RULES.get(key)
    why = None if rule is None else rule(value)
    return None if why is None else f"{key}: {_shown(value)} {why}"


# PyTorch 2.4-2.8 read integer settings with `stoi`: past INT_MAX it throws. Later releases
# use `stoull`; the stricter bound holds for every release hipmem drives.
MAX_SETTING_INT = 2**31 - 1
# kLargeBuffer is 20 MiB: PyTorch 2.11 takes max_split_size_mb >= 20, 2.4 and 2.9 only more
# than 20 (seen on the virtual GPU), so 21 is the least every release takes.
LEAST_SPLIT_MIB = 21
MOST_REGISTER_THREADS = 128  # pinned_max_register_threads()
_DIGITS = re.compile(r"[0-9]+")
_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+")
_TRUE_OR_FALSE = ("True", "False")
_BACKENDS = ("native", "cudaMallocAsync", "hipMallocAsync")


def _whole(value: str) -> int | None:
    """Plain decimal digits as an int (None otherwise), never int() of thousands of digits."""
    if not _DIGITS.fullmatch(value):
        return None
    digits = value.lstrip("0") or "0"
    return int(digits) if len(digits) <= 10 else MAX_SETTING_INT + 1


def _is_power_of_2(number: int) -> bool:
    return number > 0 and number & (number - 1) == 0


def _mib_from_20(value: str) -> str | None:
    number = _whole(value)
    if number is None:
        return "is not a whole number of MiB"
    if number < LEAST_SPLIT_MIB:
        return f"is below {LEAST_SPLIT_MIB} MiB, the least every PyTorch from 2.4 takes"
    if number > MAX_SETTING_INT:
        return f"is above {MAX_SETTING_INT:,} MiB, the most PyTorch reads"
    return None


def _mib_above_10(value: str) -> str | None:
    number = _whole(value)
    if number is None:
        return "is not a whole number of MiB"
    if number <= 10:
        return "is not above 10 MiB, the least PyTorch takes"
    if number > MAX_SETTING_INT:
        return f"is above {MAX_SETTING_INT:,} MiB, the most PyTorch reads"
    return None


def _positive_mib(value: str) -> str | None:
    number = _whole(value)
    if number is None or number == 0:
        return "is not a whole number of MiB above 0"
    if number > MAX_SETTING_INT:
        return f"is above {MAX_SETTING_INT:,} MiB, the most PyTorch reads"
    return None


def _fraction(value: str, *, open_above: bool) -> float | None:
    """The number PyTorch's `stod` reads, or None where it would read another or throw."""
    if not _DECIMAL.fullmatch(value):
        return None
    number = float(value)  # correctly rounded, as stod is: 0.99999999999999999 is 1.0
    if number != 0 and number < sys.float_info.min:  # stod throws on underflow (ERANGE)
        return None
    return number if number < 1.0 or not open_above else None


def _gc_threshold(value: str) -> str | None:
    number = _fraction(value, open_above=True)
    if number is None or number <= 0:
        return "is not a number between 0 and 1, both excluded (e.g. 0.8)"
    return None


def _memory_fraction(value: str) -> str | None:
    number = _fraction(value, open_above=False)
    if number is None or number > 1.0:
        return "is not a number from 0 to 1 (e.g. 0.5)"
    return None


def _true_or_false(value: str) -> str | None:
    return None if value in _TRUE_OR_FALSE else "is not True or False (PyTorch's only words)"


def _backend(value: str) -> str | None:
    return None if value in _BACKENDS else f"is not one of {', '.join(_BACKENDS)}"


def _register_threads(value: str) -> str | None:
    number = _whole(value)
    if number is None or not _is_power_of_2(number) or number > MOST_REGISTER_THREADS:
        return f"is not a power of 2 from 1 to {MOST_REGISTER_THREADS}"
    return None


def _divisions(value: str) -> str | None:
    """`4` (every interval), or `[256:1,512:2,>:8]`: interval (a power of 2, in MiB, or `>`
    for the rest) : divisions (0, none, or a power of 2)."""
    if not value.startswith("["):
        number = _whole(value)
        if number is None or not _is_power_of_2(number) or number > MAX_SETTING_INT:
            return "is not a power of 2 (1, 2, 4, ...) or a list such as [256:1,512:2,>:8]"
        return None
    for item in value[1:-1].split(","):
        interval, _, divisions = item.partition(":")
        size = None if interval == ">" else _whole(interval)
        if interval != ">" and (size is None or not _is_power_of_2(size)
                                or size > MAX_SETTING_INT):  # fmt: skip
            return f"has the interval {_shown(interval)}, not a power of 2 (MiB) or >"
        count = _whole(divisions)
        if count is None or count > MAX_SETTING_INT or (count and not _is_power_of_2(count)):
            return f"gives {_shown(divisions)} divisions, neither 0 nor a power of 2"
    return None


_BOOLEAN_KEYS = (
    "expandable_segments",
    "release_lock_on_cudamalloc",
    "release_lock_on_hipmalloc",
    "pinned_use_cuda_host_register",
    "pinned_use_hip_host_register",
    "pinned_use_background_threads",
    "graph_capture_record_stream_reuse",
    "pinned_free_catch_all",  # 2.14 on
    "throw_on_cudamalloc_oom",  # 2.14 on
)
_VALUE_RULES: dict[str, Callable[[str], str | None]] = {
    "max_split_size_mb": _mib_from_20,
    "max_non_split_rounding_mb": _mib_from_20,
    "large_segment_size_mb": _mib_above_10,  # 2.11 on: "must be > 10 MB"
    "pinned_reserve_segment_size_mb": _positive_mib,
    "garbage_collection_threshold": _gc_threshold,
    "per_process_memory_fraction": _memory_fraction,
    "roundup_power2_divisions": _divisions,
    "backend": _backend,
    "pinned_num_register_threads": _register_threads,
    **dict.fromkeys(_BOOLEAN_KEYS, _true_or_false),
}
KEYS_WITH_RULES = frozenset(_VALUE_RULES)


def _shown(value: str) -> str:
    """A value as a message quotes it: whole, or its first 20 characters and its length."""
    return repr(value) if len(value) <= 40 else f"{value[:20]!r}... ({len(value):,} characters)"


def settings_pairs(text: str) -> list[tuple[str, str]]:
    """The (key, value) pairs of a setting string, in order (`check_alloc_conf` it first:
    this holds it to the shape only)."""
    if not is_alloc_conf(text):
        check_alloc_conf(text)  # raises, saying why
    return [(m.group(1), m.group(2)) for m in _SPLIT.finditer(text)]
