"""A restricted, streaming pickle reader for PyTorch memory snapshots.

`pickle.load` builds the whole object tree (about 1 KB of Python objects per trace entry: ten
million entries do not fit in a CI runner) and, whatever `find_class` refuses, its opcodes
can still ask for any amount of memory. This reader runs the pickle machine itself, admitting
only the opcodes `pickle` writes for the types a snapshot holds (dict, list, tuple, str,
bytes, int, float, bool, None, and the memo), and hands every dict with an `action` key to a
trace sink the moment it is appended to a list (or, in a batch of appends, as soon as the next
item begins): the entry becomes column values there and is dropped, with its memo slot and its
`frames` list, so a snapshot holds one entry in memory at a time, not all (nor a batch of
1,000).

Bounded by construction:

- bytes: the decompressed stream is capped (the caller's `max_bytes`); a string or integer
  header longer than what is left is refused before anything is allocated;
- objects: every object kept (a container item, a memo slot, one skipped by a memo index
  past the end, a value on the stack) counts against `max_cells`; an entry handed to the
  sink gives its cells back, its memo slot's too (it holds the DROPPED marker then: the
  trace-entry caps bound those). Sharing costs one cell per reference, so 15 million memo
  references to one list cost 15 million cells; walks over shared parts count each visit
  (see `reader.py`);
- nesting: nothing here recurses; tuples hold only scalars (PyTorch's are `(0, 0)` pool ids)
  and dict keys are scalars, so hashing and comparing never recurse either;
- messages: an input value is described by its type and size, or by a short escaped excerpt.
"""

from __future__ import annotations

import reprlib
import struct
from collections.abc import Callable
from typing import Any, Protocol

from ..errors import LogFormatError

MAX_BYTES_ENV = "HIPMEM_SNAPSHOT_MAX_BYTES"
_CHUNK_BYTES = 1 << 13  # the first read; each next one twice the last, up to:
_MAX_CHUNK_BYTES = 1 << 16  # small snapshots cost small buffers; more costs more, no faster
_LOOKAHEAD = 9  # the longest fixed-size opcode with its argument (FRAME, BINUNICODE8)
_MAX_MARKS = 10_000  # open MARKs; PyTorch's pickles nest a handful
_I32 = struct.Struct("<i").unpack_from
_U32 = struct.Struct("<I").unpack_from
_U16 = struct.Struct("<H").unpack_from
_U64 = struct.Struct("<Q").unpack_from
_F64 = struct.Struct(">d").unpack_from
_LONG_DECODED_BYTES = 64  # longer LONG4 values become a `BigInt` marker, never decoded


class SnapshotError(LogFormatError):
    """A snapshot cannot be read; the message names the file and what is wrong."""


class SnapshotRefused(SnapshotError):
    """The pickle asks for a global or a call (code), which a snapshot never needs."""


class BigInt:
    """An integer of more than 512 bits: a snapshot never holds one, so it is not decoded."""

    __slots__ = ("byte_count",)

    def __init__(self, byte_count: int) -> None:
        self.byte_count = byte_count


