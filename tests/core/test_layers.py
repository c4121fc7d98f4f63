"""Every import points down the layers of docs/architecture.md, and no module imports itself
back through others. The graph is grimp's (import-linter's engine), read from the source:
imports inside functions count, since they run too.

    hipmem.cli          the command line (typer, rich)
    hipmem              the Python API: names the entry points, imports lazily
    hipmem.sizing  |  hipmem.replay     the two libraries, independent of each other
    hipmem._core        errors, byte sizes, cache root, atomic writes, progress, plot files

grimp reads the checkout as it is (`hipmem/` links to the parts' folders: docs/architecture.md),
in a child process whose path starts at the checkout, so the graph is this checkout's whatever
else is installed.
"""

from __future__ import annotations

import ast
import graphlib
import json
import os
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

REPO = Path(__file__).resolve().parents[2]
RANKS = {"hipmem._core": 0, "hipmem.sizing": 1, "hipmem.replay": 1, "hipmem": 2, "hipmem.cli": 3}

_CHILD = """
import json, sys, grimp
out = {}
for key, type_checking in (("all", False), ("run", True)):
    g = grimp.build_graph("hipmem", exclude_type_checking_imports=type_checking, cache_dir=None)
    out[key] = {
        "modules": sorted(g.modules),
        "imports": [
            [m, i, [d["line_number"] for d in g.get_import_details(importer=m, imported=i)]]
            for m in sorted(g.modules) for i in sorted(g.find_modules_directly_imported_by(m))
        ],
    }
json.dump(out, sys.stdout)
"""


def part(module: str) -> str:
    """The layer a module belongs to: its longest prefix in RANKS."""
    pieces = module.split(".")
    for length in range(len(pieces), 0, -1):
        name = ".".join(pieces[:length])
        if name in RANKS:
            return name
    raise AssertionError(f"{module} is in no layer")


def _graph(facts: dict) -> grimp.ImportGraph:
    graph = grimp.ImportGraph()
    for module in facts["modules"]:
        graph.add_module(module)
    for importer, imported, lines in facts["imports"]:
        for line in lines:
            graph.add_import(
                importer=importer, imported=imported, line_number=line, line_contents=""
            )
    return graph


@pytest.fixture(scope="module")
def graphs() -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.run(
        [sys.executable, "-c", _CHILD],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert child.returncode == 0, child.stderr
    return json.loads(child.stdout)


@pytest.fixture(scope="module")
def graph(graphs: dict) -> grimp.ImportGraph:
    return _graph(graphs["all"])


def test_every_part_is_in_the_graph(graph: grimp.ImportGraph) -> None:
    # The parts are found through hipmem/'s links: a graph without them checks nothing.
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


def test_no_import_cycle(graphs: dict) -> None:
    # Imports for type checkers only never run, so they cannot make a cycle.
    cycle = import_cycle(_graph(graphs["run"]))
    assert not cycle, "import cycle: " + " -> ".join(cycle)


def test_no_import_cycle_for_type_checkers(graph: grimp.ImportGraph) -> None:
    # With the imports for type checkers too: a cycle hidden behind TYPE_CHECKING is still two
    # modules that cannot be read, or split, one without the other.
    cycle = import_cycle(graph)
    assert not cycle, "import cycle (type-checking imports included): " + " -> ".join(cycle)


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


def test_every_import_is_an_arrow(graph: grimp.ImportGraph) -> None:
    """Each module that imports one of hipmem's has an arrow to it in the graph: relative
    imports resolve, and the parts' folders are read under their installed names."""
    missing = []
    for module in sorted(graph.modules):
        spec_file = _file_of(module)
        if spec_file is None:
            continue
        tree = ast.parse(spec_file.read_text())
        ours = any(
            (
                isinstance(node, ast.ImportFrom)
                and (node.level > 0 or (node.module or "").startswith("hipmem"))
            )
            or (
                isinstance(node, ast.Import)
                and any(alias.name.startswith("hipmem") for alias in node.names)
            )
            for node in ast.walk(tree)
        )
        if ours and not graph.find_modules_directly_imported_by(module):
            missing.append(module)
    assert not missing, "imports grimp did not draw: " + ", ".join(missing)
    assert graph.direct_import_exists(
        importer="hipmem.cli.cmd_replay", imported="hipmem.replay.job"
    ), "a relative import between parts (..replay) is an arrow"


def _file_of(module: str) -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec(module)
    return Path(spec.origin) if spec and spec.origin and spec.origin.endswith(".py") else None
