"""The one native part built at install time: the snapshot reader's pickle machine in C, a plain
CPython extension (`hipmem.replay.snapshots._snapshot_reader`), imported with its package as
`pickle` imports `_pickle`; and the documentation's pages (docs/, which MANIFEST.in puts in the
source distribution) copied into the package as `hipmem/docs`, where `hipmem docs` finds them
in an install (docs/ is no package: a package-dir entry would make it one). Everything else is
declared in pyproject.toml.

`optional`: an install without a C compiler or Python's headers still succeeds (setuptools
says the extension failed), and snapshots are then read by the Python machine
(`replay/snapshots/native.py`)."""

import shutil
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

DOCS = Path("docs")
DOCS_FILES = ("*.md", "img/*.png")


class BuildPyWithDocs(build_py):
    """build_py, then docs/'s pages and pictures into the built package's docs/."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install reads the checkout's docs/ itself
            return
        target = Path(self.build_lib, "hipmem", "docs")
        for pattern in DOCS_FILES:
            for source in sorted(DOCS.glob(pattern)):
                destination = target / source.relative_to(DOCS)
                destination.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, destination)


setup(
    cmdclass={"build_py": BuildPyWithDocs},
    ext_modules=[
        Extension(
            "hipmem.replay.snapshots._snapshot_reader",
            sources=sorted(str(p) for p in Path("replay/snapshots/csrc").glob("*.c")),
            depends=sorted(str(p) for p in Path("replay/snapshots/csrc").glob("*.h")),
            # Only the module's init is exported: the files' shared functions stay inside.
            extra_compile_args=["-fvisibility=hidden"],
            optional=True,
        )
    ],
)
