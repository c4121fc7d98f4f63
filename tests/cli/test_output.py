"""hipmem_cli/output/ is the one way out: nothing bypasses it, nothing from an input reaches
the terminal raw, and no value is split inside, at any width."""

from __future__ import annotations

import ast
import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from hipmem.cli import output

CLI = Path(__file__).resolve().parents[2] / "hipmem_cli"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# Calls that write to the terminal on their own (the choke point is the only place for them).
_WRITERS = {"print", "echo", "secho", "print_exception", "print_exc", "print_json", "write"}
_STREAMS = {"stdout", "stderr"}


def _bypasses(path: Path) -> list[str]:
    found = []
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        where = f"{path.name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [alias.name for alias in node.names]
            if any(name == "rich" or name.startswith("rich.") for name in names):
                found.append(f"{where}: imports rich")
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id == "print":
            found.append(f"{where}: print()")
        if isinstance(func, ast.Attribute):
            owner = func.value
            owner_name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", "")
            if func.attr in _WRITERS and owner_name in ("typer", "click", "traceback", "rich"):
                found.append(f"{where}: {owner_name}.{func.attr}()")
            if func.attr == "write" and owner_name in _STREAMS:
                found.append(f"{where}: sys.{owner_name}.write()")
            if func.attr == "print" and owner_name != "output":
                found.append(f"{where}: {owner_name}.print()")
        if isinstance(func, ast.Name) and func.id == "Console":
            found.append(f"{where}: Console()")
    return found


def test_no_module_prints_past_the_choke_point() -> None:
    modules = sorted(p for p in CLI.glob("*.py") if p.name != "output.py")
    assert len(modules) >= 10  # the guard must see the command modules to mean anything
    bypasses = [b for path in modules for b in _bypasses(path)]
    assert bypasses == []


def test_the_libraries_never_print() -> None:
    """sizing/ and replay/ say things through return values and errors, never the terminal.
    (The worker's stdout is its pipe to the parent; catalog_build is a developer tool.)"""
    allowed = {"worker.py", "catalog_build.py"}
    libraries = [p for d in ("sizing", "replay") for p in (CLI.parent / d).rglob("*.py")]
    assert len(libraries) >= 20
    assert [b for p in libraries if p.name not in allowed for b in _bypasses(p)] == []


def test_the_guard_catches_each_kind_of_bypass(tmp_path: Path) -> None:
    sample = tmp_path / "cmd_x.py"
    sample.write_text(
        "import sys, typer\nfrom rich.table import Table\nprint('a')\ntyper.echo('b')\n"
        "sys.stderr.write('c')\nconsole.print('d')\n"
    )
    assert len(_bypasses(sample)) == 5


# -- escaping ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("\x1b[2Jcleared", "\\x1b[2Jcleared"),
        ("\x1b]0;title\x07", "\\x1b]0;title\\x07"),
        ("over\rwrite", "over\\x0dwrite"),
        ("bi\u202edi", "bi\\u202edi"),
        ("c1\x9bcode", "c1\\x9bcode"),
        ("tab\there", "tab here"),
        ("two\nlines", "two\\x0alines"),
    ],
)
def test_control_characters_are_escaped(raw: str, shown: str) -> None:
    assert output.clean(raw) == shown


def _capture(
    monkeypatch: pytest.MonkeyPatch, *, terminal: bool, width: int
) -> dict[str, io.StringIO]:
    files = {"stdout": io.StringIO(), "stderr": io.StringIO()}
    for name, file in files.items():
        console = Console(
            file=file, width=width, force_terminal=terminal, soft_wrap=True, markup=False,
            emoji=False, highlight=False, color_system="truecolor" if terminal else None,
        )  # fmt: skip
        monkeypatch.setitem(output.state.consoles, name, console)
    return files


@pytest.mark.parametrize("terminal", [True, False])
def test_user_text_is_never_markup_emoji_or_escape(
    monkeypatch: pytest.MonkeyPatch, terminal: bool
) -> None:
    files = _capture(monkeypatch, terminal=terminal, width=80)
    hostile = "emoji.log:100: [bold]x[/bold] [red] \x1b[2J :thumbs_up:"
    output.error(hostile)
    output.warning(hostile)
    output.line(hostile)
    table = output.Table(hostile, ["a [b]"])
    table.add_row(hostile)
    output.print_table(table)
    text = files["stdout"].getvalue() + files["stderr"].getvalue()
    plain = output.clean("")  # (no-op: keeps the assertion below about the input alone)
    assert plain == ""
    assert text.count("emoji.log:100:") == 5 and "💯" not in text and "👍" not in text
    assert text.count("[bold]x[/bold] [red]") == 5 and "\x1b[2J" not in text
    assert text.count("\\x1b[2J") == 5


