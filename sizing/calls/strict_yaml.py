"""YAML loading for untrusted files: no aliases, no duplicate keys.

PyYAML's safe loaders never run code, but they do honour aliases: `&a [*b, *b, ...]` nested
ten deep (a "billion laughs") is a few hundred bytes that becomes 10**9 values the moment
anything walks it (a schema error message, `str()`). Aliases are refused while composing,
before any node is built from them, so no amount of nesting costs anything. Nothing hipmem
reads (workload files, rocBLAS profile logs) has a reason to use them.

Duplicate keys are refused too: PyYAML keeps the last one silently, which turns a typo into
a different workload. And numbers are read by YAML 1.2's core rules, not PyYAML's YAML 1.1
ones: `4_000`, `0x10`, `0o10` and `1:30` (sexagesimal 90) stay text, so that a dimension
written that way is refused like the same text on the command line.

    data = load_strict(text)          # raises StrictYamlError with a 1-based line
"""

from __future__ import annotations

import re
from typing import Any

import yaml

_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_MAX_INT_DIGITS = 40
_CORE_INT = re.compile(r"^[-+]?[0-9]+$")
_CORE_FLOAT = re.compile(
    r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)


def _core_number_resolvers(base: Any) -> dict[str, list[tuple[str, re.Pattern[str]]]]:
    """The loader's implicit resolvers with YAML 1.2 core int and float rules."""
    resolvers = {
        first: [(tag, rx) for tag, rx in found if tag not in (_INT, _FLOAT)]
        for first, found in base.yaml_implicit_resolvers.items()
    }
    for first in "-+0123456789.":
        resolvers.setdefault(first, []).extend([(_INT, _CORE_INT), (_FLOAT, _CORE_FLOAT)])
    return resolvers


class StrictYamlError(ValueError):
    """The text uses an alias or repeats a key, or is not YAML; `line` is 1-based."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line


class _NoDuplicateKeys:
    """Mixed into a loader: a mapping that repeats a key is refused."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)  # type: ignore[attr-defined]
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: the base class says so
                break
            if duplicate:
                raise StrictYamlError(
                    key_node.start_mark.line + 1, f"key {key!r} given twice (keep one)"
                )
        return super().construct_mapping(node, deep=deep)  # type: ignore[misc]


class _StrictLoader(_NoDuplicateKeys, yaml.SafeLoader):
    yaml_implicit_resolvers = _core_number_resolvers(yaml.SafeLoader)

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise StrictYamlError(
                event.start_mark.line + 1,
                f"YAML alias *{event.anchor} refused (aliases are not accepted: write the "
                "value out)",
            )
        return super().compose_node(parent, index)


class _FastLoader(_NoDuplicateKeys, getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """libyaml's parser for text known to hold no alias ("*"): it cannot refuse them."""

    yaml_implicit_resolvers = _core_number_resolvers(yaml.SafeLoader)


def _construct_decimal(loader: Any, node: Any) -> int | str:
    """YAML 1.2 core ints are decimal: '096' is 96 (PyYAML's own reader takes it as octal).
    More than 40 digits stay text (no count or size is that long, and int() of thousands of
    digits is refused by Python itself): the reader then refuses the text."""
    text = loader.construct_scalar(node)
    return int(text, 10) if len(text) <= _MAX_INT_DIGITS else str(text)


for _loader in (_StrictLoader, _FastLoader):
    _loader.add_constructor(_INT, _construct_decimal)


def compose_strict(text: str) -> yaml.Node | None:
    """The node tree (for line numbers), aliases refused."""
    try:
        return yaml.compose(text, Loader=_StrictLoader)
    except yaml.YAMLError as err:
        raise _as_error(err) from None
    except RecursionError:
        raise StrictYamlError(1, "YAML nested too deeply") from None


def load_strict(text: str) -> Any:
    """The data, aliases and duplicate keys refused; other YAML errors as StrictYamlError.

    Text without a "*" (no alias is possible) is parsed by libyaml, when installed."""
    loader = _StrictLoader if "*" in text else _FastLoader
    try:
        return yaml.load(text, Loader=loader)
    except yaml.YAMLError as err:
        raise _as_error(err) from None
    except RecursionError:
        raise StrictYamlError(1, "YAML nested too deeply") from None


def _as_error(err: yaml.YAMLError) -> StrictYamlError:
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    return StrictYamlError(mark.line + 1 if mark is not None else 1, f"not valid YAML: {problem}")
