"""Resource specs: parsing, defaults, sizes and one-line usage errors."""

from __future__ import annotations

import pytest

from hipmem._core.byte_sizes import parse_bytes
from hipmem._core.errors import UsageError
from hipmem.replay.engine.resources import ResourceSpec, parse_spec
from hipmem.replay.errors import ReplayUsageError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (4096, 4096),
        ("4096", 4096),
        ("1KiB", 1024),
        ("1.5GiB", 3 << 29),
        ("512 MiB", 512 << 20),
        ("3TiB", 3 << 40),
    ],
)
def test_sizes_accept_int_or_str_like_rmm(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("bad", ["12 apples", "GiB", "-5", "", "1..5GiB", "0x1000", "2GB", "1k"])
def test_bad_sizes_are_usage_errors(bad):
    with pytest.raises(UsageError, match="not a size"):
        parse_bytes(bad, name="limit")


def test_a_spec_reads_sizes_with_the_same_grammar_as_recommend():
    # One grammar everywhere: `8GB` was 8*10**9 in a spec and refused by recommend.
    with pytest.raises(
        UsageError, match=r"maximum='8GB': not a size \('gb' is ambiguous: write 8GiB"
    ):
        parse_spec("pool:maximum=8GB")
    assert parse_spec("pool:maximum=1.5GiB").options["maximum"] == 3 << 29


def test_pool_spec_with_every_option():
    spec = parse_spec("pool:initial=1GiB,maximum=8GiB,upstream=managed,limit=6GiB")
    assert spec == ResourceSpec(
        kind="pool",
        options={"initial": 1 << 30, "maximum": 8 << 30, "upstream": "managed"},
        limit_bytes=6 << 30,
        text="pool:initial=1GiB,maximum=8GiB,upstream=managed,limit=6GiB",
    )


def test_defaults_are_filled_in():
    assert parse_spec("binning").options == {
        "min_exp": 18,
        "max_exp": 22,
        "upstream": "pool",
        "initial": 0,
        "maximum": None,
    }
    assert parse_spec("fixed").options == {"block": 1 << 20, "prealloc": 128, "upstream": "cuda"}
    assert parse_spec("async").options == {
        "initial": None,
        "release_threshold": None,
        "pool": "new",
    }
    assert parse_spec("cuda").limit_bytes is None


def test_managed_advice_combines():
    spec = parse_spec("managed:prefetch=1,advise=preferred_location+accessed_by")
    assert spec.options == {"prefetch": True, "advise": "preferred_location+accessed_by"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("bogus", "unknown resource kind 'bogus'"),
        ("pool:nope=1", "pool has no option 'nope' (options: initial, maximum, upstream, limit)"),
        ("pool:initial", "expected key=value, got 'initial'"),
        ("pool:initial=1000", "initial=1000 must be a multiple of 256 bytes"),
        ("pool:initial=2GiB,maximum=1GiB", "maximum (1073741824) is below initial (2147483648)"),
        ("binning:min_exp=23,max_exp=22", "need 0 < min_exp <= max_exp < 63, got 23..22"),
        ("managed:advise=sideways", "unknown advice 'sideways'"),
        ("arena:upstream=tape", "upstream='tape': not one of cuda, hip, managed, async"),
        ("host:pinned=maybe", "expected 0/1 or true/false, got 'maybe'"),
    ],
)
def test_bad_specs_name_the_spec_and_the_part(text, message):
    with pytest.raises(ReplayUsageError) as caught:
        parse_spec(text)
    assert str(caught.value).startswith(f"spec={text!r}: ")
    assert caught.value.for_flag("--resource").startswith(f"--resource {text!r}: ")
    assert message in str(caught.value)
    assert caught.value.exit_code == 2


def test_with_limit_and_with_option_rewrite_the_label():
    spec = parse_spec("pool:initial=1GiB,maximum=8GiB")
    # sizes in the largest IEC unit that holds them exactly: short, and read back the same
    assert spec.with_option("maximum", 1 << 31).label == "pool:initial=1GiB,maximum=2GiB"
    assert spec.with_limit(4096).label == "pool:initial=1GiB,maximum=8GiB,limit=4KiB"
    assert parse_spec("cuda").with_limit(512).label == "cuda:limit=512"
    assert parse_spec("cuda").with_limit(1536 << 20).label == "cuda:limit=1536MiB"
    assert parse_spec("cuda:limit=1536MiB").limit_bytes == 1536 << 20
