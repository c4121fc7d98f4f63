"""`hipmem cache` lists, verifies and removes what the cache holds, and what it removed is
fetched again by the next command that needs it; repeated queries are answered from the cache
of answers, whose key changes with anything the answer depends on. Real `hipmem` subprocesses
on caches of their own (HIPMEM_CACHE_DIR)."""

from __future__ import annotations

import fcntl
import json
import subprocess
import sys
from pathlib import Path

from hipmem._core import answer_cache
from hipmem.sizing.rocm.releases import find_release
from tests.cli_run import hipmem_process
from tests.conftest import cli_env
from tests.sizing.rocm.test_fetch_on_demand import sizes
from tests.sizing.rocm.test_rocm_fetch import _mirror_cache
from tests.terminal import unwrapped

REPO = Path(__file__).resolve().parents[2]
CALLS = ("rocsolver_dgetrf:m=1024,n=1024", "rocsolver_dgetrs:n=1024,nrhs=1")
GEMM = "gemm_ex:m=64,n=64,k=4096,a_type=f16_r"  # reads the arch's gemm data


def hipmem(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return hipmem_process(*args, timeout=900, cwd=REPO, **env)


def test_list_verify_and_a_damaged_file_named_with_its_repair(rocm72: Path, tmp_path: Path) -> None:
    cache = _mirror_cache(tmp_path, "7.2")
    env = {"HIPMEM_CACHE_DIR": str(cache)}
    listed = hipmem("cache", "list", "--json", **env)
    assert listed.returncode == 0, listed.stderr
    entries = {(e["kind"], e["name"]): e for e in json.loads(listed.stdout)["entries"]}
    assert ("rocm", "7.2") in entries and entries[("rocm", "7.2")]["archs"]
    for columns in (60, 80):  # every column keeps its header (the archs may go under a row)
        text = hipmem("cache", "list", COLUMNS=str(columns), **env).stdout.splitlines()
        assert text[0].split()[:5] == ["what", "disk", "fetched", "(UTC)", "by"], text
        assert all(line.strip() for line in text)  # no blank line under a row without archs
        assert all(len(line) <= columns or len(line.split()) == 1 for line in text), text
    ok = hipmem("cache", "verify", **env)
    assert ok.returncode == 0 and ok.stdout.startswith("ok "), ok.stderr
    library = cache / "rocm/7.2/root/usr/lib/x86_64-linux-gnu/libfmt.so.11.1.1"
    library.unlink()
    library.write_bytes(b"damaged")
    bad = hipmem("cache", "verify", **env)
    assert bad.returncode == 1
    assert bad.stderr.strip().splitlines()[-1] == (
        f"FAIL ROCm 7.2 in {cache / 'rocm' / '7.2'} is damaged (file "
        "usr/lib/x86_64-linux-gnu/libfmt.so.11.1.1); repair: hipmem rocm fetch --rocm 7.2 "
        "--no-hipblaslt"
    )


def test_an_arch_removed_is_fetched_again_by_the_next_query(rocm72: Path, tmp_path: Path) -> None:
    cache = _mirror_cache(tmp_path, "7.2")
    env = {"HIPMEM_CACHE_DIR": str(cache)}
    removed = hipmem("cache", "remove", "--rocm", "7.2", "--arch", "gfx90a", **env)
    assert removed.returncode == 0, removed.stderr
    assert removed.stdout.startswith("removed ROCm 7.2's data for gfx90a (")
    manifest = json.loads((cache / "rocm/7.2/manifest.json").read_text())
    assert "gfx90a" not in manifest["archs"]
    assert not [path for path in manifest["files"] if path.endswith("_gfx90a.dat")]
    sized = hipmem("size", "--rocm", "7.2", "-d", "MI210", "--json", GEMM, **env)
    assert sized.returncode == 0, sized.stderr
    line = unwrapped(sized.stderr)  # the one message, wrapped at the width
    assert line.startswith("the cached ROCm 7.2 has no gemm data for gfx90a: downloading ")
    assert "(ROCm 7.2: 1 Debian package; gemm data for " in line  # the mirror's other archs too
    assert sizes(sized.stdout) == sizes(
        hipmem("size", "--rocm", "7.2", "-d", "MI210", "--json", GEMM).stdout
    )  # as the full cache answers
    manifest = json.loads((cache / "rocm/7.2/manifest.json").read_text())
    assert "gfx90a" in manifest["archs"] and manifest["fetched_by"] == "fetched on first use"
    # Where the libraries came from, said truthfully: downloaded by that query, from the cache
    # for the next (how it first came is `cache list`'s `by` column).
    assert json.loads(sized.stdout)["library"]["place"] == "offline cache (downloaded now)"
    text = hipmem("size", "--rocm", "7.2", "-d", "MI210", GEMM, **env)
    said = unwrapped(text.stdout)  # prose wraps at 80 columns; the words are what is said
    assert "from offline cache" in said and "downloaded now" not in said


def test_remove_all_empties_the_cache_and_needs_something_named(tmp_path: Path) -> None:
    env = {"HIPMEM_CACHE_DIR": str(tmp_path / "cache")}
    (tmp_path / "cache" / "answers").mkdir(parents=True)
    (tmp_path / "cache" / "answers" / "x.json").write_text("{}")
    nothing = hipmem("cache", "remove", **env)
    assert nothing.returncode == 2
    assert "say what to remove" in nothing.stderr
    done = hipmem("cache", "remove", "--all", **env)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "cache" / "answers").exists()
    listed = hipmem("cache", "list", **env).stdout
    assert " ".join(listed.split()) == f"the cache ({tmp_path / 'cache'}) is empty"


