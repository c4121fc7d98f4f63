"""The one helper that builds native code on first use (hipmem/_core/native_build.py): every
build finds its compilers and runs them there, and says a missing compiler or a failed
compile in one line (the real compiler, a real failing source)."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

from hipmem._core.native_build import compile_step, find_compiler

REPO = Path(__file__).resolve().parents[2]
# The builds of native code, and what each calls to find and run its compilers: the helper's
# functions, or the virtual GPU's wrappers of them (RMM's driver is built on the virtual GPU).
BUILDS = {
    "replay/virtual/build.py": {"find_compiler", "compile_step"},
    "replay/rmm/build.py": {"tool", "compile_part"},
    "replay/engine/native.py": {"find_compiler", "compile_step"},
    "sizing/worker/shim_build.py": {"find_compiler", "compile_step"},
}
COMPILERS = ("cc", "gcc", "g++", "c++", "clang", "clang++")


class Refused(Exception):
    """The error class a caller passes."""


def _lookups(tree: ast.AST) -> list[str]:
    """Compilers looked up by hand: `shutil.which("g++")`, `os.environ.get("CXX")`."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            first = node.args[0]
            text = first.value if isinstance(first, ast.Constant) else None
            if node.func.attr == "which" and text in COMPILERS:
                found.append(f"which({text})")
            if node.func.attr == "get" and text in ("CC", "CXX"):
                found.append(f"get({text})")
    return found


def test_every_build_finds_and_runs_its_compilers_through_the_helper() -> None:
    for path in [*REPO.glob("replay/**/*.py"), *REPO.glob("sizing/**/*.py")]:
        tree = ast.parse(path.read_text())
        assert _lookups(tree) == [], path
        if str(path.relative_to(REPO)) in BUILDS:
            called = {n.func.id for n in ast.walk(tree)
                      if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}  # fmt: skip
            assert BUILDS[str(path.relative_to(REPO))] <= called, path
    # What the check finds, written by hand as the builds once had it:
    by_hand = 'os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")'
    assert _lookups(ast.parse(by_hand)) == ["get(CXX)", "which(c++)", "which(g++)"]


def test_a_missing_compiler_is_one_line_naming_what_and_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CXX", str(tmp_path / "no-g++"))
    with pytest.raises(Refused) as caught:
        find_compiler("CXX", needed_by="the thing is compiled on first use", error=Refused)
    assert str(caught.value) == (
        f"the thing is compiled on first use: $CXX ({tmp_path / 'no-g++'}) is not one; "
        "apt install g++"
    )
    monkeypatch.delenv("CXX")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(Refused, match=r"^it needs one: none of cc, gcc is here; apt install gcc$"):
        find_compiler("CC", needed_by="it needs one", error=Refused)


@pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler")
def test_a_failed_compile_says_the_compilers_first_error(tmp_path: Path) -> None:
    source = tmp_path / "broken.cpp"
    source.write_text("int main() { return undeclared_name; }\n")
    compiler = find_compiler("CXX", needed_by="unused", error=Refused)
    with pytest.raises(Refused) as caught:
        compile_step([compiler, "-o", str(tmp_path / "out"), str(source)], what="the test program",
                     error=Refused)  # fmt: skip
    said = str(caught.value)
    assert said.startswith(f"compiling the test program failed: {source}:1:")
    assert "error: " in said and "undeclared_name" in said and "\n" not in said
    source.write_text("int main() { return 0; }\n")
    compile_step([compiler, "-o", str(tmp_path / "out"), str(source)], what="the test program",
                 error=Refused)  # fmt: skip
    assert (tmp_path / "out").is_file()
