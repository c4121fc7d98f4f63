"""`--find-capacity` by `limit=` of RMM's resources on the virtual GPU: the probes answered by
the limiting adaptor's rule (replay/capacity/limit_rule.py) are the probes real replays give,
with RMM's real code (both releases) on the committed logs; where the rule is made wrong on
purpose, the search replays every probe and still finds the same answer."""

from __future__ import annotations

from pathlib import Path

import pytest

import hipmem
from hipmem.replay.capacity import limit_rule
from hipmem.replay.capacity import search as capacity_search
from hipmem.replay.engine.options import ReplayOptions
from hipmem.replay.engine.program import build_program
from hipmem.replay.logs.events import AllocationLog
from hipmem.replay.rmm.virtual import VirtualRmm

MiB = 1 << 20
REPO = Path(__file__).resolve().parents[3]
LOGS = ("tests/data/real/cnn.csv.gz", "samples/serve-first-2000.csv.gz")


@pytest.fixture(scope="module")
def logs(rmm_releases: object) -> dict[str, AllocationLog]:
    return {name: hipmem.load_log(str(REPO / name)) for name in LOGS}


def _search(log: AllocationLog, spec: str, release: str, monkeypatch: pytest.MonkeyPatch,
            *, by_replays: bool) -> tuple[dict[str, object], int]:  # fmt: skip
    """The search's result, and how many real replays it made (driver processes run)."""
    real = VirtualRmm.replay
    made = []

    def counted(*args: object, **kwargs: object) -> object:
        made.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    with monkeypatch.context() as patch:
        patch.setattr(VirtualRmm, "replay", counted)
        if by_replays:  # the search as it was: every probe a replay, one after another
            patch.setattr(capacity_search, "VIRTUAL_RMM", "not this target")
        found = capacity_search.find_capacity(
            log, hipmem.parse_spec(spec), ReplayOptions(backend="virtual", rmm_version=release)
        )
    return found.as_dict(), len(made)


@pytest.mark.parametrize("release", ["25.4", "24.12"])
@pytest.mark.parametrize("spec", ["arena", "cuda", "binning:upstream=cuda", "pool:limit=64GiB"])
@pytest.mark.parametrize("name", LOGS)
def test_the_rule_finds_what_replaying_every_probe_finds(logs, monkeypatch, release, spec, name):
    log = logs[name]
    by_rule, rule_replays = _search(log, spec, release, monkeypatch, by_replays=False)
    by_replays, replays = _search(log, spec, release, monkeypatch, by_replays=True)
    assert by_rule == by_replays
    assert by_rule["sized_option"] == "limit"
    # the first, 2 confirming, one step below (unless below the log's peak): never more
    assert rule_replays in (3, 4) and rule_replays <= replays


@pytest.mark.parametrize("release", ["25.4", "24.12"])
def test_the_rule_is_rmm_s_own_count(logs, release):
    # RMM's adaptor refuses one byte below the rule's peak and nothing at it
    log = logs[LOGS[0]]
    peak = limit_rule.counted_peak_bytes(build_program(log))
    assert peak > build_program(log).peak_requested_bytes  # the rounding counts
    options = ReplayOptions(backend="virtual", rmm_version=release, on_failure="stop")
    for limit, refused in ((peak, 0), (peak - 1, 1)):
        spec = hipmem.parse_spec("arena").with_limit(limit)
        assert hipmem.replay_log(log, spec, options).failure_count == refused


@pytest.mark.parametrize("wrong_by", [-8 * MiB, 8 * MiB])
def test_a_wrong_rule_falls_back_to_replaying_every_probe(logs, monkeypatch, wrong_by):
    log = logs[LOGS[0]]
    expected, replayed = _search(log, "arena", "25.4", monkeypatch, by_replays=True)
    right = limit_rule.counted_peak_bytes
    monkeypatch.setattr(limit_rule, "counted_peak_bytes", lambda p: right(p) + wrong_by)
    found, replays = _search(log, "arena", "25.4", monkeypatch, by_replays=False)
    assert found == expected and replays > replayed  # the rule's, then every probe
