"""What hipmem reads of an ELF shared library without loading it: the libraries it names as
DT_NEEDED, and where a named section lies in the file.

DT_NEEDED tells which HIP runtime a rocBLAS links (`libamdhip64.so.6` or `.so.7`: the stand-in
is built under that name) and which rocBLAS a rocSOLVER was built against (a directory that
mixes releases is refused). The section range lets the fetch drop the GPU code
(`.hip_fatbin`) from the cached libraries. Only headers are read: a few kilobytes of a file
that may be gigabytes.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO

_PT_LOAD = 1
_PT_DYNAMIC = 2
_DT_NULL = 0
_DT_NEEDED = 1
_DT_STRTAB = 5
_MAX_ENTRIES = 4096  # program headers or dynamic entries: bounds a damaged file's loops


def needed_libraries(path: Path) -> list[str]:
    """DT_NEEDED names of a 64-bit little-endian ELF; [] for anything else or a damaged file."""
    try:
        with path.open("rb") as elf:
            return _needed(elf)
    except (OSError, struct.error, ValueError, UnicodeDecodeError):
        return []


def section_range(path: Path, name: str) -> tuple[int, int] | None:
    """(file offset, size) of the section called `name`, or None (absent, not ELF, damaged)."""
    try:
        with path.open("rb") as stream:
            return _section(stream, name.encode())
    except (OSError, struct.error, ValueError):
        return None


def _section(stream: BinaryIO, wanted: bytes) -> tuple[int, int] | None:
    header = stream.read(64)
    if header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:
        return None
    (shoff,) = struct.unpack_from("<Q", header, 40)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", header, 58)
    if shnum > _MAX_ENTRIES or shstrndx >= shnum:
        return None
    stream.seek(shoff)
    table = stream.read(shentsize * shnum)
    sections = [struct.unpack_from("<IIQQQQ", table, i * shentsize) for i in range(shnum)]
    names_offset = sections[shstrndx][4]
    for name_index, kind, _flags, _addr, offset, size in sections:
        stream.seek(names_offset + name_index)
        if stream.read(len(wanted) + 1) == wanted + b"\0" and kind != 8:  # 8: SHT_NOBITS
            return offset, size
    return None


def _needed(stream: BinaryIO) -> list[str]:
    header = stream.read(64)
    if header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:
        return []
    (phoff,) = struct.unpack_from("<Q", header, 32)
    phentsize, phnum = struct.unpack_from("<HH", header, 54)
    loads: list[tuple[int, int, int]] = []  # (vaddr, offset, filesz)
    dynamic: tuple[int, int] | None = None
    for index in range(min(phnum, _MAX_ENTRIES)):
        stream.seek(phoff + index * phentsize)
        kind, _flags, offset, vaddr, _paddr, filesz = struct.unpack("<IIQQQQ", stream.read(40))
        if kind == _PT_LOAD:
            loads.append((vaddr, offset, filesz))
        elif kind == _PT_DYNAMIC:
            dynamic = (offset, filesz)
    if dynamic is None:
        return []
    stream.seek(dynamic[0])
    entries = stream.read(min(dynamic[1], _MAX_ENTRIES * 16))
    needed_offsets: list[int] = []
    strtab_vaddr = None
    for tag, value in struct.iter_unpack("<qQ", entries[: len(entries) // 16 * 16]):
        if tag == _DT_NULL:
            break
        if tag == _DT_NEEDED:
            needed_offsets.append(value)
        elif tag == _DT_STRTAB:
            strtab_vaddr = value
    if strtab_vaddr is None:
        return []
    strtab = _file_offset(strtab_vaddr, loads)
    names = []
    for offset in needed_offsets:
        stream.seek(strtab + offset)
        raw = stream.read(256).split(b"\0", 1)[0]
        names.append(raw.decode("ascii"))
    return names


def _file_offset(vaddr: int, loads: list[tuple[int, int, int]]) -> int:
    for start, offset, size in loads:
        if start <= vaddr < start + size:
            return vaddr - start + offset
    raise ValueError("string table outside the loaded segments")
