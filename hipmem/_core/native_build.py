"""Compiling hipmem's native code on first use: the one place that finds a compiler and runs it.

Every native build (the virtual GPU of a PyTorch release, RMM's replay driver, the replay
core, sizing's stand-in HIP runtime) is made inside `build_cache.built_folder`'s `make`, in
steps of `compile_step`, with compilers from `find_compiler`:

- a compiler is `$CC` / `$CXX` when set (a name on PATH or a path), else the first of the usual
  names on PATH; none is a one-line error saying which and what to install;
- a failed step is one line naming what was being built and the compiler's first real error:
  the symbols ld reports undefined (not collect2's summary), else the first `error:` line.

Each part raises its own error class (the callers pass it), so a build failure reads, and
exits, as the rest of that part's errors.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence

# What apt installs for each variable's compiler (g++ brings gcc along).
_PACKAGES = {"CC": "gcc", "CXX": "g++"}
DEFAULT_NAMES = {"CC": ("cc", "gcc"), "CXX": ("g++", "c++")}


def find_compiler(
    variable: str, *, needed_by: str, error: type[Exception], names: Sequence[str] = ()
) -> str:
    """`$variable` when set (a name or a path), else the first of `names` (by default the
    usual ones for CC or CXX) on PATH. None: `error` with `needed_by` ("the virtual GPU is
    compiled on first use and needs a C++ compiler"), what is wrong and what to install."""
    names = tuple(names) or DEFAULT_NAMES[variable]
    given = os.environ.get(variable)
    chosen = shutil.which(given) if given else next(filter(None, map(shutil.which, names)), None)
    if chosen:
        return chosen
    wrong = f"${variable} ({given}) is not one" if given else f"none of {', '.join(names)} is here"
    raise error(f"{needed_by}: {wrong}; apt install {_PACKAGES.get(variable, 'g++')}")


def compile_step(command: Sequence[str], *, what: str, error: type[Exception]) -> None:
    """Run one compiler `command`; a failure is `error("compiling WHAT failed: FIRST ERROR")`."""
    try:
        done = subprocess.run(list(command), capture_output=True, text=True, check=False)
    except OSError as err:
        raise error(f"compiling {what} could not start: {err}") from None
    if done.returncode != 0:
        raise error(f"compiling {what} failed: {first_error(done.stderr)}")


_UNDEFINED = re.compile(r"undefined reference to [`'‘](.+?)['’]\s*$")
_ERROR = re.compile(r":\s*(?:fatal )?error:")


def first_error(stderr: str) -> str:
    """The first real error of a compiler's output: the undefined symbols of a failed link
    (how many more), else the first `error:` line; never collect2's "ld returned 1"."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    undefined: list[str] = []
    for line in lines:
        found = _UNDEFINED.search(line)
        if found and found.group(1) not in undefined:
            undefined.append(found.group(1))
    if undefined:
        more = f" (and {len(undefined) - 1} more)" if len(undefined) > 1 else ""
        return f"undefined reference to {undefined[0]}{more}"
    meaningful = [ln for ln in lines if "collect2" not in ln]
    first = next((ln for ln in meaningful if _ERROR.search(ln)), None)
    first = first or next((ln for ln in meaningful if "error" in ln.lower()), None)
    return (first or (lines[0] if lines else "no output"))[:400]