class _Dropped:
    """What a memo slot holds once its trace entry (or that entry's frames) was read."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "a trace entry read before (shared)"


DROPPED = _Dropped()
_MEMO_GAP = 1 << 16  # how far past the memo's end a BINPUT may write (pickle writes in order)


class TraceSink(Protocol):
    """Receives the items appended to one list once an entry (a dict with `action`) was."""

    def entry(self, item: dict[Any, Any]) -> None: ...

    def other(self, item: Any) -> None: ...


SinkFactory = Callable[[list[Any]], TraceSink]

_SCALAR_TYPES = frozenset({str, int, float, bool, type(None), bytes, BigInt})
_KEY_TYPES = _SCALAR_TYPES | {tuple, frozenset}  # of scalars only: hashing never recurses
_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlong = 2, 40, 40, 40

# Opcodes a snapshot never holds, by what they would do: named in the refusal.
_CODE_OPCODES = {
    0x52: "REDUCE",
    0x62: "BUILD",
    0x69: "INST",
    0x6F: "OBJ",
    0x81: "NEWOBJ",
    0x92: "NEWOBJ_EX",
    0x50: "PERSID",
    0x51: "BINPERSID",
    0x82: "EXT1",
    0x83: "EXT2",
    0x84: "EXT4",
}


def excerpt(value: Any) -> str:
    """A short, escaped excerpt of an input value for a message: bounded in length and depth
    (never the repr of a 100,000-item list or of a list nested 100,000 deep)."""
    if type(value) is BigInt:
        return f"an integer of {value.byte_count:,} bytes"
    return _REPR.repr(value).encode("ascii", "backslashreplace").decode("ascii")


class _Truncated(Exception):
    pass


class RestrictedPickle:
    """One pickle read from `read` (a file's `read`): `load()` returns the top-level object,
    with every trace entry handed to the sink that `new_sink` makes for its list."""

    def __init__(
        self,
        read: Callable[[int], bytes],
        name: str,
        *,
        max_bytes: int,
        max_cells: int,
        new_sink: SinkFactory,
        keep_frames: bool = False,
    ) -> None:
        self._read, self._name = read, name
        self._max_bytes, self._max_cells = max_bytes, max_cells
        self._new_sink = new_sink
        self._keep_frames = keep_frames  # entry_frames: a wanted entry's frames may be shared
        self.sinks: dict[int, TraceSink] = {}  # id(list) -> its sink (the sink keeps the list)

    def load(self) -> Any:
        try:
            return self._run()
        except _Truncated:
            raise SnapshotError(f"{self._name}: the pickle ends early (truncated?)") from None

    def _error(self, offset: int, what: str) -> SnapshotError:
        return SnapshotError(
            f"{self._name}: not a readable snapshot pickle: {what} at byte {offset:,}"
        )

    def _run(self) -> Any:
        read, chunk = self._read, _CHUNK_BYTES
        buf, pos, base, eof = b"", 0, 0, False
        stack: list[Any] = []
        marks: list[int] = []
        memo: list[Any] = []
        memo_ids: dict[int, int] = {}  # id(container) -> its memo index, to drop consumed ones
        keep_frames = self._keep_frames
        cells, max_cells = 0, self._max_cells
        sinks, new_sink = self.sinks, self._new_sink

        def more(buf: bytes, pos: int, need: int) -> tuple[bytes, int]:
            """buf from pos on, with at least `need` bytes unless the stream ends first."""
            nonlocal base, eof, chunk
            rest = buf[pos:]
            base += pos
            if need > self._max_bytes - base:
                raise self._cap_error(need, base)
            parts = [rest]
            have = len(rest)
            while not eof and have < need:
                data = read(max(chunk, need - have))
                chunk = min(chunk * 2, _MAX_CHUNK_BYTES)
                if not data:
                    eof = True
                    break
                parts.append(data)
                have += len(data)
            return b"".join(parts), 0

        def put_items(target: Any, items: list[Any], offset: int) -> None:
            nonlocal cells
            if type(target) is not list:
                raise self._error(offset, f"APPENDS to {excerpt(target)}, not a list")
            sink = sinks.get(id(target))
            for item in items:
                if type(item) is dict and "action" in item:
                    if sink is None:
                        sink = sinks[id(target)] = new_sink(target)
                    sink.entry(item)
                    # The entry is read: drop it (consume() inlined, this is the hot path).
                    cells -= len(item) + 1
                    index = memo_ids.pop(id(item), None)
                    if index is not None:
                        memo[index] = DROPPED
                        cells -= 1  # its memo slot holds nothing now
                    frames = item.get("frames")
                    if type(frames) is list and not keep_frames:
                        # PyTorch shares one frames list between an alloc and its frees:
                        # later references get DROPPED, which no column needs.
                        index = memo_ids.pop(id(frames), None)
                        if index is not None:
                            memo[index] = DROPPED
                            cells -= len(frames) + 2  # its items, itself, its memo slot
                    item.clear()
                    item[DROPPED] = None  # a second reference to it is not an entry again
                elif sink is not None:
                    sink.other(item)
                else:
                    target.append(item)
                    cells += 1

        end = safe = -1  # past `safe`, fewer than _LOOKAHEAD bytes are left in buf
        while True:
            if pos > safe:
                if not eof:
                    buf, pos = more(buf, pos, _LOOKAHEAD)
                end = len(buf)
                safe = end - (1 if eof else _LOOKAHEAD)
                if pos >= end:
                    raise _Truncated
            op = buf[pos]
            pos += 1
            try:
                if op == 0x68:  # BINGET
                    stack.append(memo[buf[pos]])
                    pos += 1
                elif op == 0x94:  # MEMOIZE
                    top = stack[-1]
                    if type(top) is dict or type(top) is list:
                        memo_ids[id(top)] = len(memo)
                    memo.append(top)
                    cells += 1
                elif op == 0x8A:  # LONG1
                    size = buf[pos]
                    if pos + 1 + size > end:
                        buf, pos = more(buf, pos, 1 + size)
                        end = len(buf)
                        safe = end - (1 if eof else _LOOKAHEAD)
                        if pos + 1 + size > end:
                            raise _Truncated
                    stack.append(
                        int.from_bytes(buf[pos + 1 : pos + 1 + size], "little", signed=True)
                    )
                    pos += 1 + size
                elif op == 0x6A:  # LONG_BINGET
                    stack.append(memo[_U32(buf, pos)[0]])
                    pos += 4
                elif op == 0x28:  # MARK
                    if len(marks) >= _MAX_MARKS:
                        raise self._error(base + pos - 1, f"more than {_MAX_MARKS:,} open MARKs")
                    marks.append(len(stack))
                elif op == 0x4B:  # BININT1
                    stack.append(buf[pos])
                    pos += 1
                elif op == 0x8C or op == 0x58 or op == 0x8D:  # SHORT_BINUNICODE, BINUNICODE, 8
                    if op == 0x8C:
                        head, size = 1, buf[pos]
                    elif op == 0x58:
                        head, size = 4, _U32(buf, pos)[0]
                    else:
                        head, size = 8, _U64(buf, pos)[0]
                    if pos + head + size > end:
                        buf, pos = more(buf, pos, head + size)
                        end = len(buf)
                        safe = end - (1 if eof else _LOOKAHEAD)
                        if pos + head + size > end:
                            raise _Truncated
                    start = pos + head
                    stack.append(str(buf[start : start + size], "utf-8", "surrogatepass"))
                    pos = start + size
                elif op == 0x7D:  # EMPTY_DICT
                    # A dict begins after a trace entry in a list's batch: the entry is done,
                    # so the batch so far is appended now, not at the batch's APPENDS (pickle
                    # batches 1,000 items: this holds one entry at a time, not 1,000).
                    first = marks[-1] if marks else 0
                    if 0 < first < len(stack) and type(stack[first - 1]) is list:
                        top = stack[-1]
                        if type(top) is dict and "action" in top:
                            items = stack[first:]
                            del stack[first:]
                            put_items(stack[-1], items, base + pos - 1)
                    stack.append({})
                    cells += 1
                elif op == 0x75 or op == 0x73:  # SETITEMS, SETITEM
                    first = marks.pop() if op == 0x75 else len(stack) - 2
                    items = stack[first:]
                    del stack[first:]
                    target = stack[-1]
                    if type(target) is not dict:
                        raise self._error(
                            base + pos - 1, f"SETITEMS on {excerpt(target)}, not a dict"
                        )
                    if len(items) % 2:
                        raise self._error(base + pos - 1, "a key without a value")
                    try:
                        # Unhashable keys (lists, dicts) raise; tuples hold only scalars, so
                        # hashing never recurses.
                        target.update(zip(items[0::2], items[1::2], strict=True))
                    except TypeError:
                        bad = (k for k in items[0::2] if type(k) not in _KEY_TYPES)
                        key = next(bad, items[0])
                        raise self._error(
                            base + pos - 1,
                            f"a dict key of unhashable type: '{type(key).__name__}' "
                            f"({excerpt(key)})",
                        ) from None
                    cells += len(items) >> 1
                elif op == 0x4A:  # BININT
                    stack.append(_I32(buf, pos)[0])
                    pos += 4
                elif op == 0x5D:  # EMPTY_LIST
                    stack.append([])
                    cells += 1
                elif op == 0x65:  # APPENDS
                    first = marks.pop()
                    items = stack[first:]
                    del stack[first:]
                    put_items(stack[-1], items, base + pos - 1)
                elif op == 0x61:  # APPEND
                    item = stack.pop()
                    put_items(stack[-1], [item], base + pos - 1)
                elif op == 0x4D:  # BININT2
                    stack.append(_U16(buf, pos)[0])
                    pos += 2
                elif op == 0x88:  # NEWTRUE
                    stack.append(True)
                elif op == 0x89:  # NEWFALSE
                    stack.append(False)
                elif op == 0x4E:  # NONE
                    stack.append(None)
                elif op == 0x47:  # BINFLOAT
                    stack.append(_F64(buf, pos)[0])
                    pos += 8
                elif op in (0x85, 0x86, 0x87, 0x74, 0x29):  # TUPLE1, 2, 3, TUPLE, EMPTY_TUPLE
                    if op == 0x74:
                        first = marks.pop()
                    else:
                        first = len(stack) - {0x85: 1, 0x86: 2, 0x87: 3, 0x29: 0}[op]
                    if first < 0:
                        raise IndexError
                    items = stack[first:]
                    del stack[first:]
                    for item in items:
                        if type(item) not in _SCALAR_TYPES:
                            raise self._error(base + pos - 1, f"a tuple holding {excerpt(item)}")
                    stack.append(tuple(items))
                    cells += len(items) + 1
                elif op == 0x71 or op == 0x72:  # BINPUT, LONG_BINPUT
                    if op == 0x71:
                        index = buf[pos]
                        pos += 1
                    else:
                        index = _U32(buf, pos)[0]
                        pos += 4
                    top = stack[-1]
                    if index >= len(memo):
                        if index > len(memo) + _MEMO_GAP:
                            raise self._error(
                                base + pos - 1, f"a memo index {index:,} far past its end"
                            )
                        cells += index - len(memo)  # the empty slots skipped are held too
                        memo.extend([None] * (index + 1 - len(memo)))
                    if memo_ids.get(id(memo[index])) == index:
                        # The container put here before no longer sits here: forget it, so
                        # that no id of a dead object is left to match a new one.
                        del memo_ids[id(memo[index])]
                    memo[index] = top
                    if type(top) is dict or type(top) is list:
                        memo_ids[id(top)] = index
                    cells += 1
                elif op == 0x8B:  # LONG4
                    size = _I32(buf, pos)[0]
                    if size < 0:
                        raise self._error(base + pos - 1, "a negative LONG4 length")
                    if pos + 4 + size > end:
                        buf, pos = more(buf, pos, 4 + size)
                        end = len(buf)
                        safe = end - (1 if eof else _LOOKAHEAD)
                        if pos + 4 + size > end:
                            raise _Truncated
                    raw = buf[pos + 4 : pos + 4 + size]
                    if size > _LONG_DECODED_BYTES:
                        stack.append(BigInt(size))
                    else:
                        stack.append(int.from_bytes(raw, "little", signed=True))
                    pos += 4 + size
                elif op in (0x43, 0x42, 0x8E):  # SHORT_BINBYTES, BINBYTES, BINBYTES8
                    if op == 0x43:
                        head, size = 1, buf[pos]
                    elif op == 0x42:
                        head, size = 4, _U32(buf, pos)[0]
                    else:
                        head, size = 8, _U64(buf, pos)[0]
                    if pos + head + size > end:
                        buf, pos = more(buf, pos, head + size)
                        end = len(buf)
                        safe = end - (1 if eof else _LOOKAHEAD)
                        if pos + head + size > end:
                            raise _Truncated
                    stack.append(buf[pos + head : pos + head + size])
                    pos += head + size
                elif op == 0x8F:  # EMPTY_SET
                    stack.append(set())
                    cells += 1
                elif op == 0x90 or op == 0x91:  # ADDITEMS, FROZENSET
                    first = marks.pop()
                    items = stack[first:]
                    del stack[first:]
                    for item in items:
                        if type(item) not in _SCALAR_TYPES:
                            raise self._error(base + pos - 1, f"a set holding {excerpt(item)}")
                    if op == 0x91:
                        stack.append(frozenset(items))
                    elif type(stack[-1]) is set:
                        stack[-1].update(items)
                    else:
                        raise self._error(base + pos - 1, f"ADDITEMS to {excerpt(stack[-1])}")
                    cells += len(items)
                elif op == 0x95:  # FRAME: a hint of the next frame's size, nothing to do
                    pos += 8
                elif op == 0x80:  # PROTO
                    if buf[pos] < 2:
                        raise self._error(base + pos - 1, f"pickle protocol {buf[pos]}")
                    pos += 1
                elif op == 0x30:  # POP
                    if marks and marks[-1] == len(stack):
                        marks.pop()
                    else:
                        stack.pop()
                elif op == 0x31:  # POP_MARK
                    del stack[marks.pop() :]
                elif op == 0x2E:  # STOP
                    return stack.pop()
                elif op == 0x63:  # GLOBAL: module and name on two lines
                    line_end = buf.find(b"\n", pos, pos + 512)
                    second = buf.find(b"\n", line_end + 1, line_end + 513) if line_end >= 0 else -1
                    if second < 0:
                        raise self._refused(base + pos - 1, "a global", "")
                    module = buf[pos:line_end].decode("utf-8", "replace")
                    name = buf[line_end + 1 : second].decode("utf-8", "replace")
                    raise self._refused(base + pos - 1, "the global", f"{module}.{name}")
                elif op == 0x93:  # STACK_GLOBAL
                    name, module = stack.pop(), stack.pop()
                    if type(module) is str and type(name) is str:
                        raise self._refused(base + pos - 1, "the global", f"{module}.{name}")
                    raise self._refused(base + pos - 1, "a global", "")
                elif op in _CODE_OPCODES:
                    raise self._refused(base + pos - 1, f"the opcode {_CODE_OPCODES[op]}", "")
                else:
                    raise self._error(
                        base + pos - 1,
                        f"the opcode {bytes([op])!r}, which pickle does not write for the "
                        "plain data of a snapshot",
                    )
            except IndexError:
                if pos >= end:
                    raise _Truncated from None
                if op == 0x68 or op == 0x6A:
                    raise self._error(
                        base + pos - 1, "a memo reference past the memo's end"
                    ) from None
                raise self._error(
                    base + pos - 1, "an opcode with too few values on the stack"
                ) from None
            except struct.error:
                raise _Truncated from None
            except UnicodeDecodeError:
                raise self._error(base + pos, "a string that is not UTF-8") from None
            if cells + len(stack) > max_cells:  # what the stack holds is held too
                raise self._cells_error(base + pos)

    def _cap_error(self, need: int, offset: int) -> SnapshotError:
        return SnapshotError(
            f"{self._name}: not a readable snapshot within its cap: more than "
            f"{self._max_bytes:,} bytes once decompressed (a length of {need:,} bytes at byte "
            f"{offset:,}; raise {MAX_BYTES_ENV} if this snapshot is genuine)"
        )

    def _cells_error(self, offset: int) -> SnapshotError:
        return SnapshotError(
            f"{self._name}: more than {self._max_cells:,} objects held at once at byte "
            f"{offset:,}; a memory snapshot's segments and frames need far fewer"
        )

    def _refused(self, offset: int, what: str, name: str) -> SnapshotRefused:
        shown = f" {ascii(name[:200])[1:-1]}" if name else ""
        return SnapshotRefused(
            f"{self._name}: refusing to load {what}{shown} (byte {offset:,}): a memory snapshot "
            "holds only plain data, so this pickle is not one (or was tampered with)"
        )
