"""PyTorch's allocator settings held to each key's value grammar before PyTorch sees them
(hipmem/_core/alloc_conf.py): hipmem takes a value only where every PyTorch it drives (2.4 on)
takes it, and refuses the rest in one line naming where the settings came from and the key,
never relaying PyTorch's own assertion.

The reference here is PyTorch's parsing as its C++ does it, written again from its source:
2.4 reads integers with `stoi` (and wants max_split_size_mb > 20), 2.9 on with `stoull`
(2.11: >= 20), fractions with `stod`; `stoi`/`stoull`/`stod` skip blanks, take a sign and
stop at the first character they cannot read (`32abc` is 32), and throw past their range.
What the real allocator makes of the boundary values is tests/replay/pytorch/
test_setting_values.py's."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from hipmem._core.alloc_conf import (
    KEYS_WITH_RULES,
    MAX_CHARS,
    BadAllocConf,
    alloc_conf_problem,
    check_alloc_conf,
    validate_alloc_conf,
)

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
INT_MAX = 2**31 - 1
ULLONG_MAX = 2**64 - 1
RELEASES = ("2.4", "2.14")  # the oldest read (stoi, > 20) and the newest (stoull, >= 20)
BOOLEANS = {
    "expandable_segments", "release_lock_on_cudamalloc", "release_lock_on_hipmalloc",
    "pinned_use_cuda_host_register", "pinned_use_hip_host_register",
    "pinned_use_background_threads", "graph_capture_record_stream_reuse",
    "pinned_free_catch_all", "throw_on_cudamalloc_oom",
}  # fmt: skip


class Refused(Exception):
    """PyTorch would stop at this value (a TORCH_CHECK, or a C++ exception)."""


_INT_PREFIX = re.compile(r"\s*([+-]?)([0-9]+)")
_FLOAT_PREFIX = re.compile(r"\s*[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _stoi(text: str) -> int:
    found = _INT_PREFIX.match(text)
    if found is None:
        raise Refused("invalid_argument")
    value = int(found[2]) * (-1 if found[1] == "-" else 1)
    if not -(2**31) <= value <= INT_MAX:
        raise Refused("out_of_range")
    return value


def _stoull(text: str) -> int:
    found = _INT_PREFIX.match(text)
    if found is None:
        raise Refused("invalid_argument")
    value = int(found[2])
    if value > ULLONG_MAX:
        raise Refused("out_of_range")
    return (-value) % (ULLONG_MAX + 1) if found[1] == "-" else value


def _stod(text: str) -> float:
    lowered = text.strip().lower()
    for word, number in (("nan", math.nan), ("inf", math.inf), ("infinity", math.inf)):
        if lowered.lstrip("+-").startswith(word):
            return -number if lowered.startswith("-") else number
    found = _FLOAT_PREFIX.match(text)
    if found is None:
        raise Refused("invalid_argument")
    number = float(found[0])
    if math.isinf(number) or (number != 0 and abs(number) < 2.2250738585072014e-308):
        raise Refused("out_of_range")
    if number == 0 and re.search(r"[1-9]", found[0].split("e")[0].split("E")[0]):
        raise Refused("out_of_range")  # underflow to zero: ERANGE
    return number


def _power_of_2(number: int) -> bool:
    return number > 0 and number & (number - 1) == 0


def pytorch_takes(key: str, value: str, release: str) -> bool:
    """Whether PyTorch `release` takes `value` for `key` (keys hipmem has rules for)."""
    read_int = _stoi if release == "2.4" else _stoull
    try:
        if key in BOOLEANS:
            return value in ("True", "False")
        if key in ("max_split_size_mb", "max_non_split_rounding_mb"):
            number = read_int(value)
            return number > 20 if release == "2.4" else number >= 20
        if key == "large_segment_size_mb":
            return read_int(value) > 10
        if key == "pinned_reserve_segment_size_mb":
            return read_int(value) > 0
        if key == "garbage_collection_threshold":
            return 0 < _stod(value) < 1
        if key == "per_process_memory_fraction":
            return 0 <= _stod(value) <= 1
        if key == "backend":
            return value in ("native", "cudaMallocAsync")  # a CUDA build
        if key == "pinned_num_register_threads":
            number = read_int(value)
            return _power_of_2(number) and number <= 128
        if key == "roundup_power2_divisions":
            return _divisions_taken(value, read_int)
    except Refused:
        return False
    raise AssertionError(f"no reference for {key}")


def _divisions_taken(value: str, read_int: object) -> bool:
    assert callable(read_int)
    if not value.startswith("["):
        return _power_of_2(read_int(value))
    for item in value[1:-1].split(","):
        interval, _, divisions = item.partition(":")
        count = read_int(divisions)
        if count != 0 and not _power_of_2(count):
            return False
        if interval != ">" and not _power_of_2(_stoull(interval)):
            return False
    return True


_NUMBERS = st.one_of(
    st.integers(0, 2**70).map(str),
    st.integers(0, 300).map(str),
    st.sampled_from(["19", "20", "21", "128", "256", "2147483647", "2147483648", "0"]),
    st.from_regex(r"0{1,5}[0-9]{1,4}", fullmatch=True),
    st.from_regex(r"[0-9]{0,3}\.[0-9]{0,25}", fullmatch=True),
    st.from_regex(r"[0-9]{1,3}[eE][0-9]{1,3}", fullmatch=True),
    st.from_regex(r"[0-9]{1,4}[a-zA-Z.]{1,4}", fullmatch=True),
    st.sampled_from(["nan", "inf", "1e400", "0.99999999999999999", "1.0", "0.5", ".5", "0."]),
    st.sampled_from(["True", "False", "true", "1", "native", "cudaMallocAsync", "jemalloc"]),
    st.just("0." + "0" * 320 + "1"),
    st.text(alphabet="0123456789.>:,[]-+ x", max_size=12),
)
_ITEMS = st.lists(
    st.tuples(st.one_of(st.just(">"), _NUMBERS), _NUMBERS).map(lambda p: f"{p[0]}:{p[1]}"),
    min_size=1,
    max_size=4,
)
_VALUES = st.one_of(_NUMBERS, _ITEMS.map(lambda items: "[" + ",".join(items) + "]"))
_PAIRS = st.tuples(st.sampled_from(sorted(KEYS_WITH_RULES)), _VALUES)


@FUZZ
@given(_PAIRS)
@example(("max_split_size_mb", "20"))  # 2.11 takes it, 2.4 wants more than 20
@example(("garbage_collection_threshold", "0." + "0" * 310 + "1"))  # stod: ERANGE
@example(("backend", "[" + ",".join(["0." + "0" * 320 + "1:1"] * 4) + "]"))  # over the bound
def test_a_value_hipmem_takes_every_pytorch_takes(pair: tuple[str, str]) -> None:
    key, value = pair
    text = f"{key}:{value}"
    problem = alloc_conf_problem(text)
    if problem is None:
        for release in RELEASES:
            assert pytorch_takes(key, value, release), (text, release)
    else:  # named: where (below), the key when the shape held, never PyTorch's words
        assert "\n" not in problem and "must be >=" not in problem
        with pytest.raises(BadAllocConf) as refused:
            validate_alloc_conf(text, "--alloc-conf")
        line = str(refused.value)
        assert line.startswith("--alloc-conf: ")
        if len(text) > MAX_CHARS:  # refused whole, before any key is read
            assert line == f"--alloc-conf: {len(text):,} characters, more than {MAX_CHARS:,}"
        elif not line.startswith("--alloc-conf: expected PyTorch's allocator settings"):
            assert line.startswith(f"--alloc-conf: {key}: ")


_CANONICAL = st.one_of(
    st.integers(0, 2**40).map(str),
    st.from_regex(r"0?\.[0-9]{1,18}", fullmatch=True),
    st.sampled_from(["True", "False", "native", "cudaMallocAsync", "1", "0", "1.0"]),
)


@FUZZ
@given(st.sampled_from(sorted(KEYS_WITH_RULES - {"backend"})), _CANONICAL)
def test_plain_values_are_taken_exactly_where_every_pytorch_takes_them(
    key: str, value: str
) -> None:
    # Plain digits, a plain decimal, True/False: the forms users write (a decimal only where
    # PyTorch reads a fraction). hipmem's answer is PyTorch's, for every release at once (past
    # 2**31 - 1, 2.4's stoi throws).
    assume(
        "." not in value or key in ("garbage_collection_threshold", "per_process_memory_fraction")
    )
    takes = all(pytorch_takes(key, value, release) for release in RELEASES)
    assert (alloc_conf_problem(f"{key}:{value}") is None) == takes, (key, value)


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("max_split_size_mb:1e400", "max_split_size_mb: '1e400' is not a whole number of MiB"),
        ("max_split_size_mb:20", "max_split_size_mb: '20' is below 21 MiB"),
        ("max_split_size_mb:" + "9" * 5000, "5,018 characters, more than 1,000"),
        ("max_split_size_mb:2147483648", "is above 2,147,483,647 MiB"),
        ("garbage_collection_threshold:1", "'1' is not a number between 0 and 1"),
        ("garbage_collection_threshold:0.99999999999999999", "is not a number between 0"),
        ("garbage_collection_threshold:nan", "'nan' is not a number between 0 and 1"),
        ("expandable_segments:true", "'true' is not True or False"),
        ("roundup_power2_divisions:[256:3]", "gives '3' divisions, neither 0 nor a power"),
        ("roundup_power2_divisions:[300:2]", "has the interval '300', not a power of 2"),
        ("roundup_power2_divisions:0", "'0' is not a power of 2"),
        ("backend:jemalloc", "'jemalloc' is not one of native, cudaMallocAsync"),
        ("pinned_num_register_threads:256", "is not a power of 2 from 1 to 128"),
        ("max_split_size_mb:-1", "expected PyTorch's allocator settings"),
    ],
)
def test_each_refusal_is_one_line_naming_where_and_the_key(text: str, line: str) -> None:
    with pytest.raises(BadAllocConf, match=re.escape(line)) as refused:
        validate_alloc_conf(text, "PYTORCH_CUDA_ALLOC_CONF")
    assert str(refused.value).startswith("PYTORCH_CUDA_ALLOC_CONF: ")
    with pytest.raises(BadAllocConf) as as_parameter:  # the API's and the CLI's spelling
        check_alloc_conf(text, parameter="alloc_conf")
    assert as_parameter.value.parameter == "alloc_conf"
    assert len(str(as_parameter.value)) < 400  # a 5,000-digit value is never echoed whole


def test_keys_without_a_rule_keep_the_shape_rule_only() -> None:
    # A key of a later PyTorch: its release says whether it knows it (setting_keys.py).
    assert alloc_conf_problem("some_future_key:whatever") is None
    assert validate_alloc_conf("", "--alloc-conf") == ""  # PyTorch's defaults
