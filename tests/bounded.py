"""Run hostile inputs where they cannot take the machine down: in a subprocess with an
address-space limit (RLIMIT_AS) and a deadline. A run that needs more memory dies with
MemoryError or is killed; one that takes too long raises TimeoutExpired (a test failure)."""

from __future__ import annotations

import resource
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MEMORY_BYTES = 2 << 30  # python, numpy and the loaded modules need ~0.5 GiB of address space
DEADLINE_S = 120  # generous: these machines are shared; benchmarks say how fast it really is


def _limit(memory_bytes: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))


def run_bounded(
    argv: Sequence[str],
    *,
    memory_bytes: int = MEMORY_BYTES,
    deadline_s: float = DEADLINE_S,
    env: dict[str, str] | None = None,
    stdin: int | None = subprocess.DEVNULL,
) -> subprocess.CompletedProcess[str]:
    """Run argv under the limits; TimeoutExpired past the deadline."""
    return subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        timeout=deadline_s,
        preexec_fn=lambda: _limit(memory_bytes),
        cwd=REPO,
        env=env,
        stdin=stdin,
        check=False,
    )


def python_bounded(code: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Run Python source under the limits."""
    return run_bounded([sys.executable, "-c", code], **kwargs)  # type: ignore[arg-type]


def hipmem_bounded(*args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Run the CLI under the limits."""
    return run_bounded([sys.executable, "-m", "hipmem.cli.main", *args], **kwargs)  # type: ignore[arg-type]
