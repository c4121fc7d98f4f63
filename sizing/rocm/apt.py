"""Debian's archive through a private apt configuration (the machine's own apt state is
never touched): which files the pinned packages are today, and downloading them, resumable
and verified against the SHA256 of the signed archive index. ROCm's fetch (`fetch.py`) and
hipBLASLt's (`sizing/hipblaslt/fetch.py`) both go through it."""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hipmem._core.atomic_write import naming_write_errors, write_text_atomically

from ..errors import FetchError, PinnedVersionGone
from .releases import BASE_SUITE, Release

DEFAULT_MIRROR = "http://deb.debian.org/debian"
DEBIAN_KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
SUITES = ("sid", "experimental")


@dataclass(frozen=True)
class PackageFile:
    """One .deb as apt resolved it."""

    name: str
    url: str
    filename: str
    size_bytes: int
    sha256: str

    @property
    def version(self) -> str:
        # Debian file names escape the epoch colon as %3a.
        return self.filename.split("_")[1].replace("%3a", ":")


def apt_options(apt_dir: Path) -> list[str]:
    return [
        f"-oDir::Etc::SourceList={apt_dir / 'sources.list'}",
        "-oDir::Etc::SourceParts=/dev/null",
        f"-oDir::State::Lists={apt_dir / 'lists'}",
        f"-oDir::Cache={apt_dir / 'cache'}",
        "-oAPT::Architecture=amd64",
        "-oAPT::Architectures=amd64",
        "-oAcquire::Languages=none",
        "-oDebug::NoLocking=1",
    ]


def resolve_packages(apt_dir: Path, release: Release, mirror: str) -> list[PackageFile]:
    """Ask apt, in a private configuration, which files the pinned packages are today."""
    if shutil.which("apt-get") is None:
        raise FetchError(
            "hipmem rocm fetch needs apt-get (Debian or Ubuntu); elsewhere install ROCm "
            "and point HIPMEM_ROCM_LIBDIR at its lib directory"
        )
    for sub in ("lists/partial", "cache/archives/partial"):
        (apt_dir / sub).mkdir(parents=True, exist_ok=True)
    # The archive index is checked against Debian's signing key when the keyring is here.
    trust = f"signed-by={DEBIAN_KEYRING}" if DEBIAN_KEYRING.is_file() else "trusted=yes"
    sources = "".join(f"deb [{trust}] {mirror} {suite} main\n" for suite in SUITES)
    write_text_atomically(apt_dir / "sources.list", sources)
    options = apt_options(apt_dir)
    update_index(apt_dir, options, sources)
    offered = offered_versions(options, [name for name, _ in release.pinned])
    check_pins(release, offered)
    wanted = [f"{name}={version}" for name, version in release.pinned]
    wanted += [f"{name}/{BASE_SUITE}" for name in release.packages if name not in release.pins]
    listing = run_tool(["apt-get", *options, "--print-uris", "download", *wanted], "apt-get")
    return parse_print_uris(listing, release.packages)


_INDEX_FRESH_S = 600  # one `hipmem rocm fetch --rocm 6.4,7.2` updates the index once


def update_index(apt_dir: Path, options: list[str], sources: str) -> None:
    """`apt-get update`, unless this configuration's index was updated minutes ago."""
    marker = apt_dir / "updated"
    with contextlib.suppress(OSError):
        fresh = time.time() - marker.stat().st_mtime < _INDEX_FRESH_S
        if fresh and marker.read_text() == sources:
            return
    run_tool(["apt-get", *options, "update"], "apt-get update")
    write_text_atomically(marker, sources)


