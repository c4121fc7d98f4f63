"""RMM's resources searched on the program written once (replay/capacity/rmm_probes.py): the
driver alone, next probes made ahead on a spare core. Each search finds, probe for probe, what
the search through the engine's replays finds (one report per probe, one after another), with
RMM's real code on the committed logs."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

import hipmem
from hipmem.replay.capacity import rmm_probes
from hipmem.replay.capacity import search as capacity_search
from hipmem.replay.capacity.at_once import Cores
from hipmem.replay.capacity.fits import fits_table
from hipmem.replay.engine.options import ReplayOptions
from hipmem.replay.engine.program import build_program
from hipmem.replay.logs.events import AllocationLog

REPO = Path(__file__).resolve().parents[3]
LOGS = ("tests/data/real/cnn.csv.gz", "samples/serve-first-2000.csv.gz")


@pytest.fixture(scope="module")
def logs(rmm_releases: object) -> dict[str, AllocationLog]:
    return {name: hipmem.load_log(str(REPO / name)) for name in LOGS}


@pytest.mark.parametrize("spec", ["pool", "binning:upstream=pool", "pool:initial=64MiB"])
@pytest.mark.parametrize("name", LOGS)
def test_probes_made_ahead_find_what_replays_one_after_another_find(logs, monkeypatch, spec,
                                                                     name):  # fmt: skip
    log, parsed = logs[name], hipmem.parse_spec(spec)
    options = ReplayOptions(backend="virtual", rmm_version="25.4")
    with monkeypatch.context() as patch:  # the engine's replays, one after another
        patch.setattr(capacity_search, "VIRTUAL_RMM", "not this target")
        expected = capacity_search.find_capacity(log, parsed, options).as_dict()

    taken: list[int] = []
    real_take = rmm_probes.Ahead.take

    def take(self: rmm_probes.Ahead, size: int) -> object:
        made = real_take(self, size)
        if made is not None:
            taken.append(size)
        return made

    monkeypatch.setattr(rmm_probes, "CORES", Cores(2))  # a spare core, however busy the host
    monkeypatch.setattr(rmm_probes.Ahead, "take", take)
    program = build_program(log)
    with rmm_probes.RmmProbes.write(log, program, options.streams) as probes:
        found = capacity_search.find_capacity(log, parsed, options, program=program,
                                              probes=probes)  # fmt: skip
    assert found.as_dict() == expected
    # guesses were made and used: each a probe the search asked for
    probed = [probe.size_bytes for probe in found.probes]
    assert set(taken) <= set(probed)
    if len(probed) > 6:
        assert taken


def test_a_device_too_small_for_the_first_allocation_is_the_replay_s_error(logs, monkeypatch):
    log = logs[LOGS[1]]  # its first allocation: 16 MiB
    options = ReplayOptions(backend="virtual", rmm_version="25.4", device_memory_bytes=4 << 20)
    spec = hipmem.parse_spec("pool")
    with monkeypatch.context() as patch, pytest.raises(hipmem.HipmemError) as by_replay:
        patch.setattr(capacity_search, "VIRTUAL_RMM", "not this target")
        capacity_search.find_capacity(log, spec, options)
    with pytest.raises(hipmem.HipmemError) as by_probe:
        capacity_search.find_capacity(log, spec, options)
    assert str(by_probe.value) == str(by_replay.value)
    assert "too small for the log's first allocation" in str(by_probe.value)


def test_streams_default_probes_the_default_stream_and_fits_the_logged_ones(logs, monkeypatch):
    log = logs[LOGS[1]]  # 5 streams
    options = ReplayOptions(backend="virtual", rmm_version="25.4", streams="default")
    spec = hipmem.parse_spec("pool")
    with monkeypatch.context() as patch:
        patch.setattr(capacity_search, "VIRTUAL_RMM", "not this target")
        expected = capacity_search.find_capacity(log, spec, options).as_dict()
    program = build_program(log)
    logged = ReplayOptions(backend="virtual", rmm_version="25.4")
    with rmm_probes.RmmProbes.write(log, program, "default") as probes:
        found = capacity_search.find_capacity(log, spec, options, program=program, probes=probes)
        assert found.as_dict() == expected
        # the fits table replays the logged streams, with the option or without, as before
        assert fits_table(log, spec, options, program=program, probes=probes) == fits_table(
            log, spec, logged, program=program
        )


class _HeldGpu:
    """A replay that runs until the test lets it end: the scheduling of guesses, alone."""

    def __init__(self, size: int, started: list[int], release: threading.Event) -> None:
        self.size, self._started, self._release = size, started, release

    def replay(self, device: object, *, stop_on_failure: bool) -> int:
        self._started.append(self.size)
        assert self._release.wait(60)
        return self.size

    def cancel(self) -> None:
        pass

    def close(self) -> None:
        pass


def _eventually(condition: Callable[[], bool]) -> bool:
    for _ in range(600):  # a thread's start, not work: any machine is far quicker
        if condition():
            return True
        time.sleep(0.01)
    return False


def test_the_next_guess_starts_while_the_guess_taken_still_runs(monkeypatch):
    """The search takes a guess made ahead and waits for it; the guess after it starts on the
    core left free at once, not behind it (one thread of guesses left a core idle), and where
    the likelier next probe is none (the search would end) the other is guessed."""
    monkeypatch.setattr(rmm_probes, "CORES", Cores(2))
    started: list[int] = []
    release = threading.Event()
    probes = SimpleNamespace(gpu=lambda size, target: _HeldGpu(size, started, release))
    sized: Any = lambda size: size  # noqa: E731 - the fake gpu takes the size as its spec
    ahead = rmm_probes.Ahead(cast(Any, probes), sized, cast(Any, SimpleNamespace(device="gpu")))
    try:
        ahead.last = True
        ahead.guess(10, 5, 15)
        with rmm_probes.CORES.held():  # the probe of 10 under way, on its core
            ahead.start()
            assert _eventually(lambda: started == [5])
        ahead.last = True  # 10 passed: the search asks for 5, made ahead
        ahead.guess(5, None, 7)  # if 5 passes the search ends: guess 7
        taking = threading.Thread(target=ahead.take, args=(5,))
        taking.start()
        assert _eventually(lambda: started == [5, 7])  # while 5 still runs
    finally:
        release.set()
        ahead.close()
    taking.join()
