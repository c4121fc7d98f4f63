"""A kept answer is trusted only once its check holds (issue 48): an answer edited, moved under
another command line's name or damaged is said in one line naming its file, dropped, answered
again and kept again without that line; `hipmem cache verify` checks every kept answer. Real
`hipmem` processes (the cache of answers answers before typer is imported) on caches of their
own; the property test runs the check itself on generated damage."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hipmem._core import answer_cache
from tests.cli_run import hipmem_process
from tests.conftest import REPO
from tests.sizing.rocm.test_rocm_fetch import _mirror_cache

CALL = "rocsolver_dgetrf:m=4096,n=4096"
SIZE = ("size", "--rocm", "7.2", "--device", "MI300X", CALL)
RECOMMEND = ("recommend", "--rocm", "7.2", "--device", "MI300X", CALL)


def hipmem(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return hipmem_process(*args, timeout=900, cwd=REPO, **env)


@pytest.fixture(scope="module")
def cache(rocm72: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A cache of its own whose HIP stand-in is built (a query that builds it is not kept)."""
    made = _mirror_cache(tmp_path_factory.mktemp("answers"), "7.2")
    built = hipmem(*SIZE, HIPMEM_CACHE_DIR=str(made))
    assert built.returncode == 0, built.stderr
    yield made


def _kept(cache: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """The query answered and kept: (its answer, the file it is kept in)."""
    shutil.rmtree(cache / "answers", ignore_errors=True)
    first = hipmem(*args, HIPMEM_CACHE_DIR=str(cache))
    assert first.returncode == 0, first.stderr
    (kept,) = (cache / "answers").glob("*.json")
    return first, kept


def _warning(path: Path, why: str) -> str:
    return f"Warning: the kept answer {path} {why}; dropped it, answering again"


@pytest.mark.parametrize("args", [SIZE, RECOMMEND], ids=["size", "recommend"])
def test_an_edited_answer_is_said_dropped_and_answered_again(
    cache: Path, args: tuple[str, ...]
) -> None:
    first, kept = _kept(cache, *args)
    assert "17,351,936" in first.stdout or "17351936" in first.stdout
    entry = json.loads(kept.read_text())
    # As a hand edit would: the number changed, everything else (the digest too) left alone.
    entry["stdout"] = re.sub(r"17,?351,?936", "1234", entry["stdout"])
    kept.write_text(json.dumps(entry))
    again = hipmem(*args, HIPMEM_CACHE_DIR=str(cache))
    assert again.returncode == first.returncode
    assert again.stdout == first.stdout  # the right number, computed again
    said = again.stderr.splitlines()
    assert said[0] == _warning(kept, "does not match its digest: edited or damaged")
    assert said[1:] == first.stderr.splitlines()
    # Kept again, without the warning, and answered from there.
    assert answer_cache.read_entry(kept)["stderr"] == first.stderr
    third = hipmem(*args, HIPMEM_CACHE_DIR=str(cache))
    assert (third.stdout, third.stderr) == (first.stdout, first.stderr)


def test_an_answer_moved_under_another_command_lines_name_is_caught(cache: Path) -> None:
    _, kept_table = _kept(cache, *SIZE)
    as_json = hipmem(*SIZE, "--json", HIPMEM_CACHE_DIR=str(cache))
    assert as_json.returncode == 0, as_json.stderr
    (kept_json,) = set((cache / "answers").glob("*.json")) - {kept_table}
    shutil.copy(kept_table, kept_json)  # the table's answer, whole, under --json's name
    again = hipmem(*SIZE, "--json", HIPMEM_CACHE_DIR=str(cache))
    assert again.returncode == 0
    assert again.stdout == as_json.stdout and json.loads(again.stdout)
    assert again.stderr.splitlines()[0] == _warning(
        kept_json, "is kept under another command line's key: moved or copied"
    )
    assert (cache / "answers" / kept_json.name).is_file()  # kept again, its own this time
    assert answer_cache.read_entry(kept_json)["stdout"] == as_json.stdout


def test_verify_names_each_damaged_answer_and_the_repair(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    keys = [f"{n:064x}" for n in range(4)]
    for key in keys:
        answer_cache.store(cache, key, "state", f"answer {key[-1]}\n", "", 0)
    env = {"HIPMEM_CACHE_DIR": str(cache)}
    intact = hipmem("cache", "verify", **env)
    assert intact.returncode == 0 and intact.stdout.startswith("ok "), intact.stderr
    answers = cache / "answers"
    edited = answers / f"{keys[1]}.json"
    edited.write_text(edited.read_text().replace("answer 1", "answer 9"))
    shutil.copy(answers / f"{keys[0]}.json", answers / f"{keys[2]}.json")  # moved
    (answers / f"{keys[3]}.json").write_text('{"format": 2, "stdout": ')  # cut short
    bad = hipmem("cache", "verify", **env)
    assert bad.returncode == 1
    assert bad.stderr.strip().splitlines()[-1] == (
        f"FAIL kept answers in {answers} is damaged (3 files, first {keys[1]}.json: does not "
        "match its digest: edited or damaged); repair: hipmem cache remove --kind answers"
    )
    listed = json.loads(hipmem("cache", "verify", "--json", **env).stdout)["damaged"]
    assert [(d["kind"], d["state"], d["files"]) for d in listed] == [("answers", "damaged", 3)]


def _one_change(text: str, data: st.DataObject) -> str:
    """`text` with one character replaced, deleted or inserted, or cut short."""
    where = data.draw(st.integers(0, len(text) - 1))
    how = data.draw(st.sampled_from(["replace", "delete", "insert", "cut"]))
    char = data.draw(st.characters(codec="utf-8"))
    if how == "replace":
        return text[:where] + char + text[where + 1 :]
    if how == "delete":
        return text[:where] + text[where + 1 :]
    if how == "insert":
        return text[:where] + char + text[where:]
    return text[:where]


@settings(max_examples=300, deadline=None)
@given(data=st.data(), code=st.sampled_from([0, 1]), stdout=st.text(max_size=40))
def test_any_one_change_to_a_kept_answer_is_caught_or_changes_nothing(
    data: st.DataObject, code: int, stdout: str
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        cache, key = Path(folder), "a" * 64
        answer_cache.store(cache, key, "state", stdout, "note\n", code)
        path = answer_cache.answers_dir(cache) / f"{key}.json"
        whole = answer_cache.read_entry(path)
        path.write_text(_one_change(path.read_text(), data))
        try:
            read = answer_cache.read_entry(path)
        except answer_cache.DamagedAnswer as damaged:
            assert damaged.path == path and damaged.why
        else:  # JSON that reads the same (a space for a space): the same answer
            assert read == whole


def test_an_answer_computed_from_other_libraries_is_not_given(tmp_path: Path) -> None:
    # Its key names the state it was computed from; one that says another state (a digest
    # recomputed by hand) is not given for this one.
    key = "b" * 64
    answer_cache.store(tmp_path, key, "libraries then", "1,234 bytes\n", "", 0)
    assert answer_cache.lookup(tmp_path, key, "libraries then") == ("1,234 bytes\n", "", 0)
    with pytest.raises(answer_cache.DamagedAnswer, match="computed from other libraries"):
        answer_cache.lookup(tmp_path, key, "libraries now")
    assert answer_cache.lookup(tmp_path, "c" * 64, "libraries now") is None  # none kept
