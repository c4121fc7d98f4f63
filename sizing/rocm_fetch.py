"""Offline ROCm: fetch Debian's builds of rocBLAS and rocSOLVER into the user cache.

Size queries need the vendor libraries but no GPU. Debian ships rocBLAS/rocSOLVER as ordinary
packages, so this module resolves them by package name with apt (a private configuration:
the machine's own apt state is never touched), downloads them itself (resumable, verified
against the SHA256 from the signed archive index, with a progress callback), and unpacks only
what queries read: shared libraries, headers, and the gemm (Tensile) `.dat` metadata of the
archs asked for. GPU code objects (`.co`, `.hsaco`) are never unpacked.

Debian sid's builds need a newer glibc than older hosts have, so sid's own libc, libstdc++ and
dynamic loader are unpacked too; `sizing.worker_process` starts the query worker through that
loader. Everything is idempotent: a second fetch with the same archs does nothing.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import shutil
import subprocess
import tarfile
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hipmem.atomic_write import write_text_atomically
from hipmem.cache_root import cache_dir
from hipmem.progress import ProgressCallback, no_progress
from sizing.errors import FetchError

DEFAULT_SUITE = "sid"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
DEBIAN_KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")

# Runtime packages a size query loads, and the -dev packages whose headers the catalog and the
# virtual device are built from. libc6/libstdc++6/libgcc-s1 come from the same suite because
# the vendor builds need their newer symbol versions.
PACKAGES = (
    "librocblas4",
    "librocsolver0",
    "libroctx64-4",
    "libfmt11",
    "libc6",
    "libstdc++6",
    "libgcc-s1",
    "librocblas-dev",
    "librocsolver-dev",
    "libamdhip64-dev",
)

# Archs whose gemm metadata Debian ships (see `hipmem rocm fetch --arch`).
SHIPPED_ARCHS = (
    "gfx803",
    "gfx900",
    "gfx906",
    "gfx908",
    "gfx90a",
    "gfx1010",
    "gfx1030",
    "gfx1100",
    "gfx1101",
    "gfx1102",
)

LIB_SUBDIR = "usr/lib/x86_64-linux-gnu"
MANIFEST_NAME = "manifest.json"


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
        return self.filename.split("_")[1]


@dataclass
class OfflineRocm:
    """What a completed fetch left in the cache."""

    root: Path
    suite: str
    archs: list[str]
    packages: dict[str, str] = field(default_factory=dict)  # name -> version

    @property
    def lib_dir(self) -> Path:
        return self.root / LIB_SUBDIR

    @property
    def include_dir(self) -> Path:
        return self.root / "usr" / "include"

    @property
    def loader(self) -> Path:
        return self.lib_dir / "ld-linux-x86-64.so.2"

    @property
    def tensile_dir(self) -> Path | None:
        found = sorted(self.lib_dir.glob("rocblas/*/library"))
        return found[-1] if found else None


def offline_dir(suite: str = DEFAULT_SUITE) -> Path:
    return cache_dir() / "rocm" / f"debian-{suite}"


def load_offline(suite: str = DEFAULT_SUITE) -> OfflineRocm | None:
    """The cached libraries of a completed fetch, or None when there is none."""
    manifest = offline_dir(suite) / MANIFEST_NAME
    if not manifest.is_file():
        return None
    data = json.loads(manifest.read_text())
    found = OfflineRocm(
        root=Path(data["root"]),
        suite=data["suite"],
        archs=data["archs"],
        packages=data["packages"],
    )
    return found if found.loader.is_file() else None


def fetch(
    archs: Iterable[str] = SHIPPED_ARCHS,
    suite: str = DEFAULT_SUITE,
    mirror: str = DEFAULT_MIRROR,
    progress: ProgressCallback | None = None,
) -> OfflineRocm:
    """Download and unpack the libraries; returns the result. Safe to run again: a complete
    fetch that covers `archs` returns at once, an interrupted one resumes."""
    archs = sorted(set(archs))
    unknown = [arch for arch in archs if arch not in SHIPPED_ARCHS]
    if unknown:
        raise FetchError(
            f"Debian ships no gemm data for {', '.join(unknown)}; "
            f"choose from {', '.join(SHIPPED_ARCHS)}"
        )
    report: ProgressCallback = progress or no_progress
    done = load_offline(suite)
    if done is not None and set(archs) <= set(done.archs):
        return done  # already complete: no network needed
    if done is not None:
        archs = sorted(set(archs) | set(done.archs))  # adding archs keeps the ones there
    base = offline_dir(suite)
    files = resolve_packages(base / "apt", suite, mirror)
    debs = download_all(files, base / "debs", report)
    root = base / "root"
    for package, deb in zip(files, debs, strict=True):
        unpack(deb, root, _wanted_members(package.name, archs), report)
    result = OfflineRocm(
        root=root,
        suite=suite,
        archs=archs,
        packages={package.name: package.version for package in files},
    )
    manifest = asdict(result) | {"root": str(root)}
    write_text_atomically(base / MANIFEST_NAME, json.dumps(manifest, indent=2))
    return result


# ---- resolving package names to files ------------------------------------------------------


def _apt_options(apt_dir: Path) -> list[str]:
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


def resolve_packages(apt_dir: Path, suite: str, mirror: str) -> list[PackageFile]:
    """Ask apt, in a private configuration, which files the package names are today."""
    if shutil.which("apt-get") is None:
        raise FetchError(
            "hipmem rocm fetch needs apt-get (Debian or Ubuntu); elsewhere install ROCm "
            "and point HIPMEM_ROCM_LIBDIR at its lib directory"
        )
    for sub in ("lists/partial", "cache/archives/partial"):
        (apt_dir / sub).mkdir(parents=True, exist_ok=True)
    # The archive index is checked against Debian's signing key when the keyring is here.
    trust = f"signed-by={DEBIAN_KEYRING}" if DEBIAN_KEYRING.is_file() else "trusted=yes"
    (apt_dir / "sources.list").write_text(f"deb [{trust}] {mirror} {suite} main\n")
    options = _apt_options(apt_dir)
    _run(["apt-get", *options, "update"], "apt-get update")
    listing = _run(["apt-get", *options, "--print-uris", "download", *PACKAGES], "apt-get")
    return _parse_print_uris(listing)


def _parse_print_uris(listing: str) -> list[PackageFile]:
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
    missing = set(PACKAGES) - {file.name for file in files}
    if missing:
        raise FetchError(f"the archive has no package {', '.join(sorted(missing))}")
    return sorted(files, key=lambda file: PACKAGES.index(file.name))


def _run(command: list[str], what: str) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as err:
        raise FetchError(f"{what} could not start: {err}") from err
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise FetchError(f"{what} failed (exit {done.returncode}): {last}")
    return done.stdout


# ---- downloading ---------------------------------------------------------------------------

_CHUNK_BYTES = 1 << 20


def download_all(files: list[PackageFile], deb_dir: Path, report: ProgressCallback) -> list[Path]:
    """Download every file not already complete; one progress total over all of them."""
    deb_dir.mkdir(parents=True, exist_ok=True)
    total_bytes = sum(file.size_bytes for file in files)
    done_bytes = 0
    paths = []
    for file in files:
        target = deb_dir / file.filename

        def on_bytes(received: int, base: int = done_bytes, name: str = file.name) -> None:
            report(base + received, total_bytes, name)

        _download(file, target, on_bytes)
        done_bytes += file.size_bytes
        report(done_bytes, total_bytes, file.name)
        paths.append(target)
    return paths


def _download(file: PackageFile, target: Path, on_bytes: Callable[[int], None]) -> None:
    """Resume a `.part` file with an HTTP range request; verify the hash before renaming."""
    if target.is_file() and target.stat().st_size == file.size_bytes:
        return  # verified when it was renamed into place
    partial = target.with_name(target.name + ".part")
    have = partial.stat().st_size if partial.exists() else 0
    if have >= file.size_bytes:
        partial.unlink()
        have = 0
    request = urllib.request.Request(file.url, headers={"Range": f"bytes={have}-"} if have else {})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            if have and response.status != 206:
                have = 0  # the server ignored the range: start over
            with partial.open("ab" if have else "wb") as out:
                received = have
                while chunk := response.read(_CHUNK_BYTES):
                    out.write(chunk)
                    received += len(chunk)
                    on_bytes(received)
    except OSError as err:
        raise FetchError(f"downloading {file.url} failed: {err} (run again to resume)") from err
    if _sha256(partial) != file.sha256:
        partial.unlink()
        raise FetchError(f"{file.filename} does not match the archive's SHA256; run again")
    partial.replace(target)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


# ---- unpacking -----------------------------------------------------------------------------


def _wanted_members(package: str, archs: list[str]) -> list[str]:
    """Glob patterns of the members a size query can read, per package."""
    if package.endswith("-dev"):
        return ["./usr/include/**"]
    patterns = ["./usr/lib/x86_64-linux-gnu/*.so*"]
    if package == "librocblas4":
        library = "./usr/lib/x86_64-linux-gnu/rocblas/*/library/"
        patterns += [f"{library}*_fallback.dat", f"{library}TensileManifest.txt"]
        patterns += [f"{library}*_{arch}.dat" for arch in archs]
    return patterns


def unpack(deb: Path, root: Path, patterns: list[str], report: ProgressCallback) -> None:
    """Extract the members matching `patterns`; skipped when done with the same patterns."""
    marker = root / ".unpacked" / (deb.name + ".json")
    if marker.is_file() and json.loads(marker.read_text()) == patterns:
        return
    report(0, None, f"unpacking {deb.name.split('_')[0]}")
    root.mkdir(parents=True, exist_ok=True)
    if shutil.which("dpkg-deb") is None:
        raise FetchError("unpacking needs dpkg-deb (package dpkg)")
    with subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE) as proc:
        assert proc.stdout is not None
        with tarfile.open(fileobj=proc.stdout, mode="r|") as archive:
            for member in archive:
                if any(_matches(member.name, pattern) for pattern in patterns):
                    archive.extract(member, root, filter=_keep_links)
    if proc.returncode != 0:
        raise FetchError(f"dpkg-deb could not read {deb} (delete it and run again)")
    write_text_atomically(marker, json.dumps(patterns))


def _matches(name: str, pattern: str) -> bool:
    """Glob match that never crosses a `/` (so `lib/*.so*` skips `lib/rocblas/x.so-gfx`),
    except a trailing `/**`, which takes the whole subtree."""
    if pattern.endswith("/**"):
        return name.startswith(pattern[:-2])
    directory, _, base = pattern.rpartition("/")
    name_directory, _, name_base = name.rpartition("/")
    return fnmatch.fnmatch(name_directory, directory) and fnmatch.fnmatch(name_base, base)


def _keep_links(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """tarfile's 'data' filter (nothing lands outside `dest`), dropping absolute symlinks,
    which would point into the host's own system; the libraries' own links are relative."""
    if member.issym() and member.linkname.startswith("/"):
        return None
    return tarfile.data_filter(member, dest)
