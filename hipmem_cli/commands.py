"""The list of command groups: one module each, joined here."""

from __future__ import annotations

import importlib

import typer

# module name -> how it is mounted. A module exposes either `app` (a group) or `register(app)`.
_MODULES = ("rocm", "devices", "size", "routines", "recommend", "log", "replay")


def register(app: typer.Typer) -> None:
    for name in _MODULES:
        try:
            module = importlib.import_module(f"hipmem_cli.cmd_{name}")
        except ModuleNotFoundError as err:
            if err.name == f"hipmem_cli.cmd_{name}":
                continue  # command group not written yet
            raise
        module.register(app)
