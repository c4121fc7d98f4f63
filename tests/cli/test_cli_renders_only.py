"""The command line parses, calls the library and renders; nothing else (docs/architecture.md,
Layers; issue #51). Read from the source of every module of hipmem_cli/ (its output/ too), no
module of it:

- starts a thread or a process pool: waiting and timing run below it (a progress display's
  heartbeat is `hipmem._core.progress.heartbeat`);
- reads or sets an environment variable: which variable a library reads, and what it means, is
  the library's (`replay/explain/variables.py` for PYTORCH_*_ALLOC_CONF,
  `sizing/workspace_check.py` for ROCBLAS_DEVICE_MEMORY_SIZE, `replay/pytorch/allocator.py`
  for HIPMEM_TORCH), so the Python API reads them as the command line does;
- reaches below a command's one library call into a search, the halving search, or the sizing
  pipeline that `size_request` (sizing/request.py) and `find_capacities` run: their results
  and constants it may name, their steps not.
"""

from __future__ import annotations

import ast
from pathlib import Path

CLI = Path(__file__).resolve().parents[2] / "hipmem_cli"

# Threads and processes of its own (signal handlers are not: a Ctrl-C is the CLI's to say).
THREAD_MODULES = ("threading", "_thread", "concurrent", "multiprocessing")
THREAD_NAMES = frozenset({"Thread", "Timer", "ThreadPoolExecutor", "ProcessPoolExecutor"})

# os.environ and the functions that read or change it, however `os` is imported or named.
ENVIRONMENT_NAMES = frozenset({"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"})
# What is only rendering may read its own variables, each named here with why. None does
# today: rich itself reads the terminal width (COLUMNS) and NO_COLOR
# (hipmem_cli/output/consoles.py hands it the streams), and --debug is an option, not a variable.
ENVIRONMENT_EXEMPT: dict[str, frozenset[str]] = {}

# Modules that are a search's or the sizing pipeline's steps, not its answer.
INTERNAL_MODULES = (
    "hipmem._core.bisection",  # the halving search
    "hipmem.replay.capacity.at_once",  # searches side by side, one replay per core
    "hipmem.replay.capacity.rmm_probes",
    "hipmem.replay.capacity.limit_rule",
    "hipmem.replay.capacity.confirmation",
    "hipmem.sizing.device_choice",
    "hipmem.sizing.worker.process",
    "hipmem.sizing.worker.worker",
    "hipmem.sizing.hipblaslt.request",  # size_request's hipBLASLt half
)
# A default a command's help shows is the library's word, not a step: it may be imported.
HELP_DEFAULTS = frozenset({"CONFIRM_RUNS"})
# The steps themselves, wherever they are imported from or however they are reached.
INTERNAL_NAMES = frozenset({
    # hipmem/_core/bisection.py
    "least_holding", "first_holding", "least_holding_above", "growth_most",
    # replay/capacity/: one resource's search (find_capacities runs them all, and is the call)
    "find_capacity", "find_virtual_capacity", "run_each", "confirmed",
    # sizing/request.py's pipeline: size_request (and SizingRequest) is the call
    "size_calls", "SizingSession", "gather_calls", "choose_device", "WorkerProcess",
    "MinimumFinder", "run_sweep", "workspace_cap", "size_under_cap",
})  # fmt: skip


def _package(path: Path) -> str:
    """The installed package a module of hipmem_cli/ is in (`hipmem.cli.output`)."""
    folders = path.relative_to(CLI).parent.parts
    return ".".join(("hipmem", "cli", *folders))


