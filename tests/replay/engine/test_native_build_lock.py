"""Several processes on one cache (a fleet's workers) build the native replay core once."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler")
def test_processes_sharing_a_cache_build_the_core_once(tmp_path):
    calls = tmp_path / "compiler-calls"
    compiler = tmp_path / "c++"
    # The real compiler, slowed down so that the processes overlap, counting its calls.
    compiler.write_text(f'#!/bin/sh\necho x >> "{calls}"\nsleep 1\nexec c++ "$@"\n')
    compiler.chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(REPO), "HIPMEM_CACHE_DIR": str(tmp_path / "cache"),
           "CXX": str(compiler)}  # fmt: skip
    probe = "from hipmem.replay.engine import native; print(native.load('host')._name)"
    runs = [
        subprocess.Popen([sys.executable, "-c", probe], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    paths = {run.communicate(timeout=300)[0].strip() for run in runs}
    assert all(run.returncode == 0 for run in runs)
    assert len(paths) == 1 and Path(paths.pop()).is_file()
    assert calls.read_text().count("x") == 1
