"""The documentation installs with hipmem (setup.py copies docs/ into the package, MANIFEST.in
puts it in the source distribution): a user of the wheel has the pages every `--help` names
(`Docs: hipmem docs replay`), and `hipmem docs` finds them there as in a checkout."""

from __future__ import annotations

import zipfile
from pathlib import Path

from tests.cli_run import hipmem

REPO = Path(__file__).resolve().parents[2]


def test_the_wheel_carries_every_page(wheel: Path) -> None:  # wheel: tests/core/conftest.py
    names = set(zipfile.ZipFile(wheel).namelist())
    pages = {f"hipmem/docs/{page.name}" for page in (REPO / "docs").glob("*.md")}
    assert len(pages) >= 20 and pages <= names, sorted(pages - names)
    assert "hipmem/docs/img/replay-html.png" in names  # the pictures the pages show


def test_hipmem_docs_names_a_page_and_refuses_one_it_lacks() -> None:
    found = hipmem("docs", "quickstart")
    assert (found.returncode, found.stdout.strip()) == (0, str(REPO / "docs" / "quickstart.md"))
    listed = hipmem("docs")
    assert listed.returncode == 0 and str(REPO / "docs" / "index.md") in listed.stdout
    assert "quickstart" in listed.stdout and "Quick start" in listed.stdout
    missing = hipmem("docs", "nope")
    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr.startswith("Error: no page 'nope': the pages are allocation-logs, ")
