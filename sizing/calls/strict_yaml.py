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

A file that may be large (a workload) is read as a `StrictDocument`: one pass over the parser's
events first, in constant memory, refuses aliases and counts the values (every scalar,
list and mapping) and the items of one top-level list, stopping at their limits; only then is
the data built, so the time and memory a file costs are bounded by the limits, not by its
bytes. The node tree (line numbers for messages) is built only when a message needs a line.

    document = read_strict(text, items_of="calls", max_items=100_000, max_values=500_000)
"""

from __future__ import annotations

import gc
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
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


class TooManyValues(StrictYamlError):
    """The text holds more values, or its top-level list more items, than the limit."""

    def __init__(self, line: int, what: str, limit: int) -> None:
        super().__init__(line, f"more than {limit:,} {what}")
        self.what = what
        self.limit = limit


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


@contextmanager
def _no_collection() -> Iterator[None]:
    """The cyclic garbage collector paused: YAML data holds no cycles, and a collection run
    every few hundred containers made loading 100,000 entries 2.5 times as slow."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


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
        with _no_collection():
            return yaml.load(text, Loader=loader)
    except yaml.YAMLError as err:
        raise _as_error(err) from None
    except RecursionError:
        raise StrictYamlError(1, "YAML nested too deeply") from None


def _as_error(err: yaml.YAMLError) -> StrictYamlError:
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    if "maximum nesting depth" in problem:  # libyaml's bound (1,000), said as ours is
        return StrictYamlError(mark.line + 1 if mark is not None else 1, "YAML nested too deeply")
    return StrictYamlError(mark.line + 1 if mark is not None else 1, f"not valid YAML: {problem}")


@dataclass
class StrictDocument:
    """A YAML document read by the strict rules within limits: its data, and the line of each
    item of its top-level list `items_of` (the line of anything deeper is found on demand)."""

    text: str
    items_of: str
    data: Any
    item_lines: list[int]
    _root: list[yaml.Node | None] = field(default_factory=list)  # composed on first need

    def line_of(self, path: Sequence[Any]) -> int:
        """The 1-based line of the value at `path` (keys and indexes), or of its nearest
        enclosing value found."""
        index = path[1] if len(path) == 2 and path[0] == self.items_of else None
        if isinstance(index, int) and 0 <= index < len(self.item_lines):
            return self.item_lines[index]
        if not self._root:  # no alias is left (read_strict refused them): libyaml composes
            with _no_collection():
                self._root.append(yaml.compose(self.text, Loader=_FastLoader))
        return _line_in(self._root[0], path)


def read_strict(text: str, *, items_of: str, max_items: int, max_values: int) -> StrictDocument:
    """The document within its limits: at most `max_values` values in all and `max_items`
    items in the top-level list `items_of`. Raises StrictYamlError (TooManyValues past a
    limit, naming the line where it was passed) before any data is built."""
    lines = _scan(text, items_of, max_items, max_values)
    try:
        with _no_collection():
            data = yaml.load(text, Loader=_FastLoader)  # _scan refused every alias
    except yaml.YAMLError as err:
        raise _as_error(err) from None
    except RecursionError:
        raise StrictYamlError(1, "YAML nested too deeply") from None
    return StrictDocument(text, items_of, data, lines)


@dataclass
class _Open:
    """A list or mapping the scan is inside of."""

    is_mapping: bool
    children: int = 0  # values finished in it (a mapping's keys and values alternate)
    key: Any = None  # a mapping's last scalar key
    holds_items: bool = False  # the top-level list whose items are counted


def _scan(text: str, items_of: str, max_items: int, max_values: int) -> list[int]:
    """One pass over the parser's events in constant memory: aliases refused, values and
    items counted up to their limits; the line of each item."""
    lines: list[int] = []
    values = 0
    inside: list[_Open] = []
    starts = (yaml.ScalarEvent, yaml.MappingStartEvent, yaml.SequenceStartEvent)
    try:
        for event in yaml.parse(text, Loader=_FastLoader):
            if isinstance(event, yaml.AliasEvent):
                raise StrictYamlError(
                    _line_of(event),
                    f"YAML alias *{event.anchor} refused (aliases are not accepted: write "
                    "the value out)",
                )
            if isinstance(event, starts):
                values += 1
                line = _line_of(event)
                if values > max_values:
                    raise TooManyValues(line, "values", max_values)
                parent = inside[-1] if inside else None
                if parent is not None and parent.holds_items:
                    lines.append(line)
                    if len(lines) > max_items:
                        raise TooManyValues(line, f"items in {items_of}", max_items)
                if isinstance(event, yaml.ScalarEvent):
                    _finish_child(parent, event.value)
                else:
                    is_list = isinstance(event, yaml.SequenceStartEvent)
                    holds = is_list and _is_value_of(parent, items_of) and len(inside) == 1
                    inside.append(_Open(not is_list, holds_items=holds))
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                inside.pop()
                _finish_child(inside[-1] if inside else None, None)
    except yaml.YAMLError as err:
        raise _as_error(err) from None
    return lines


def _is_value_of(mapping: _Open | None, key: str) -> bool:
    """The next value in `mapping` is the one of `key` (its key was just read)."""
    return (
        mapping is not None
        and mapping.is_mapping
        and mapping.children % 2 == 1
        and (mapping.key == key)
    )


def _finish_child(parent: _Open | None, scalar: str | None) -> None:
    if parent is None:
        return
    if parent.is_mapping and parent.children % 2 == 0:
        parent.key = scalar  # None for a key that is a list or mapping
    parent.children += 1


def _line_in(node: yaml.Node | None, path: Sequence[Any]) -> int:
    """The 1-based line of the node at `path` under `node` (the nearest one found)."""
    line = node.start_mark.line + 1 if node is not None else 1
    for part in path:
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if k.value == part), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            node = node.value[part] if part < len(node.value) else None
        else:
            node = None
        if node is None:
            break
        line = node.start_mark.line + 1
    return line


def _line_of(event: yaml.Event) -> int:
    """The 1-based line an event starts on (the parser always marks events; 0 if not)."""
    mark = event.start_mark
    return 0 if mark is None else mark.line + 1
