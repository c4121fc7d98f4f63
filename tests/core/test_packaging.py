"""The distribution as users get it: a wheel built without warnings, installed in a fresh venv,
runs `hipmem --version` and sizes a call with the real libraries."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

# The wheel (the `wheel` fixture) is built once per test run: tests/core/conftest.py.
from tests.core.conftest import one_build_at_a_time
from tests.core.conftest import run_building as _run

REPO = Path(__file__).resolve().parents[2]


def _venv_with(folder: Path, *install: str | Path) -> Path:
    """A fresh venv holding hipmem installed by `pip install *install`; its `bin` folder.

    No dependencies are installed: they are the ones this test run has, seen through a path
    file (re-installing numpy, pandas and pyarrow from pip's cache took a minute of two
    cores). Only a plain path: the .pth files there (this checkout's editable install) are
    not read, so `hipmem` can only come from what was installed."""
    venv.create(folder, with_pip=True)
    (site,) = (folder / "lib").glob("python3*/site-packages")
    (site / "dependencies.pth").write_text(_site_packages_of_this_run() + "\n")
    done = _run(folder / "bin" / "pip", "install", "-q", "--no-deps", *install, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    return folder / "bin"


@pytest.fixture(scope="module")
def wheel_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel installed, alone (`_venv_with`): its `bin` folder. One for
    the module: the tests that use it only run what it holds."""
    return _venv_with(tmp_path_factory.mktemp("wheel-venv"), wheel)


@pytest.mark.slow
def test_the_wheel_installs_and_sizes_a_call_in_a_fresh_venv(
    wheel_venv: Path, tmp_path: Path, rocm: Path
) -> None:
    bin_dir = wheel_venv
    (site,) = (bin_dir.parent / "lib").glob("python3*/site-packages")
    # `pip check` holds the wheel's declared requirements against what is installed.
    checked = _run(bin_dir / "pip", "check")
    assert checked.returncode == 0, checked.stdout[-2000:]
    where = _run(bin_dir / "python", "-c", "import hipmem; print(hipmem.__file__)", cwd=tmp_path)
    assert where.stdout.startswith(str(site)), where
    version = _run(bin_dir / "hipmem", "--version", cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.startswith("hipmem 0."), version
    # The package data (catalog, shim source) must be in the wheel: nothing from the checkout.
    fetch = _run(bin_dir / "hipmem", "rocm", "fetch", cwd=tmp_path)
    assert fetch.returncode == 0, fetch.stderr[-2000:]
    sized = _run(
        bin_dir / "hipmem", "size", "--device", "MI210", "--json",
        "rocsolver_dgetrf:m=1024,n=1024", cwd=tmp_path,
    )  # fmt: skip
    assert sized.returncode == 0, sized.stderr[-2000:]
    assert '"session_bytes": 4732160' in sized.stdout
    # One namespace: the parts are hipmem.sizing and friends, never top-level modules.
    python = bin_dir / "python"
    for gone in ("sizing", "replay", "hipmem_cli"):
        found = _run(python, "-c", f"import {gone}", cwd=tmp_path)
        assert found.returncode == 1 and "ModuleNotFoundError" in found.stderr, gone
    api = _run(python, "-c", "import hipmem.cli.main, hipmem; print(hipmem.SizingSession)",
               cwd=tmp_path)  # fmt: skip
    assert api.returncode == 0 and "hipmem.sizing.session.SizingSession" in api.stdout, api
    # The C snapshot reader came with the wheel: the default machine, nothing built on use.
    reader = _run(python, "-c", "from hipmem.replay.snapshots import native; "
                  "print(native.restricted_pickle().__name__)", cwd=tmp_path)  # fmt: skip
    assert reader.stdout.strip() == "NativeRestrictedPickle", reader


def _site_packages_of_this_run() -> str:
    import sysconfig

    return sysconfig.get_paths()["purelib"]


def test_the_wheel_installs_one_top_level_package(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (top_level,) = [n for n in names if n.endswith(".dist-info/top_level.txt")]
        listed = archive.read(top_level).decode().split()
    tops = {name.split("/")[0] for name in names if ".dist-info/" not in name}
    assert tops == {"hipmem"} and listed == ["hipmem"]
    for data in ("sizing/rocm/data/catalog-7.2.json", "sizing/worker/shim/virtual_hip.c",
                 "replay/engine/csrc/replay_core.cu", "replay/pytorch/csrc/torch_replay.cpp",
                 "replay/virtual/vcuda/virtual_cuda.c", "replay/virtual/vcuda/vcuda_replay.cpp",
                 "replay/virtual/vcuda/libcudart.so.13.map", "replay/rmm/csrc/rmm_replay.cpp",
                 "replay/virtual/vcuda/replay_loop.hpp", "replay/snapshots/csrc/machine.c",
                 "replay/snapshots/csrc/reader.h",
                 "py.typed"):  # fmt: skip
        assert f"hipmem/{data}" in names
    # The snapshot reader's C machine is built into the wheel (setup.py), so the wheel is
    # for one platform and Python, and its stub ships for type checkers.
    assert any(
        n.startswith("hipmem/replay/snapshots/_snapshot_reader.") and n.endswith(".so")
        for n in names
    ), names
    assert "hipmem/replay/snapshots/_snapshot_reader.pyi" in names
    assert not wheel.name.endswith("-none-any.whl"), wheel.name


@pytest.mark.slow
def test_a_build_without_a_c_compiler_still_makes_the_wheel(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # The C snapshot reader is optional: with no compiler the wheel is made without it, and
    # snapshots are read by the Python machine (tests/replay/snapshots/test_snapshot_native.py).
    missing = tmp_path / "no-cc"
    env = {**os.environ, "CC": str(missing), "LDSHARED": f"{missing} -shared"}
    with one_build_at_a_time(tmp_path_factory):
        done = subprocess.run(
            [sys.executable, "-m", "build", "-o", tmp_path, REPO],  # from the sdist, as the fixture
            capture_output=True, text=True, env=env, cwd=tmp_path, check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert 'building extension "hipmem.replay.snapshots._snapshot_reader" failed' in (
        done.stdout + done.stderr
    )
    (found,) = tmp_path.glob("hipmem-*.whl")
    with zipfile.ZipFile(found) as archive:
        names = archive.namelist()
    assert "hipmem/replay/snapshots/native.py" in names
    assert not [n for n in names if n.endswith(".so")], names


def test_import_hipmem_is_cheap_and_names_the_api() -> None:
    probe = (
        "import sys, hipmem; "
        "assert 'pandas' not in sys.modules and 'hipmem.sizing.session' not in sys.modules; "
        "print(sorted(hipmem.__all__))"
    )
    done = _run(sys.executable, "-c", probe, cwd=REPO)
    assert done.returncode == 0, done.stderr
    for name in ("SizingSession", "recommend", "load_log", "replay", "find_capacity"):
        assert name in done.stdout


# Any install, any directory: the CLI, its worker process and the Python API work the same
# whether hipmem came as a wheel, by `pip install .` or `pip install -e .`, and whether they run
# in the clone's root (where Python puts the clone's own `hipmem/` folder first for `python -c`
# and `python -m`) or anywhere else.
SAMPLE = REPO / "samples" / "serve-first-2000.csv.gz"
_API_PROBE = (
    "import sys, hipmem; log = hipmem.load_log(sys.argv[1]); "
    "print(hipmem.replay_log(log, hipmem.parse_spec('host')).peak_requested_bytes)"
)
# The PyTorch replay worker, started as the library starts it; its input is missing, so it
# must get as far as reading it: the module was found (it needs no torch for that).
_WORKER_PROBE = (
    "import sys; from pathlib import Path; from hipmem.replay.pytorch import resource\n"
    "folder = Path(sys.argv[1])\n"
    "try:\n"
    "    resource._run_worker(folder / 'in.npz', folder / 'out.npz', '')\n"
    "except resource.TorchUnavailable as err:\n"
    "    print(err)\n"
)


@pytest.fixture(scope="module")
def installed(wheel_venv: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The `bin` folder of each way of installing: the wheel, and `pip install .`; the
    editable install is this test run's own (the README's test command makes it)."""
    ways = {"wheel": wheel_venv}
    with one_build_at_a_time(tmp_path_factory):  # pip builds in the checkout too
        ways["pip install ."] = _venv_with(tmp_path_factory.mktemp("dot-venv"), ".")
    return ways


def _editable_bin() -> Path:
    found = _run(sys.executable, "-c", "import hipmem; print(hipmem.__file__)", cwd="/")
    if not found.stdout.startswith(str(REPO)):
        pytest.skip("this test run's hipmem is not an editable install of this checkout")
    return Path(sys.executable).parent


@pytest.mark.slow
@pytest.mark.parametrize("way", ["wheel", "pip install .", "pip install -e ."])
@pytest.mark.parametrize("where", ["the clone's root", "another folder"])
def test_cli_worker_and_api_work_for_any_install_from_any_folder(
    installed: dict[str, Path], way: str, where: str, tmp_path: Path
) -> None:
    bin_dir = _editable_bin() if way == "pip install -e ." else installed[way]
    cwd = REPO if where == "the clone's root" else tmp_path
    cli = _run(bin_dir / "hipmem", "log", "inspect", "--json", SAMPLE, cwd=cwd)
    assert cli.returncode == 0, cli.stderr[-2000:]
    api = _run(bin_dir / "python", "-c", _API_PROBE, SAMPLE, cwd=cwd)
    assert api.returncode == 0 and int(api.stdout) > 0, api.stderr[-2000:]
    # `-P` (3.11+): the parent imports the installed hipmem, not the clone's, as the console
    # script does; the worker it starts must too, whatever folder it was started in.
    for safe_path in ([], ["-P"]) if sys.version_info >= (3, 11) else ([],):
        worker = _run(bin_dir / "python", *safe_path, "-c", _WORKER_PROBE, tmp_path, cwd=cwd)
        assert worker.returncode == 0, worker.stderr[-2000:]
        assert "in.npz" in worker.stdout and "specification" not in worker.stdout, worker


def test_the_checkouts_hipmem_holds_the_parts_as_links() -> None:
    # Every tool reads hipmem/ as the package it installs as (docs/architecture.md): each
    # part is a link to its top-level folder, and setuptools finds them all, listing none.
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    for part, folder in (("cli", "hipmem_cli"), ("sizing", "sizing"), ("replay", "replay")):
        link = REPO / "hipmem" / part
        assert link.is_symlink() and link.resolve() == (REPO / folder).resolve(), link
    with (REPO / "pyproject.toml").open("rb") as handle:
        setuptools = tomllib.load(handle)["tool"]["setuptools"]
    assert "package-dir" not in setuptools
    assert list(setuptools["packages"]) == ["find"]
