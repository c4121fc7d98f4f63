"""Every import points down the layers of docs/architecture.md, and no module imports itself
back through others. The graph is grimp's (import-linter's engine), read from the source:
imports inside functions count, since they run too.

    hipmem.cli          the command line (typer, rich)
    hipmem              the Python API: names the entry points, imports lazily
    hipmem.sizing  |  hipmem.replay     the two libraries, independent of each other
    hipmem._core        errors, byte sizes, cache root, atomic writes, progress, plot files
"""

from __future__ import annotations

import graphlib

import grimp
import pytest

RANKS = {"hipmem._core": 0, "hipmem.sizing": 1, "hipmem.replay": 1, "hipmem": 2, "hipmem.cli": 3}


def part(module: str) -> str:
    """The layer a module belongs to: its longest prefix in RANKS."""
    pieces = module.split(".")
    for length in range(len(pieces), 0, -1):
        name = ".".join(pieces[:length])
        if name in RANKS:
            return name
    raise AssertionError(f"{module} is in no layer")


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("hipmem", cache_dir=None)


def test_every_part_is_in_the_graph(graph: grimp.ImportGraph) -> None:
    # The symbolic links hipmem/sizing etc. are followed: a graph without them checks nothing.
    for name in RANKS:
        assert name in graph.modules
    assert "hipmem.sizing.session" in graph.modules and "hipmem.cli.main" in graph.modules


def upward_imports(graph: grimp.ImportGraph) -> list[str]:
    """Each import from a lower layer to a higher one, or between sizing and replay."""
    found = []
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            low, high = part(imported), part(importer)
            sideways = RANKS[low] == RANKS[high] and low != high
            if RANKS[low] > RANKS[high] or sideways:
                lines = graph.get_import_details(importer=importer, imported=imported)
                where = ", ".join(str(d["line_number"]) for d in lines)
                found.append(f"{importer} (line {where}) imports {imported}")
    return found


def import_cycle(graph: grimp.ImportGraph) -> list[str]:
    """One cycle of imports, or []. A package's __init__ importing its own modules is not one."""
    edges = {
        module: {
            imported
            for imported in graph.find_modules_directly_imported_by(module)
            if not module.startswith(imported + ".")
        }
        for module in graph.modules
    }
    try:
        graphlib.TopologicalSorter(edges).prepare()
    except graphlib.CycleError as cycle:
        return list(cycle.args[1])
    return []


def test_imports_point_down(graph: grimp.ImportGraph) -> None:
    upward = upward_imports(graph)
    assert not upward, "imports against the layers:\n" + "\n".join(upward)


def test_no_import_cycle() -> None:
    # Imports for type checkers only never run, so they cannot make a cycle.
    cycle = import_cycle(
        grimp.build_graph("hipmem", exclude_type_checking_imports=True, cache_dir=None)
    )
    assert not cycle, "import cycle: " + " -> ".join(cycle)


def test_the_checks_catch_what_they_look_for() -> None:
    planted = grimp.ImportGraph()
    for name in ("hipmem._core.errors", "hipmem.sizing.a", "hipmem.sizing.b", "hipmem.replay.c"):
        planted.add_module(name)
    planted.add_import(
        importer="hipmem._core.errors",
        imported="hipmem.sizing.a",
        line_number=3,
        line_contents="import x",
    )
    planted.add_import(
        importer="hipmem.sizing.a",
        imported="hipmem.sizing.b",
        line_number=4,
        line_contents="import x",
    )
    planted.add_import(
        importer="hipmem.sizing.b",
        imported="hipmem.sizing.a",
        line_number=5,
        line_contents="import x",
    )
    planted.add_import(
        importer="hipmem.replay.c",
        imported="hipmem.sizing.b",
        line_number=6,
        line_contents="import x",
    )
    assert upward_imports(planted) == [
        "hipmem._core.errors (line 3) imports hipmem.sizing.a",
        "hipmem.replay.c (line 6) imports hipmem.sizing.b",
    ]
    assert set(import_cycle(planted)) == {"hipmem.sizing.a", "hipmem.sizing.b"}
