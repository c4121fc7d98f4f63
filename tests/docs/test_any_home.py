"""The README's test command passes for every user it addresses, whatever their HOME and cache
folder (issue 49): the documentation's examples that print the cache's path run as
tests/docs/test_docs_examples.py runs them (on a terminal of 80 columns, the figures compared
with the page) and as tests/cli/test_fits_80_columns.py does (piped, at 80 columns), with a
HOME of 100 characters, and with XDG_CACHE_HOME in another folder of 100 characters.

The cache there is a symbolic link to this machine's, so that nothing is fetched: what is
tested is what a long cache folder does to the output. The line a download prints, naming the
same folder, is tested by
tests/cli/test_output.py::test_a_status_line_puts_a_path_too_long_for_it_on_a_line_of_its_own.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.cli.test_fits_80_columns import _run as run_piped_at_80
from tests.docs.test_docs_examples import BIN, _env, _run_shell, _workdir
from tests.docs_examples import PAGES_CACHE, Example, all_examples, cache_folder

LONG = 100  # characters of the HOME (and of the XDG_CACHE_HOME) tried

# The console examples that run `hipmem torch fetch` and show the cache folder in its output.
PRINTS_THE_CACHE = [
    example
    for example in all_examples()
    if example.no_run_reason is None
    and example.language == "console"
    and any(command.text.startswith("hipmem torch fetch") for command in example.commands())
    and any(PAGES_CACHE in line for line in example.body)
]


def _long_folder(parent: Path, name: str) -> Path:
    """A new folder under `parent` whose path is LONG characters."""
    folder = parent / (name + "h" * (LONG - len(str(parent)) - 1 - len(name)))
    folder.mkdir(parents=True)
    assert len(str(folder)) == LONG
    return folder


def _another_user(tmp_path: Path, cache_in: str) -> tuple[dict[str, str | None], Path]:
    """The environment of a user whose HOME is LONG characters and whose cache is under it
    (`cache_in` "home") or in XDG_CACHE_HOME, another folder of LONG characters ("xdg"); and
    that user's cache folder, a link to this machine's cache."""
    ours = Path(cache_folder(os.environ))
    home = _long_folder(tmp_path / "home", "u")
    if cache_in == "home":
        env: dict[str, str | None] = {"HOME": str(home), "XDG_CACHE_HOME": None}
        theirs = home / ".cache" / "hipmem"
    else:
        xdg = _long_folder(tmp_path / "xdg", "c")
        env = {"HOME": str(home), "XDG_CACHE_HOME": str(xdg)}
        theirs = xdg / "hipmem"
    env["HIPMEM_CACHE_DIR"] = None
    theirs.parent.mkdir(parents=True, exist_ok=True)
    theirs.symlink_to(ours, target_is_directory=True)
    assert cache_folder(_env(env)) == str(theirs)
    return env, theirs


def test_the_examples_that_print_the_cache_are_found() -> None:
    # README.md's replay through PyTorch's allocator, docs/pytorch-virtual-gpu.md's fetches
    assert len(PRINTS_THE_CACHE) >= 2


# Each example runs once, the users taking turns (README.md's under the long HOME,
# docs/pytorch-virtual-gpu.md's with XDG_CACHE_HOME elsewhere): both kinds of user are tried,
# and each example's lines are the same kind ("... ready in FOLDER"), so running every
# example for both (twice the time, 4 of the suite's slowest runs) would try nothing more.
PAIRED = [(example, ("home", "xdg")[i % 2]) for i, example in enumerate(PRINTS_THE_CACHE)]


@pytest.mark.slow
@pytest.mark.parametrize(("example", "cache_in"), PAIRED, ids=[f"{e.name}-{c}" for e, c in PAIRED])
def test_an_example_runs_as_the_page_says_for_a_user_with_a_long_home(
    example: Example,
    cache_in: str,
    tmp_path: Path,
    torch_allocators: dict[str, object],
) -> None:
    env, theirs = _another_user(tmp_path, cache_in)
    where = subprocess.run(
        [str(BIN / "hipmem"), "torch", "where", "--json"],
        capture_output=True, text=True, env=_env(env), timeout=120,
    )  # fmt: skip
    assert where.returncode == 0, where.stderr  # the user's cache folder is the one used
    assert json.loads(where.stdout)["allocator"]["location"].startswith(str(theirs))
    (tmp_path / "work").mkdir()
    workdir = _workdir(tmp_path / "work")
    problems = _run_shell(example, workdir, env)  # on a terminal: width and figures
    prelude: list[str] = []
    for command in example.commands():
        if command.only_assigns:
            prelude.append(command.text)
        else:
            problems += run_piped_at_80(command, prelude, workdir, env)
    assert not problems, f"{example.name} with HOME={env['HOME']}:\n" + "\n".join(problems)
