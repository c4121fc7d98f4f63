"""What a first answer costs beside the answer itself (issue 37: "the first answer is no
slower than today"). Its speed is measured in benchmarks/bench_answer_cache.py; here, what
decides it: which modules a query imports, and that keeping an answer does not compute its key
twice. Real `hipmem` processes and the real cache of answers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hipmem._core import answer_cache
from tests.conftest import REPO, cli_env

CALLS = ("rocsolver_dgetrf:m=1024,n=1024",)
# Imported only when a command needs them: a workload or call log (jsonschema, PyYAML), a
# download (urllib.request), the yaml format of `recommend` (PyYAML). Together about 90 ms.
LAZY = ("jsonschema", "yaml", "urllib.request", "hipmem.sizing.calls.workload_file")


def _imported_by(argv: list[str], env: dict[str, str]) -> tuple[list[str], int]:
    probe = (
        "import sys; from hipmem.cli.main import _run; "
        f"code = _run({argv!r}); "
        "import json; "
        f"print(json.dumps([sorted(m for m in {LAZY!r} if m in sys.modules), code]), "
        "file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env=cli_env(**env), cwd=REPO, timeout=300)  # fmt: skip
    names, code = json.loads(done.stderr.strip().splitlines()[-1])
    return names, code


@pytest.mark.parametrize(
    "argv",
    [
        ["--debug", "size", "--rocm", "7.2", "-d", "MI300X", *CALLS],
        ["--debug", "recommend", "--rocm", "7.2", "-d", "MI210", *CALLS],
        ["--debug", "check", "--rocm", "7.2", "-d", "MI210", *CALLS, "--value", "4194304"],
    ],
    ids=["size", "recommend", "check"],
)
def test_a_query_of_calls_imports_no_reader_it_does_not_use(rocm72: Path, argv: list[str]) -> None:
    imported, code = _imported_by(argv, {})
    assert code in (0, 1)
    assert imported == []


def test_a_workload_still_imports_its_readers(rocm72: Path) -> None:
    workload = str(REPO / "samples" / "workload.yaml")
    imported, code = _imported_by(["--debug", "size", "--rocm", "7.2", "-d", "MI300X",
                                   "--workload", workload], {})  # fmt: skip
    assert code == 0
    assert {"jsonschema", "yaml", "hipmem.sizing.calls.workload_file"} <= set(imported)


def test_an_installed_package_is_another_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A pip install or upgrade (of hipmem or of rich, which draws the tables) adds or renames
    # files in the site folder: another key, although no hipmem source changed.
    site_folder = tmp_path / "site-packages"
    site_folder.mkdir()
    monkeypatch.setattr(answer_cache, "_site_folders", lambda: [str(site_folder)])
    argv = ["size", "-d", "MI300X", *CALLS]
    key = answer_cache.key_for(argv, tmp_path / "cache", {})
    assert key is not None and answer_cache.key_for(argv, tmp_path / "cache", {}) == key
    (site_folder / "rich-99.0.dist-info").mkdir()
    assert answer_cache.key_for(argv, tmp_path / "cache", {}) != key


def test_the_key_is_computed_once_for_a_kept_answer(
    rocm72: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only what a command can change while it runs (named files, the libraries) is looked at
    # again after it: hipmem's sources and the environment are hashed once.
    from hipmem.cli import main

    calls: list[str] = []
    real_sources = answer_cache._add_sources

    def counted_sources(digest: Any) -> bool:
        calls.append("sources")
        return real_sources(digest)

    monkeypatch.setattr(answer_cache, "_add_sources", counted_sources)
    monkeypatch.setattr(answer_cache, "piped", lambda: True)
    monkeypatch.setattr(main, "_answer", lambda argv: 0)
    monkeypatch.setenv("HIPMEM_CACHE_DIR", str(tmp_path / "cache"))
    assert main._answer_again(["size", "-d", "MI300X", *CALLS]) == 0
    assert calls == ["sources"]
    assert len(list((tmp_path / "cache" / "answers").glob("*.json"))) == 1


def test_an_answer_that_changed_a_named_file_is_not_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hipmem.cli import main

    named = tmp_path / "calls.log"
    named.write_text("before\n")

    def answer(argv: list[str]) -> int:
        named.write_text("after\n")  # what a command writing a file it names would do
        return 0

    monkeypatch.setattr(answer_cache, "piped", lambda: True)
    monkeypatch.setattr(main, "_answer", answer)
    monkeypatch.setenv("HIPMEM_CACHE_DIR", str(tmp_path / "cache"))
    assert main._answer_again(["size", "--from-log", str(named)]) == 0
    assert not list((tmp_path / "cache" / "answers").glob("*.json"))
