"""RMM's resources searched on the program written once (replay/capacity/rmm_probes.py): the
driver alone, next probes made ahead on a spare core. Each search finds, probe for probe, what
the search through the engine's replays finds (one report per probe, one after another), with
RMM's real code on the committed logs."""

from __future__ import annotations

from pathlib import Path

import pytest
from hipmem.replay.capacity import rmm_probes
from hipmem.replay.capacity import search as capacity_search
from hipmem.replay.capacity.at_once import Cores
from hipmem.replay.capacity.fits import fits
from hipmem.replay.engine.options import ReplayOptions
from hipmem.replay.engine.program import build_program
from hipmem.replay.logs.events import AllocationLog

import hipmem

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
        assert fits(log, spec, options, program=program, probes=probes) == fits(
            log, spec, logged, program=program
        )