# -- width rules ------------------------------------------------------------------------------

LONG_CALL = (
    "rocsolver_dgesvd:left_svect=singular,right_svect=none,m=400,n=300,lda=400,ldu=400,"
    "ldv=1,fast_alg=outofplace"
)


@pytest.mark.parametrize("terminal", [True, False])
@pytest.mark.parametrize("width", [40, 60, 80, 200])
def test_table_values_are_never_split_or_cut(
    monkeypatch: pytest.MonkeyPatch, terminal: bool, width: int
) -> None:
    files = _capture(monkeypatch, terminal=terminal, width=width)
    table = output.Table(
        "Workspace on virtual MI210: the 2 largest of 19 distinct calls",
        ["workspace", "bytes", "note", "call"],
        right=("workspace", "bytes"),
    )
    table.add_row("477.5 KiB", "488,960", "8.5 ms / 12.0 ms / 1.2 s with 40.7 MiB live", LONG_CALL)
    table.add_row("4.5 MiB", "4,732,160", "serve.csv.gz:5752", "rocsolver_dgetrf:m=1024,n=1024")
    output.print_table(table)
    lines = _ANSI.sub("", files["stdout"].getvalue()).splitlines()
    for value in (LONG_CALL, "rocsolver_dgetrf:m=1024,n=1024", "serve.csv.gz:5752", "477.5 KiB",
                  "4,732,160", "8.5 ms", "12.0 ms", "1.2 s", "40.7 MiB"):  # fmt: skip
        assert any(value in line for line in lines), (value, lines)
    assert "…" not in files["stdout"].getvalue()
    if width >= 200:  # room enough: the box is drawn and nothing runs past the width
        assert max(len(line) for line in lines) <= width and "┏" in lines[1]


@pytest.mark.parametrize("terminal", [True, False])
def test_prose_wraps_between_words_on_a_terminal_and_piped(
    monkeypatch: pytest.MonkeyPatch, terminal: bool
) -> None:
    """Piped too: a CI log is read at 80 columns as well (issue 37)."""
    sentence = "session 8.8 MiB (9,219,648 bytes): rocblas 4.4.1, rocsolver 3.28.2 " * 3
    files = _capture(monkeypatch, terminal=terminal, width=30)
    output.line(sentence)
    wrapped = files["stdout"].getvalue().splitlines()
    assert len(wrapped) > 3 and all(len(line) <= 30 for line in wrapped)
    assert all(w in sentence.split() for line in wrapped for w in line.split() if "MiB" not in w)
    assert any("8.8 MiB" in line for line in wrapped)  # the number keeps its unit
    assert " ".join(wrapped) == " ".join(sentence.split())


@pytest.mark.parametrize("terminal", [True, False])
def test_a_status_line_puts_a_path_too_long_for_it_on_a_line_of_its_own(
    monkeypatch: pytest.MonkeyPatch, terminal: bool
) -> None:
    """A fetch's line names the cache, under HOME: a HOME of 100 characters made it 174
    columns (issue 49). The path stands alone, whole; the words around it wrap."""
    from hipmem.sizing.rocm.apt import PackageFile
    from hipmem.sizing.rocm.fetch import FetchPlan
    from hipmem.sizing.rocm.on_demand import download_line

    home = "/home/" + "h" * 94
    target = Path(home, ".cache/hipmem/hipblaslt/7.1.1")
    deb = PackageFile("libhipblaslt1", "http://x/a.deb", "a.deb", 245 << 20, "00")
    plan = FetchPlan("hipBLASLt 7.1.1", [deb, deb, deb], ["gfx90a"], target)
    files = _capture(monkeypatch, terminal=terminal, width=80)
    message = download_line("hipBLASLt 7.1.1 is not in the cache", plan)
    output.info(message)
    lines = _ANSI.sub("", files["stderr"].getvalue()).splitlines()
    assert str(target) in lines  # alone on its line, whole
    assert all(len(line) <= 80 for line in lines if line != str(target)), lines
    assert " ".join(lines) == message and any("735.0 MiB" in line for line in lines)


