"""The one native part built at install time: the snapshot reader's pickle machine in C, a plain
CPython extension (`hipmem.replay.snapshots._snapshot_reader`), imported with its package as
`pickle` imports `_pickle`. Everything else is declared in pyproject.toml.

`optional`: an install without a C compiler or Python's headers still succeeds (setuptools
says the extension failed), and snapshots are then read by the Python machine
(`replay/snapshots/native.py`)."""

from pathlib import Path

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "hipmem.replay.snapshots._snapshot_reader",
            sources=sorted(str(p) for p in Path("replay/snapshots/csrc").glob("*.c")),
            depends=sorted(str(p) for p in Path("replay/snapshots/csrc").glob("*.h")),
            # Only the module's init is exported: the files' shared functions stay inside.
            extra_compile_args=["-fvisibility=hidden"],
            optional=True,
        )
    ]
)
