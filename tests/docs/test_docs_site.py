"""The documentation site builds, as a user or CI builds it: `mkdocs build --strict` in a real
subprocess, so that a broken link or anchor, a page missing from the navigation or a
navigation entry pointing nowhere fails the test command (the rules are `validation` in
mkdocs.yml). It needs nothing beside the repository: a lone clone builds it too. The README is
not part of the site; its links into docs/ are checked against the built pages here."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.terminal import REPO

README_LINK = re.compile(r"\]\((docs/[^)#\s]+?)\.md(?:#([^)\s]+))?\)")


def build(project: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """`mkdocs build --strict` of the project in `project` (its mkdocs.yml and docs/)."""
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")  # Material's banner about its successor
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        capture_output=True, text=True, cwd=project, env=env, timeout=300,
    )  # fmt: skip


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("site")
    done = build(REPO, target)
    assert done.returncode == 0, done.stdout + done.stderr
    return target


def test_every_page_is_built(site: Path) -> None:
    pages = sorted((REPO / "docs").rglob("*.md"))
    assert len(pages) >= 20
    for page in pages:
        relative = page.relative_to(REPO / "docs").with_suffix("")
        built = site / "index.html" if relative.name == "index" else site / relative / "index.html"
        assert built.is_file(), f"{page} was not built"


def test_the_readmes_links_into_the_docs_resolve(site: Path) -> None:
    links = README_LINK.findall((REPO / "README.md").read_text())
    assert links
    for page, anchor in links:
        built = site / Path(page).relative_to("docs") / "index.html"
        assert built.is_file(), f"README links to {page}.md, which is not in the site"
        if anchor:
            assert f'id="{anchor}"' in built.read_text(), f"README: no #{anchor} in {page}.md"


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ("[a page that is not there](nowhere.md)", "nowhere.md"),
        ("[an anchor that is not there](replay.md#nowhere)", "#nowhere"),
    ],
)
def test_a_broken_link_fails_the_build(tmp_path: Path, change: str, named: str) -> None:
    """The strict build is what catches broken links: check that it does, on a copy."""
    copy = tmp_path / "repo"
    shutil.copytree(REPO / "docs", copy / "docs")
    shutil.copy(REPO / "mkdocs.yml", copy / "mkdocs.yml")
    page = copy / "docs" / "size.md"
    page.write_text(page.read_text() + f"\n{change}\n")
    done = build(copy, tmp_path / "site")
    assert done.returncode != 0 and named in done.stdout + done.stderr