@pytest.mark.parametrize("terminal", [True, False])
def test_a_table_too_wide_gives_its_last_column_a_line_under_each_row(
    monkeypatch: pytest.MonkeyPatch, terminal: bool
) -> None:
    files = _capture(monkeypatch, terminal=terminal, width=80)
    table = output.Table("Workspace", ["workspace", "bytes", "count", "call"],
                         right=("workspace", "bytes", "count"))  # fmt: skip
    table.add_row("477.5 KiB", "488,960", "1", LONG_CALL)
    table.add_row("4.5 MiB", "4,732,160", "100", "rocsolver_dgetrf:m=1024,n=1024")
    output.print_table(table)
    lines = _ANSI.sub("", files["stdout"].getvalue()).splitlines()
    assert all(len(line) <= 80 or len(line.split()) == 1 for line in lines), lines
    assert lines.index(LONG_CALL) == lines.index(next(ln for ln in lines if "488,960" in ln)) + 1
    under = lines[lines.index(next(ln for ln in lines if "4,732,160" in ln)) + 1]
    assert under == "    rocsolver_dgetrf:m=1024,n=1024"
    assert "call" not in lines[1] and "workspace" in lines[1]


def test_a_fetch_says_each_step_once_in_a_line_when_piped(monkeypatch: pytest.MonkeyPatch) -> None:
    """Piped, a fetch's wait is its steps, one line each; other work stays silent there."""
    files = _capture(monkeypatch, terminal=False, width=80)
    with output.progress("fetching PyTorch 2.11", steps_when_piped=True) as report:
        report(0, None, "downloading PyTorch 2.11.0 (pip)")
        report(5, 10, "downloading PyTorch 2.11.0 (pip)")
        report(0, None, "keeping libc10.so, libc10_cuda.so and the headers")
    with output.progress("replaying") as report:
        report(1, 2, "pool")
    assert files["stderr"].getvalue().splitlines() == [
        "fetching PyTorch 2.11: downloading PyTorch 2.11.0 (pip)",
        "fetching PyTorch 2.11: keeping libc10.so, libc10_cuda.so and the headers",
    ]


def test_errors_are_one_line_whatever_the_width(monkeypatch: pytest.MonkeyPatch) -> None:
    files = _capture(monkeypatch, terminal=True, width=20)
    output.error("a long message that is much wider than twenty columns\nand a second line")
    assert files["stderr"].getvalue().count("\n") == 1


def test_floods_are_summarised(monkeypatch: pytest.MonkeyPatch) -> None:
    files = _capture(monkeypatch, terminal=False, width=80)
    output.summarised_errors([f"call {i} failed" for i in range(168)])
    lines = files["stderr"].getvalue().splitlines()
    assert lines[:5] == [f"Error: call {i} failed" for i in range(5)]
    assert lines[5:] == ["Error: 163 more calls failed (--json lists every one)"]


# -- progress ---------------------------------------------------------------------------------


@pytest.mark.parametrize("width", [60, 80])
def test_progress_is_one_line_in_iec_units_and_pulses_before_progress(width: int) -> None:
    bar = output.progress_display("loading", transfer=True)
    console = Console(file=io.StringIO(), width=width, force_terminal=True, color_system=None)
    task = bar.add_task("loading serve-2026-11-21-rank0.csv.gz", total=None)

    def shown() -> list[str]:
        with console.capture() as capture:
            console.print(bar.make_tasks_table(bar.tasks))
        return capture.get().rstrip("\n").splitlines()

    before = shown()
    assert len(before) == 1 and "0%" not in before[0]
    bar.update(task, completed=3 << 30, total=10 << 30)
    (after,) = shown()
    assert "3.0 GiB/10.0 GiB" in after and "30%" in after and "GB" not in after


def test_help_pages_go_through_the_choke_point(monkeypatch: pytest.MonkeyPatch) -> None:
    from hipmem.cli import main

    shown: list[str] = []
    monkeypatch.setattr(output, "block", lambda text, err=False: shown.append(text))
    assert main._run(["size", "-h"]) == 0
    assert len(shown) == 1 and shown[0].startswith("Usage: hipmem size")
