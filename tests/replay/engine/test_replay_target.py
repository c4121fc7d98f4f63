"""Each replay decision made once (replay/engine/target.py, preflight.py): the preflight
resolves every resource's target before the log is read, and the replays run those targets.
PyTorch's allocator is located, and its libraries hashed for the virtual GPU's build, once per
`hipmem replay` (the command run in this process, with the real allocator, counted by spies
that call the real functions); the engine runs the loop a target names."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hipmem.cli.main import build_app
from hipmem.replay.engine import target as replay_target
from hipmem.replay.engine.options import ReplayOptions
from hipmem.replay.engine.preflight import preflight
from hipmem.replay.engine.resources import parse_spec
from hipmem.replay.engine.run import replay_log
from hipmem.replay.errors import ReplayUsageError
from hipmem.replay.logs.loader import load_log
from hipmem.replay.pytorch import allocator as torch_allocator
from hipmem.replay.virtual import build as vcuda_build
from tests.log_reference import REAL_LOGS_DIR
from tests.snapshot_reference import SNAPSHOTS

TRAIN = SNAPSHOTS / "train-default.pickle.gz"


def _counted(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[object]:
    """Calls of `module.name` from now on (each call's first argument); the real one runs."""
    calls: list[object] = []
    real = getattr(module, name)

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[0] if args else None)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)
    return calls


def _hipmem(*argv: str) -> None:
    """`hipmem ARGV` in this process, as the console script runs it (exit code 0)."""
    app = build_app(list(argv))
    result = app(args=list(argv), prog_name="hipmem", standalone_mode=False)
    assert result in (None, 0)


@pytest.mark.parametrize("capacity", [False, True], ids=["replay", "find-capacity"])
def test_a_virtual_replay_locates_the_allocator_and_hashes_its_libraries_once(
    torch_allocators: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    capacity: bool,
) -> None:
    located = _counted(monkeypatch, torch_allocator, "locate")
    hashed = _counted(monkeypatch, vcuda_build, "build_dir_for")
    _hipmem("replay", str(TRAIN), "-r", "torch:settings=recorded", "--device", "MI300X",
            "--torch", "2.11", "--json", *(["--find-capacity"] if capacity else []))  # fmt: skip
    payload = json.loads(capsys.readouterr().out)
    if capacity:  # both searches and the fits of every device ran, on the one build
        (entry,) = payload["virtual_gpu"]
        assert entry["device_memory"]["capacity_bytes"] > 0 and len(entry["fits"]) > 1
    else:
        (resource,) = payload["resources"]
        assert resource["engine"] == "torch 2.11.0+cu130"
        assert resource["peak_reserved_bytes"] == payload["recorded"]["peak_reserved_bytes"]
    assert located == ["2.11"]
    assert len(hashed) == 1


def test_the_preflight_says_a_flag_for_the_virtual_gpu_that_nothing_uses() -> None:
    with pytest.raises(ReplayUsageError, match="--device picks the virtual GPU"):
        preflight([parse_spec("host")], ReplayOptions(backend="host", device_name="MI300X"))


def test_the_engine_runs_the_loop_the_target_names() -> None:
    log = load_log([REAL_LOGS_DIR / "gpt.csv.gz"])
    spec, options = parse_spec("host"), ReplayOptions(backend="host")
    targets = preflight([spec], options)
    chosen = targets.of(spec, options)
    assert chosen.backend.name == "host" and not chosen.on_virtual_gpu
    python = replay_target.ReplayTarget(chosen.backend, replay_target.PYTHON)
    by_python = replay_log(log, spec, options, target=python)
    by_choice = replay_log(log, spec, options, target=chosen)
    assert by_python.engine == "python"
    assert by_choice.engine == chosen.loop  # native where a C++ compiler is, else python
    # Either loop replays the same log to the same figures.
    assert by_python.peak_requested_bytes == by_choice.peak_requested_bytes
    assert by_python.peak_reserved_bytes == by_choice.peak_reserved_bytes
    assert by_python.failure_count == by_choice.failure_count == 0
