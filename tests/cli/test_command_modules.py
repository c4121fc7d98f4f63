"""Each command's module (`hipmem_cli/cmd_*.py`) is imported by the registry alone
(commands.py, by name): what two commands share lives in a module of its own, so that a
command is read, changed and loaded without another's (docs/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

CLI = Path(__file__).resolve().parents[2] / "hipmem_cli"


def _imported_commands(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            names = [node.module or "", *(alias.name for alias in node.names)]
            found |= {name.rpartition(".")[2] for name in names if "cmd_" in name}
        elif isinstance(node, ast.Import):
            found |= {alias.name.rpartition(".")[2] for alias in node.names if "cmd_" in alias.name}
    return found


def test_no_module_imports_a_commands_module() -> None:
    importing = {path.name: _imported_commands(path) for path in sorted(CLI.glob("*.py"))}
    assert importing["commands.py"] == set()  # by name, through importlib
    assert {name: found for name, found in importing.items() if found} == {}
    assert "cmd_replay.py" in importing and "cmd_explain.py" in importing  # the files were read
