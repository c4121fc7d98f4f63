"""One run of a documented command for every example that shows it: several pages show the
same console session (README.md and docs/size.md, docs/quickstart.md and
docs/rocm-releases.md, ...), and tests/docs/test_docs_examples.py and
tests/cli/test_fits_80_columns.py ran each copy anew: the same command, after the same
commands, in the same environment, so the same output. The first test (on any test worker) to
ask runs it for real; the others read what it printed and compare it with their own page."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.terminal import Seen


def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of this test run that every test worker sees (under xdist, the parent of the
    workers' own folders; without it, the run's own folder: its parent outlives the run)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def run_once(folder: Path | None, key: list[str], run: Callable[[], Seen]) -> Seen:
    """`run()`'s result, run once per test run for `key` (what decides the output: how it is
    shown, the commands before it and the command); `folder` None: always run (a test of its
    own environment, nothing to share)."""
    if folder is None:
        return run()
    name = hashlib.sha256(json.dumps(key).encode()).hexdigest()[:32]
    kept = folder / f"hipmem-run-{name}.json"
    # The lock makes a second asker wait for the first one's run instead of running it too.
    with (folder / f"hipmem-run-{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if kept.is_file():
            return Seen(**json.loads(kept.read_text()))
        seen = run()
        kept.write_text(json.dumps(vars(seen)))
        return seen
