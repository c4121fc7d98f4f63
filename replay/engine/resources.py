"""Memory-resource specs: the strings users pass to `hipmem replay --resource`.

A spec is `KIND[:key=value,key=value...]`, for example

    pool:initial=1GiB,maximum=8GiB,upstream=cuda
    binning:min_exp=18,max_exp=22
    async:release_threshold=4GiB
    managed:prefetch=1,advise=preferred_location+read_mostly
    cuda:limit=8GiB

Kinds follow RMM/hipMM's names (`pool`, `arena`, `binning`, `fixed`, `async`, `managed`) and
the vendor's plain allocator (`cuda` and `hip` both mean cudaMalloc/hipMalloc on the chosen
backend); `host` is host memory (plain, or pinned with `pinned=1`). Any kind takes
`limit=BYTES`, which caps it with RMM's limiting adaptor. Sizes follow hipmem's one byte
grammar (`hipmem._core.byte_sizes`): `1073741824`, `1GiB`, `1.5GiB`, `512MiB`; `8GB` is refused as
ambiguous, with the IEC spelling to use.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Union

from hipmem._core.alloc_conf import check_alloc_conf, setting_value_problem
from hipmem._core.byte_sizes import MiB, format_bytes_exact, parse_bytes, parse_rounded_bytes
from hipmem._core.close_names import did_you_mean
from hipmem._core.errors import HipmemError, shown_value

from ..errors import ReplayUsageError

OptionValue = Union[int, str, bool, None]  # noqa: UP007 - a runtime alias on Python 3.10

# RMM's pools and limits work in 256-byte units (rmm::CUDA_ALLOCATION_ALIGNMENT).
ALIGNMENT_BYTES = 256


def _parse_bool(value: str, what: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ReplayUsageError(f"{what}: expected 0/1 or true/false, got {shown_value(value)}")


def _parse_int(value: str, what: str) -> int:
    try:
        return int(value.strip(), 0)
    except ValueError:
        raise ReplayUsageError(f"{what}: expected an integer, got {shown_value(value)}") from None


ADVICE = ("preferred_location", "read_mostly", "accessed_by")
UPSTREAMS = ("cuda", "hip", "managed", "async")


def _parse_advice(value: str, what: str) -> str:
    parts = [p for p in value.replace("|", "+").split("+") if p]
    for part in parts:
        if part not in ADVICE:
            hint = did_you_mean(part, ADVICE, quote="'")
            raise ReplayUsageError(
                f"{what}: unknown advice {part!r}{hint} (one of {', '.join(ADVICE)})"
            )
    return "+".join(parts)


def _choice(choices: tuple[str, ...]) -> Callable[[str, str], str]:
    def parse(value: str, what: str) -> str:
        if value not in choices:
            hint = did_you_mean(value, choices)
            raise ReplayUsageError(
                f"not one of {', '.join(choices)}{hint}", parameter=what, value=value
            )
        return value

    return parse


def _size(value: str, what: str) -> int:
    return parse_bytes(value, name=what)


def _torch_setting(key: str) -> Callable[[str, str], OptionValue]:
    """A torch spec option that is PyTorch's own key: its value held to that key's rule
    (hipmem/_core/alloc_conf.py) and kept as written, since it goes into the settings as is."""

    def parse(value: str, what: str) -> str:
        problem = setting_value_problem(key, value.strip())
        if problem is not None:
            raise ReplayUsageError(problem)
        return value.strip()

    return parse


def _parse_settings(value: str, what: str) -> str:
    # "recorded", or PyTorch's own setting string, passed to it as written.
    return value if value == "recorded" else check_alloc_conf(value, parameter=what)


_Parser = Callable[[str, str], OptionValue]

# kind -> option -> (parser, default). `limit` is accepted by every kind.
_OPTIONS: dict[str, dict[str, tuple[_Parser, OptionValue]]] = {
    "cuda": {},
    "hip": {},
    "host": {"pinned": (_parse_bool, False)},
    # No allocator: a fresh address per allocate, nothing freed, nothing reserved. What a
    # replay costs with it is the replay machinery's own cost per event.
    "null": {},
    "managed": {"prefetch": (_parse_bool, False), "advise": (_parse_advice, "")},
    "async": {
        "initial": (_size, None),
        "release_threshold": (_size, None),
        "pool": (_choice(("new", "default")), "new"),
    },
    "pool": {
        "initial": (_size, 0),
        "maximum": (_size, None),
        "upstream": (_choice(UPSTREAMS), "cuda"),
    },
    "arena": {"size": (_size, None), "upstream": (_choice(UPSTREAMS), "cuda")},
    "binning": {
        "min_exp": (_parse_int, 18),
        "max_exp": (_parse_int, 22),
        # bins and large allocations come from a pool over the device, as in RMM's benchmark
        "upstream": (_choice(("pool", *UPSTREAMS)), "pool"),
        "initial": (_size, 0),
        "maximum": (_size, None),
    },
    "fixed": {
        "block": (_size, 1 << 20),
        "prealloc": (_parse_int, 128),
        "upstream": (_choice(UPSTREAMS), "cuda"),
    },
    # PyTorch's caching allocator (replay.torch_resource): its PYTORCH_CUDA_ALLOC_CONF keys,
    # unset unless given; `settings=recorded` takes them from the snapshot being replayed, and
    # `settings=STRING` is a whole PyTorch setting string (the last option: it takes the rest
    # of the spec, commas included).
    "torch": {
        "expandable_segments": (_parse_bool, None),
        "max_split_size": (_size, None),
        "garbage_collection_threshold": (_torch_setting("garbage_collection_threshold"), None),
        "roundup_power2_divisions": (_torch_setting("roundup_power2_divisions"), None),
        "backend": (_choice(("native", "cudaMallocAsync")), None),
        "settings": (_parse_settings, None),
    },
}
KINDS = tuple(_OPTIONS)
# Kinds that pool memory: the ones --find-capacity sizes by their pool size or a limit.
# RMM's own memory resources: no plain vendor call does what they do.
RMM_KINDS = ("pool", "arena", "binning", "fixed")
# Resources whose reuse of freed memory follows stream order (and so can vary between runs
# of a multi-stream log).
STREAM_ORDERED_KINDS = (*RMM_KINDS, "async")


@dataclass(frozen=True)
class ResourceSpec:
    """One parsed `--resource` value. `options` holds every option of the kind, defaults filled."""

    kind: str
    options: Mapping[str, OptionValue] = field(default_factory=dict)
    limit_bytes: int | None = None
    text: str = ""

    @property
    def label(self) -> str:
        """What tables and JSON call this resource: the spec as the user typed it."""
        return self.text or self.kind

    def option_bytes(self, name: str) -> int | None:
        """A size option, or None when unset."""
        value = self.options.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def with_limit(self, limit_bytes: int) -> ResourceSpec:
        """The same resource capped at `limit_bytes` (used by --find-capacity)."""
        return replace(
            self, limit_bytes=limit_bytes, text=_with_option(self.label, "limit", limit_bytes)
        )

    def with_option(self, name: str, value: int) -> ResourceSpec:
        """The same resource with one option changed (e.g. a pool's `maximum`)."""
        options = dict(self.options)
        options[name] = value
        return replace(self, options=options, text=_with_option(self.label, name, value))


def _with_option(text: str, name: str, value: int) -> str:
    kind, _, rest = text.partition(":")
    pairs = [p for p in rest.split(",") if p and not p.startswith(f"{name}=")]
    pairs.append(f"{name}={format_bytes_exact(value)}")
    return f"{kind}:{','.join(pairs)}"


def parse_spec(text: str) -> ResourceSpec:
    """Parse `KIND[:key=value,...]`; raise ReplayUsageError naming the spec and its bad part."""
    raw = text.strip()
    try:
        return _parse_spec(raw)
    except HipmemError as err:
        raise ReplayUsageError(str(err), parameter="spec", value=raw) from None


def _parse_spec(raw: str) -> ResourceSpec:
    kind, _, rest = raw.partition(":")
    kind = kind.strip().lower()
    if kind not in _OPTIONS:
        hint = did_you_mean(kind, KINDS, cutoff=0.5)
        raise ReplayUsageError(f"unknown resource kind {kind!r}{hint} (one of {', '.join(KINDS)})")
    schema = _OPTIONS[kind]
    options: dict[str, OptionValue] = {name: default for name, (_, default) in schema.items()}
    limit_bytes: int | None = None
    seen: set[str] = set()
    rest, settings = _split_settings(kind, rest)
    if settings is not None:
        options["settings"] = _parse_settings(settings, "settings")
        seen.add("settings")
    for pair in (p.strip() for p in rest.split(",") if p.strip()):
        name, sep, value = pair.partition("=")
        name = name.strip().lower()
        if not sep or not value.strip():
            raise ReplayUsageError(f"expected key=value, got {pair!r}")
        if name in seen:  # as everywhere in hipmem: a repeated key is refused, not overridden
            raise ReplayUsageError(f"{name} given twice")
        seen.add(name)
        if name == "limit":
            # A cap, as --cap: the decimal IEC sizes hipmem prints too, rounded down (the CLI
            # says so: hipmem_cli/options.py's said_limits).
            limit_bytes = parse_rounded_bytes(value, name="limit")[0]
            continue
        if name not in schema:
            allowed = [*schema, "limit"]
            hint = did_you_mean(name, allowed, quote="'")
            raise ReplayUsageError(
                f"{kind} has no option {name!r}{hint} (options: {', '.join(allowed)})"
            )
        parser, _ = schema[name]
        options[name] = parser(value.strip(), name)
    spec = ResourceSpec(kind=kind, options=options, limit_bytes=limit_bytes, text=raw)
    _validate(spec)
    return spec


def _split_settings(kind: str, rest: str) -> tuple[str, str | None]:
    """A torch spec's `settings=VALUE` is the rest of the spec, commas and all (PyTorch's
    strings have commas of their own): (the options before it, VALUE or None)."""
    if kind != "torch":
        return rest, None
    found = re.search(r"(?:^|,)\s*settings\s*=", rest)
    if found is None:
        return rest, None
    value = rest[found.end() :].strip()
    if value.split(",")[0].strip() == "recorded":  # an ordinary option, others may follow
        return rest, None
    if not value:
        raise ReplayUsageError("settings= needs a value: recorded, or PyTorch's setting string")
    return rest[: found.start()], value


def _validate(spec: ResourceSpec) -> None:
    if spec.kind == "null" and spec.limit_bytes is not None:
        raise ReplayUsageError("null reserves nothing, so it takes no limit")
    if spec.kind == "binning":
        low, high = spec.options["min_exp"], spec.options["max_exp"]
        assert isinstance(low, int) and isinstance(high, int)
        if not 0 < low <= high < 63:
            raise ReplayUsageError(f"need 0 < min_exp <= max_exp < 63, got {low}..{high}")
    if spec.kind in ("pool", "binning"):
        for name in ("initial", "maximum"):
            value = spec.option_bytes(name)
            if value is not None and value % ALIGNMENT_BYTES:
                raise ReplayUsageError(
                    f"{name}={value} must be a multiple of {ALIGNMENT_BYTES} bytes"
                )
        maximum = spec.option_bytes("maximum")
        initial = spec.option_bytes("initial") or 0
        if maximum is not None and maximum < initial:
            raise ReplayUsageError(f"maximum ({maximum}) is below initial ({initial})")
    if spec.kind == "torch":
        _validate_torch(spec)
    if spec.kind == "fixed":
        block = spec.option_bytes("block")
        prealloc = spec.options["prealloc"]
        if not block or not isinstance(prealloc, int) or prealloc < 1:
            raise ReplayUsageError("block and prealloc must be positive")


def _validate_torch(spec: ResourceSpec) -> None:
    """A torch spec's settings, held to PyTorch's rules before any work."""
    split = spec.option_bytes("max_split_size")
    if split is not None:
        if split % MiB:
            raise ReplayUsageError(
                f"max_split_size={split:,} bytes: PyTorch takes whole MiB (max_split_size_mb)"
            )
        problem = setting_value_problem("max_split_size_mb", str(split // MiB))
        if problem is not None:
            raise ReplayUsageError(f"max_split_size={format_bytes_exact(split)}: {problem}")
    if spec.options["settings"] is not None:
        given = [name for name, value in spec.options.items() if name != "settings" and value]
        if given and spec.options["settings"] == "recorded":
            raise ReplayUsageError(f"settings=recorded takes every setting from the snapshot; "
                                   f"drop {', '.join(given)}")  # fmt: skip
        if given:
            raise ReplayUsageError(f"settings= is the whole setting string; put "
                                   f"{', '.join(given)} in it or drop it")  # fmt: skip