def offered_versions(options: list[str], names: list[str]) -> dict[str, list[str]]:
    """Package -> the versions the archive offers now (`apt-cache madison`)."""
    listing = run_tool(["apt-cache", *options, "madison", *names], "apt-cache madison")
    offered: dict[str, list[str]] = {name: [] for name in names}
    for line in listing.splitlines():
        parts = [part.strip() for part in line.split("|")]
        if len(parts) >= 3 and parts[0] in offered:
            suite = parts[2].split()[-3].rsplit("/", 1)[0] if len(parts[2].split()) >= 3 else ""
            offered[parts[0]].append(f"{parts[1]} ({suite})" if suite else parts[1])
    return offered


def check_pins(release: Release, offered: dict[str, list[str]]) -> None:
    """A pinned version that left the archive is one line naming what is there now."""
    for name, version in release.pinned:
        versions = offered.get(name, [])
        if not any(entry.split(" ")[0] == version for entry in versions):
            now = ", ".join(versions) if versions else "nothing"
            raise PinnedVersionGone(
                f"ROCm {release.name}: Debian's archive no longer offers {name} {version} "
                f"(it offers {now}); hipmem pins that version and fetches no other"
            )


def parse_print_uris(listing: str, packages: tuple[str, ...]) -> list[PackageFile]:
    """Lines look like `'URL' FILENAME SIZE SHA256:HEX`."""
    files = []
    for line in listing.splitlines():
        parts = line.split()
        if len(parts) != 4 or not parts[0].startswith("'") or not parts[3].startswith("SHA256:"):
            continue
        filename = parts[1]
        files.append(
            PackageFile(
                name=filename.split("_")[0],
                url=parts[0].strip("'"),
                filename=filename,
                size_bytes=int(parts[2]),
                sha256=parts[3].removeprefix("SHA256:"),
            )
        )
    missing = set(packages) - {file.name for file in files}
    if missing:
        raise FetchError(f"the archive has no package {', '.join(sorted(missing))}")
    return sorted(files, key=lambda file: packages.index(file.name))


def run_tool(command: list[str], what: str) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as err:
        raise FetchError(f"{what} could not start: {err}") from err
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise FetchError(f"{what} failed (exit {done.returncode}): {last}")
    return done.stdout


_CHUNK_BYTES = 1 << 20


def download(file: PackageFile, target: Path, on_bytes: Callable[[int], None]) -> None:
    """Resume a `.part` file with an HTTP range request; verify the hash before renaming.
    A complete file left by an interrupted fetch is checked against the hash again."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_file():
        if target.stat().st_size == file.size_bytes and sha256(target) == file.sha256:
            return
        target.unlink()  # damaged since it was verified: fetch it again
    partial = target.with_name(target.name + ".part")
    have = partial.stat().st_size if partial.exists() else 0
    if have >= file.size_bytes:
        partial.unlink()
        have = 0
    # Imported here: urllib.request (http.client, email, ...) takes about 15 ms to import,
    # which every answer from the cache would pay; only a download needs it.
    import urllib.request

    request = urllib.request.Request(file.url, headers={"Range": f"bytes={have}-"} if have else {})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            if have and response.status != 206:
                have = 0  # the server ignored the range: start over
            # A write that fails (a full disk) is said as such, not as a failed download.
            with naming_write_errors(partial), partial.open("ab" if have else "wb") as out:
                received = have
                while chunk := response.read(_CHUNK_BYTES):
                    out.write(chunk)
                    received += len(chunk)
                    on_bytes(received)
    except OSError as err:
        raise FetchError(f"downloading {file.url} failed: {err} (run again to resume)") from err
    if sha256(partial) != file.sha256:
        partial.unlink()
        raise FetchError(f"{file.filename} does not match the archive's SHA256; run again")
    partial.replace(target)


def sha256(path: Path, skip: list[int] | None = None) -> str:
    """SHA256 of the file, leaving out the byte range `skip` ([start, end]) when given."""
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(_CHUNK_BYTES):
            if skip and stream.tell() > skip[0]:
                digest.update(chunk[: len(chunk) - (stream.tell() - skip[0])])
                stream.seek(skip[1])
                skip = None
            else:
                digest.update(chunk)
    return digest.hexdigest()
