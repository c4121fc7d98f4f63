"""Build RMM's own replay benchmark (REPLAY_BENCH), unmodified, for bench_threaded_replay.py.

RMM's `cpp/benchmarks/replay/replay.cpp` at commit 0059816 is written against RMM 26.04's
`device_memory_resource` API (later wheels no longer have it), so it is built against the
librmm-cu13 26.04 wheel and its rapids-logger 0.2, with Google Benchmark from Debian's
archive. Everything is fetched into `$HIPMEM_CACHE_DIR/rmm-replay-bench/`, never into the
repository:

- RMM's source: `--rmm-source DIR` (a checkout of rapidsai/rmm at that commit), or downloaded
  from GitHub's archive of the commit;
- the wheels: `pip download` from PyPI;
- Google Benchmark: `apt-get download libbenchmark-dev libbenchmark1debian` (Debian/Ubuntu).

Prints the two arguments bench_threaded_replay.py needs (`--rmm-bench`, `--rmm-bench-libs`).

    python benchmarks/build_rmm_replay_bench.py [--rmm-source DIR] [--nvcc PATH]
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
import tarfile
import urllib.request
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hipmem._core.cache_root import cache_dir
from hipmem.replay.engine import native

RMM_COMMIT = "0059816216e838bfbf3146461e5139bebe3cc664"
WHEELS = ("librmm-cu13==26.4.0", "rapids-logger==0.2.3")
DEBS = ("libbenchmark-dev", "libbenchmark1debian")
SOURCES = (  # what the build reads from RMM's tree
    "cpp/benchmarks/replay/replay.cpp",
    "cpp/benchmarks/utilities/cxxopts.hpp",
    "cpp/benchmarks/utilities/log_parser.hpp",
    "cpp/benchmarks/utilities/rapidcsv.h",
    "cpp/benchmarks/utilities/simulated_memory_resource.hpp",
)


def rmm_source(given: Path | None, work: Path) -> Path:
    if given is not None:
        missing = [s for s in SOURCES if not (given / s).is_file()]
        if missing:
            sys.exit(f"build_rmm_replay_bench: {given} has no {missing[0]}")
        return given
    target = work / f"rmm-{RMM_COMMIT[:7]}"
    if not (target / SOURCES[0]).is_file():
        url = f"https://github.com/rapidsai/rmm/archive/{RMM_COMMIT}.tar.gz"
        with urllib.request.urlopen(url, timeout=60) as reply:
            data = reply.read()
        with tarfile.open(fileobj=io.BytesIO(data)) as archive:
            prefix = archive.getnames()[0].split("/")[0]
            for name in SOURCES:
                member = archive.extractfile(f"{prefix}/{name}")
                if member is None:
                    sys.exit(f"build_rmm_replay_bench: {name} is not in {url}")
                (target / name).parent.mkdir(parents=True, exist_ok=True)
                (target / name).write_bytes(member.read())
    return target


def wheels(work: Path) -> tuple[Path, Path]:
    """(librmm folder, rapids_logger folder) unpacked from the 26.04 wheels."""
    folder = work / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
         "--python-version", "3.12", "--implementation", "cp",
         "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_27_x86_64",
         "--platform", "manylinux_2_24_x86_64", "-d", str(folder), *WHEELS],
        check=True,
    )  # fmt: skip
    for wheel in folder.glob("*.whl"):
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(work / "unpacked")
    return work / "unpacked/librmm", work / "unpacked/rapids_logger"


def google_benchmark(work: Path) -> Path:
    """Google Benchmark's usr/ folder, from Debian's packages."""
    folder = work / "debs"
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["apt-get", "download", *DEBS], cwd=folder, check=True)
    for deb in folder.glob("*.deb"):
        subprocess.run(["dpkg-deb", "-x", str(deb), str(work / "gbench")], check=True)
    return work / "gbench/usr"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rmm-source", type=Path, default=None)
    parser.add_argument("--nvcc", default=None)
    args = parser.parse_args()
    nvcc = args.nvcc or native.find_nvcc()
    if nvcc is None:
        sys.exit("build_rmm_replay_bench: needs nvcc (a CUDA 13 toolkit)")
    work = cache_dir() / "rmm-replay-bench"
    work.mkdir(parents=True, exist_ok=True)
    source = rmm_source(args.rmm_source, work)
    librmm, logger = wheels(work)
    gbench = google_benchmark(work)
    gbench_lib = next(p.parent for p in gbench.rglob("libbenchmark.so*"))
    libs = f"{librmm}/lib64:{logger}/lib64:{gbench_lib}"
    binary = work / "REPLAY_BENCH"
    subprocess.run(
        [nvcc, "-std=c++20", "-O3", "-DNDEBUG", "--expt-relaxed-constexpr",
         "--expt-extended-lambda", f"-I{source}/cpp", f"-I{librmm}/include/rapids",
         f"-I{librmm}/include", f"-I{logger}/include", f"-I{gbench}/include",
         "-x", "cu", str(source / SOURCES[0]), "-o", str(binary), "-cudart", "static",
         f"-L{librmm}/lib64", f"-L{logger}/lib64", f"-L{gbench_lib}",
         "-Xlinker", f"-rpath={libs}", "-lrmm", "-lrapids_logger", "-lbenchmark", "-lpthread"],
        check=True,
    )  # fmt: skip
    print(f"--rmm-bench {binary} --rmm-bench-libs {libs}")


if __name__ == "__main__":
    main()
