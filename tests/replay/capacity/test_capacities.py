"""`hipmem.find_capacities`: every resource's search, as `hipmem replay --find-capacity` runs
them (replay/capacity/capacities.py): a Python caller gets what the command line prints."""

from __future__ import annotations

import json
from pathlib import Path

import hipmem
from hipmem.replay.capacity.capacities import Capacities
from hipmem.replay.capacity.search import CONFIRM_RUNS
from tests.cli_run import hipmem as run_hipmem

REPO = Path(__file__).resolve().parents[3]
TRAIN = REPO / "tests" / "data" / "snapshots" / "train-default.pickle.gz"
SERVE = REPO / "samples" / "serve-first-2000.csv.gz"


def test_pytorch_on_the_virtual_gpu_is_what_the_command_prints(torch211):
    spec = "torch:settings=recorded"
    options = hipmem.ReplayOptions(backend="virtual", torch_version="2.11", device_name="H200")
    found = hipmem.find_capacities(hipmem.load_log(TRAIN), [hipmem.parse_spec(spec)], options)
    assert isinstance(found, Capacities) and found.found and not found.resources
    assert found.confirm_runs == CONFIRM_RUNS
    (entry,) = found.virtual
    # The smallest device the H200 measured for train-default (docs/pytorch-virtual-gpu.md).
    assert entry.device.capacity_bytes == 585_105_408  # type: ignore[union-attr]
    done = run_hipmem("replay", str(TRAIN), "-r", spec, "--device", "H200", "--torch", "2.11",
                      "--find-capacity", "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["virtual_gpu"] == [entry.as_dict()]


def test_rmm_and_host_resources_are_what_the_command_prints(rmm_releases):
    specs = ["pool", "host"]
    options = hipmem.ReplayOptions(backend="virtual")
    log = hipmem.load_log(SERVE)
    found = hipmem.find_capacities(log, [hipmem.parse_spec(s) for s in specs], options,
                                   confirm_runs=1)  # fmt: skip
    assert [r.spec.label for r in found.resources] == specs and not found.virtual
    # the fits table: the virtual GPU's only
    assert found.resources[0].fits_table and found.resources[1].fits_table is None
    args = [a for spec in specs for a in ("-r", spec)]
    done = run_hipmem("replay", str(SERVE), *args, "--backend", "virtual", "--find-capacity",
                      "--confirm-runs", "1", "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["capacities"] == [r.as_dict() for r in found.resources]
