"""How the recording tests run `hipmem record`: the real command line in a fresh process, with
the test's own Python, which has no PyTorch: `--torch 2.11.0` puts the cached wheel first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
RECORD = REPO / "tests" / "data" / "record"
HIPMEM = [sys.executable, "-m", "hipmem.cli"]


def run_record(
    tmp_path: Path,
    script: str | Path,
    *options: str,
    script_args: tuple[str, ...] = (),
    python_path: Path | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`hipmem record --device H200 --torch 2.11.0 OPTIONS -- python SCRIPT SCRIPT_ARGS`, run
    in tmp_path (with python_path on PYTHONPATH: packages the script imports; env: variables
    set besides the environment's)."""
    command = [*HIPMEM, "record", "--device", "H200", "--torch", "2.11.0", *options, "--",
               sys.executable, str(script), *script_args]  # fmt: skip
    env = {**os.environ, **(env or {})}
    if python_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(python_path), env.get("PYTHONPATH")]))
    return subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env,
                          check=False)  # fmt: skip


def answer_of(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The --json answer: all of stdout (the command's own output went to stderr)."""
    assert done.stdout.lstrip().startswith("{"), (done.stdout[:500], done.stderr[-2000:])
    found: dict[str, Any] = json.loads(done.stdout)
    return found