def test_a_repeated_size_is_answered_from_the_cache_of_answers(
    rocm72: Path, tmp_path: Path
) -> None:
    cache = _mirror_cache(tmp_path, "7.2")
    env = {"HIPMEM_CACHE_DIR": str(cache)}
    building = hipmem("size", "--rocm", "7.2", "-d", "MI300X", *CALLS, **env)
    assert building.returncode == 0, building.stderr
    assert not (cache / "answers").exists()  # it built the stand-in: not kept this time
    first = hipmem("size", "--rocm", "7.2", "-d", "MI300X", *CALLS, **env)
    assert first.stdout == building.stdout
    assert len(list((cache / "answers").glob("*.json"))) == 1
    again = hipmem("size", "--rocm", "7.2", "-d", "MI300X", *CALLS, **env)
    assert (again.stdout, again.stderr) == (first.stdout, first.stderr)
    # The second answer came from the kept one, without typer or rich: what a hit imports.
    probe = (
        "import sys; from hipmem.cli.main import _run; "
        f"code = _run(['size', '--rocm', '7.2', '-d', 'MI300X', *{list(CALLS)!r}]); "
        "print(sorted(m for m in ('typer', 'rich', 'numpy') if m in sys.modules), code, "
        "file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env=cli_env(**env), cwd=REPO, timeout=300)  # fmt: skip
    assert done.stderr.strip().splitlines()[-1] == "[] 0"
    assert done.stdout == first.stdout


def test_a_changed_key_misses(rocm72: Path, tmp_path: Path) -> None:
    cache = _mirror_cache(tmp_path, "7.2")
    argv = ["size", "--rocm", "7.2", "-d", "MI300X", *CALLS]
    env = {"PATH": "/usr/bin"}
    key = answer_cache.key_for(argv, cache, env)
    assert key is not None and answer_cache.key_for(argv, cache, env) == key
    assert answer_cache.key_for([*argv, "--json"], cache, env) != key
    assert answer_cache.key_for(argv, cache, {**env, "HIPMEM_ROCM": "6.4"}) != key
    # The libraries' recorded hashes: a manifest that records other bytes is another key.
    manifest = cache / "rocm" / "7.2" / "manifest.json"
    data = json.loads(manifest.read_text())
    first = next(iter(data["files"]))
    data["files"][first][1] = "0" * 64
    manifest.write_text(json.dumps(data))
    assert answer_cache.key_for(argv, cache, env) != key
    # The stand-in's build, and snapshots (never kept).
    shim = cache / "shim" / "k"
    shim.mkdir(parents=True)
    changed = answer_cache.key_for(argv, cache, env)
    (shim / "build.json").write_text("{}")
    assert answer_cache.key_for(argv, cache, env) != changed
    assert answer_cache.key_for(["check", "--from-snapshot", "x.pickle"], cache, env) is None
    assert answer_cache.key_for(["recommend", "--format", "github", *CALLS], cache, env) is None


def test_verify_names_each_release_whose_fetch_was_interrupted(
    rocm72: Path, tmp_path: Path
) -> None:
    # What a fetch killed midway leaves: a manifest written after each package it unpacked
    # and a download in debs/; a manifest cut short or overwritten; a folder with no manifest.
    cache = _mirror_cache(tmp_path, "7.2")
    manifest = cache / "rocm" / "7.2" / "manifest.json"
    data = json.loads(manifest.read_text())
    unpacked = list(data["packages"])[:3]
    data["packages"] = {name: data["packages"][name] for name in unpacked}
    data["files"] = {k: v for k, v in data["files"].items() if v[2] in unpacked}
    manifest.write_text(json.dumps(data))
    (cache / "rocm" / "7.2" / "debs").mkdir()
    (cache / "rocm" / "7.2" / "debs" / "libfmt11_11.1.1+ds1-2_amd64.deb").write_bytes(b"!<ar")
    (cache / "rocm" / "6.4" / "root").mkdir(parents=True)
    (cache / "rocm" / "6.4" / "manifest.json").write_text("garbage{")
    (cache / "hipblaslt" / "7.2.4" / "debs").mkdir(parents=True)
    release = find_release("7.2")
    missing = [name for name in release.packages if name not in unpacked]
    lines = {
        "6.4": f"FAIL ROCm 6.4 in {cache / 'rocm' / '6.4'} is incomplete (manifest.json "
        "unreadable: its fetch was interrupted); repair: hipmem rocm fetch --rocm 6.4 "
        "--no-hipblaslt",
        "7.2": f"FAIL ROCm 7.2 in {cache / 'rocm' / '7.2'} is incomplete ({len(missing)} of "
        f"{len(release.packages)} packages missing, first {missing[0]}, an unfinished download "
        "in debs/: its fetch was interrupted); repair: hipmem rocm fetch --rocm 7.2 "
        "--no-hipblaslt",
        "7.2.4": f"FAIL hipBLASLt 7.2.4 in {cache / 'hipblaslt' / '7.2.4'} is incomplete (no "
        "manifest.json, an unfinished download in debs/: its fetch was interrupted); repair: "
        "hipmem rocm fetch --rocm 7.2",
    }
    env = {"HIPMEM_CACHE_DIR": str(cache)}
    done = hipmem("cache", "verify", **env)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == list(lines.values())
    listed = json.loads(hipmem("cache", "list", "--json", **env).stdout)["entries"]
    assert {(e["kind"], e["name"]) for e in listed} >= {
        ("rocm", "6.4"),
        ("rocm", "7.2"),
        ("hipblaslt", "7.2.4"),
    }
    # While a fetch holds the lock, an incomplete tree may be one being fetched: said so.
    with (cache / "rocm" / "fetch.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        running = hipmem("cache", "verify", **env)
    assert running.returncode == 1
    assert running.stderr.strip().splitlines()[0] == lines["6.4"].replace(
        "its fetch was interrupted", "a fetch is under way now; verify again once it is done"
    )
