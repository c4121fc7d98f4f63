"""A fetched tree checked against its manifest by stamps (`sizing.rocm.tree_check`): a file
whose stamp holds is not read again, any write to a file (its size and modification time kept)
makes it read again and found, a stamps file edited or from other bytes only costs a re-hash,
and a manifest of any content is read as one or refused, never an error. Small trees made
here, with manifests as a fetch writes them; the hashing is counted, not timed."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hipmem._core import answer_cache
from hipmem.sizing.rocm import fetch as rocm_fetch
from hipmem.sizing.rocm import tree_check


def _tree(base: Path, contents: dict[str, bytes]) -> tuple[Path, dict[str, list[Any]]]:
    """Files under `base`/root and their manifest entries ([size, sha256, package])."""
    root = base / "root"
    files: dict[str, list[Any]] = {}
    for relative, data in contents.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(data)
        files[relative] = [len(data), hashlib.sha256(data).hexdigest(), "pkg"]
    return root, files


def _settled(root: Path) -> None:
    """Wait until every file's last change is older than the settling time, as files fetched
    before a query are (a freshly written file is hashed again rather than stamped)."""
    newest = max(p.stat().st_ctime_ns for p in root.rglob("*") if p.is_file())
    while time.time_ns() - newest < tree_check.SETTLED_NS:
        time.sleep(0.1)


@pytest.fixture
def hashed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The files tree_check reads to hash, in order."""
    seen: list[str] = []
    real = tree_check.sha256

    def counted(path: Path, skip: list[int] | None = None) -> str:
        seen.append(path.name)
        return real(path, skip)

    monkeypatch.setattr(tree_check, "sha256", counted)
    return seen


def test_stamps_spare_reading_and_any_write_is_found(tmp_path: Path, hashed: list[str]) -> None:
    root, files = _tree(tmp_path, {"lib/liba.so": b"\x7fELF" + bytes(5000), "lib/b.dat": b"b" * 99})
    _settled(root)
    assert tree_check.tree_damage(root, files, hashes=True) == []
    assert sorted(hashed) == ["b.dat", "liba.so"]
    assert tree_check.tree_damage(root, files, hashes=True) == []
    assert len(hashed) == 2  # both stamps hold: nothing read again
    library = root / "lib" / "liba.so"
    before = library.stat()
    with library.open("r+b") as stream:  # bytes flipped in place, size and mtime kept
        stream.seek(100)
        stream.write(b"\xff\xff")
    os.utime(library, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (library.stat().st_size, library.stat().st_mtime_ns) == (5004, before.st_mtime_ns)
    assert tree_check.tree_damage(root, files, hashes=True) == ["lib/liba.so"]
    assert hashed[2:] == ["liba.so"]  # only the changed file is read
    # The bytes put back: whole again, read each time until it settles, then stamped.
    with library.open("r+b") as stream:
        stream.seek(100)
        stream.write(b"\0\0")
    assert tree_check.tree_damage(root, files, hashes=True) == []
    assert "lib/liba.so" not in tree_check.read_stamps(root)
    _settled(root)
    assert tree_check.tree_damage(root, files, hashes=True) == []
    assert "lib/liba.so" in tree_check.read_stamps(root)


def test_a_stamp_counts_only_for_the_manifests_hash_and_verify_reads_all(
    tmp_path: Path, hashed: list[str]
) -> None:
    root, files = _tree(tmp_path, {"a.so": b"a" * 10, "b.so": b"b" * 10})
    _settled(root)
    tree_check.tree_damage(root, files, hashes=True)
    assert len(hashed) == 2
    # A manifest that records other bytes for a.so (a stamp written for the old one).
    other = {**files, "a.so": [10, hashlib.sha256(b"c" * 10).hexdigest(), "pkg"]}
    assert tree_check.tree_damage(root, other, hashes=True) == ["a.so"]
    assert hashed[2:] == ["a.so"]
    # Stamps edited, cut short or replaced by a folder: a re-hash, never an error.
    stamps = root.parent / tree_check.VERIFIED_NAME
    for broken in ('{"a.so": [1, 2]}', "[1, 2", "{}" * 3):
        stamps.write_text(broken)
        assert tree_check.tree_damage(root, files, hashes=True) == []
    assert tree_check.tree_damage(root, files, hashes=True, rehash=True) == []
    assert hashed[-2:] == ["a.so", "b.so"]  # cache verify reads every file


def test_a_process_checks_a_release_once_and_again_after_a_repair(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hashed: list[str]
) -> None:
    root, files = _tree(tmp_path, {"a.so": b"a" * 10})
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"files": files}))
    tree_check.forget_checked()
    assert tree_check.checked_on_use(root, files, manifest) == []
    assert tree_check.checked_on_use(root, files, manifest) == []
    assert hashed == ["a.so"]  # unsettled, so not stamped: yet read once in this process
    manifest.unlink()
    manifest.write_text(json.dumps({"files": files}))  # a fetch's new manifest: another inode
    assert tree_check.checked_on_use(root, files, manifest) == []
    assert hashed == ["a.so", "a.so"]


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                  max_size=4),
    max_leaves=12,
)  # fmt: skip


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    entry=st.just([3, "ab" * 32, "pkg"]) | st.lists(_JSON, max_size=6) | _JSON,
    relative=st.sampled_from(
        ["lib/a.so", "../../etc/passwd", "/etc/passwd", "a/../../b", "", "a\0b", "\ud800.so"]
    ),
)
def test_a_manifest_of_any_content_is_read_as_one_or_refused(entry: Any, relative: str) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        manifest = Path(folder) / "manifest.json"
        payload = {"format": rocm_fetch.MANIFEST_FORMAT, "release": "7.2", "archs": [],
                   "packages": {}, "files": {relative: entry}}  # fmt: skip
        manifest.write_text(json.dumps(payload))
        found = rocm_fetch.read_manifest(manifest)
        if found is not None:  # sound: a size, a sha256, a package, inside the tree
            assert not relative.startswith("/") and ".." not in Path(relative).parts
            assert found.damaged_files(hashes=True) == [relative]  # no such file here
        # The cache of answers reads the same manifest for its key: never an error either.
        cache = Path(folder) / "cache"
        (cache / "rocm" / "7.2").mkdir(parents=True)
        manifest.replace(cache / "rocm" / "7.2" / "manifest.json")
        assert answer_cache.changeable_state(["size"], cache, {}) is not None