def _absolute(node: ast.ImportFrom, package: str) -> str:
    if node.level == 0:
        return node.module or ""
    parts = package.split(".")
    base = parts[: len(parts) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _within(module: str, roots: tuple[str, ...]) -> bool:
    return any(module == root or module.startswith(root + ".") for root in roots)


def _imported(node: ast.Import | ast.ImportFrom, package: str) -> list[tuple[str, str]]:
    """(module, name) of each thing imported: `from a.b import c` may import the module a.b.c."""
    if isinstance(node, ast.Import):
        return [(alias.name, "") for alias in node.names]
    module = _absolute(node, package)
    return [(module, alias.name) for alias in node.names]


def _import_problems(
    node: ast.Import | ast.ImportFrom, package: str, exempt: frozenset[str]
) -> list[str]:
    found = []
    for module, name in _imported(node, package):
        modules = {module, f"{module}.{name}"} if name else {module}
        if any(_within(m, THREAD_MODULES) for m in modules):
            found.append(f"imports {module} (a thread or process of its own)")
        elif name in HELP_DEFAULTS:
            continue
        elif any(_within(m, INTERNAL_MODULES) for m in modules):
            found.append(f"imports {'.'.join(filter(None, (module, name)))} (a search's step)")
        elif name in INTERNAL_NAMES:
            found.append(f"imports {name} from {module} (a search's or the pipeline's step)")
        elif module == "os" and name in ENVIRONMENT_NAMES - exempt:
            found.append(f"imports os.{name} (the environment)")
    return found


def _use_problems(node: ast.AST, exempt: frozenset[str]) -> list[str]:
    if isinstance(node, ast.Attribute) and node.attr in ENVIRONMENT_NAMES - exempt:
        return [f"reads .{node.attr} (the environment)"]
    name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)
    if name in THREAD_NAMES:
        return [f"uses {name} (a thread or process of its own)"]
    if name in INTERNAL_NAMES:
        return [f"uses {name} (a search's or the pipeline's step)"]
    # a module imported by its name (importlib), as commands.py imports the commands
    text = node.value if isinstance(node, ast.Constant) else None
    if isinstance(text, str) and _within(text, THREAD_MODULES + INTERNAL_MODULES):
        return [f"names the module {text!r}"]
    return []


def problems(
    source: str, package: str = "hipmem.cli", exempt: frozenset[str] = frozenset()
) -> list[str]:
    """`LINE: what` for each thing a module's `source` does that is not the command line's to
    do; `exempt`: the environment names it may read (ENVIRONMENT_EXEMPT)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            said = _import_problems(node, package, exempt)
        else:
            said = _use_problems(node, exempt)
        found += [f"{getattr(node, 'lineno', 0)}: {line}" for line in said]
    return found


def test_the_command_line_only_parses_calls_and_renders() -> None:
    paths = sorted(CLI.rglob("*.py"))
    found = {}
    for path in paths:
        relative = path.relative_to(CLI).as_posix()
        exempt = ENVIRONMENT_EXEMPT.get(relative, frozenset())
        said = problems(path.read_text(), _package(path), exempt)
        if said:
            found[relative] = said
    assert found == {}
    read = {path.relative_to(CLI).as_posix() for path in paths}
    assert {"cmd_check.py", "piped_progress.py", "output/progress.py"} <= read  # all were read


def test_each_rule_catches_what_it_is_for() -> None:
    """The rules fail on what they forbid, however it is written, and pass the library calls
    the commands make."""
    forbidden = {
        "import threading": "threading",
        "from concurrent.futures import ThreadPoolExecutor": "concurrent.futures",
        "import multiprocessing.pool as mp": "multiprocessing",
        "import os\nos.environ.get('HIPMEM_TORCH')": "environ",
        "import os as system\nsystem.getenv('X')": "getenv",
        "from os import environ": "os.environ",
        "from ..sizing.session import size_calls": "size_calls",
        "from ..sizing import device_choice": "hipmem.sizing.device_choice",
        "from ...replay.capacity.search import find_capacity": "find_capacity",
        "from hipmem._core import bisection": "bisection",
        "from ..replay.capacity import at_once\nat_once.cores()": "at_once",
        "from ..replay.capacity import search\nsearch.find_capacity(1)": "find_capacity",
        "importlib.import_module('hipmem.sizing.worker.process')": "worker.process",
    }
    for source, named in forbidden.items():
        package = "hipmem.cli.output" if "..." in source else "hipmem.cli"
        said = problems(source, package)
        assert said and named in said[0], (source, said)
    allowed = (
        "from ..sizing.request import SizingRequest, size_request\n"
        "from ..replay.capacity.capacities import find_capacities\n"
        "from ..replay.capacity.search import CONFIRM_RUNS\n"
        "from ..sizing.workspace_check import read_environment_setting\n"
        "from hipmem._core.progress import heartbeat\n"
        "import signal, time\n"
    )
    assert problems(allowed) == []
    assert problems("import os\nos.environ['NO_COLOR']", exempt=frozenset({"environ"})) == []
