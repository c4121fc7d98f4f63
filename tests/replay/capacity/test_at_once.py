"""RMM's resources on the virtual GPU searched side by side (replay/capacity/at_once.py): the
command finds, for each, what it finds searching that resource alone, probes and fits alike."""

from __future__ import annotations

import json
import threading
from functools import partial
from pathlib import Path

import pytest

from hipmem.replay.capacity.at_once import CORES, run_each
from tests.cli_run import hipmem

REPO = Path(__file__).resolve().parents[3]
SERVE = str(REPO / "samples" / "serve-first-2000.csv.gz")
SPECS = ("pool", "arena", "binning", "pool:maximum=1GiB,limit=900MiB")


def _capacities(*specs: str) -> list[dict[str, object]]:
    args = [a for spec in specs for a in ("-r", spec)]
    done = hipmem("replay", SERVE, *args, "--backend", "virtual", "--find-capacity", "--json")
    assert done.returncode == 0, done.stderr
    found: list[dict[str, object]] = json.loads(done.stdout)["capacities"]
    return found


def test_side_by_side_finds_what_each_finds_alone(rmm_releases):
    together = _capacities(*SPECS)
    assert [c["resource"] for c in together] == list(SPECS)
    for spec, found in zip(SPECS, together, strict=True):
        assert found == _capacities(spec)[0], spec
        assert found["fits"] and found["capacity_bytes"]


def test_run_each_keeps_the_order_and_raises_a_task_s_error():
    squares = [partial(pow, i, 2) for i in range(7)]
    assert run_each(squares, workers=3) == [i * i for i in range(7)]

    def fails() -> int:
        raise ValueError("task 2")

    with pytest.raises(ValueError, match="task 2"):
        run_each([lambda: 1, fails, lambda: 3], workers=2)


def test_a_failing_task_stops_the_others_at_their_next_replay():
    started = threading.Event()
    replays: list[int] = []

    def endless() -> str:
        started.set()
        for _ in range(1_000_000):
            with CORES.held():  # what each replay of a search goes through
                replays.append(1)
        return "never stopped"

    def fails() -> str:
        started.wait()
        raise ValueError("task 2")

    with pytest.raises(ValueError, match="task 2"):
        run_each([endless, fails], workers=2)
    assert len(replays) < 1_000_000
    assert not CORES.stopping.is_set()  # later commands' replays go on
    with CORES.held():
        pass
