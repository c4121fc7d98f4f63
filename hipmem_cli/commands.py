"""The command groups, one module each, joined here.

Only the module of the command being run is imported (all of them for `--help`): the replay
commands pull in pandas and pyarrow, which `hipmem size` should not pay for at start-up.
"""

from __future__ import annotations

import importlib

import typer

# command name -> module that registers it (a module may register several commands)
COMMAND_MODULES = {
    "size": "cmd_size",
    "routines": "cmd_routines",
    "recommend": "cmd_recommend",
    "check": "cmd_check",
    "devices": "cmd_devices",
    "rocm": "cmd_rocm",
    "log": "cmd_log",
    "replay": "cmd_replay",
    "fleet": "cmd_fleet",
    "torch": "cmd_torch",
    "rmm": "cmd_rmm",
    "explain": "cmd_explain",
    "cache": "cmd_cache",
    "docs": "cmd_docs",
    "record": "cmd_record",
}


def register(app: typer.Typer, argv: list[str]) -> None:
    """Register the command named in `argv` (the first word not starting with '-'), or all."""
    words = [word for word in argv if not word.startswith("-")]
    wanted = COMMAND_MODULES.get(words[0]) if words else None
    modules = [wanted] if wanted else list(dict.fromkeys(COMMAND_MODULES.values()))
    for name in modules:
        importlib.import_module(f"hipmem.cli.{name}").register(app)
