"""`hipmem recommend --from-snapshot` and `hipmem check --from-snapshot` as users run them (the
console script's entry, piped: tests/cli_run.py), PyTorch's real allocator on the virtual GPU
(fetched once by the `torch_allocators` fixture), outputs read back by their consumers."""

from __future__ import annotations

import gzip
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.cli_run import hipmem as run_hipmem
from tests.snapshot_reference import SNAPSHOTS, UNCAPPED, load
from tests.terminal import unwrapped

REPO = Path(__file__).resolve().parents[2]
MiB = 1 << 20
TRAIN = SNAPSHOTS / "train-default.pickle.gz"
VARIABLES = ("PYTORCH_HIP_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")


def _hipmem(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run_hipmem(*args, cwd=REPO, unset=VARIABLES, **{"COLUMNS": "200", **env})


@pytest.fixture(autouse=True)
def _allocators(torch_allocators: dict[str, Any]) -> None:
    """Every test here needs a fetched allocator (the fixture fetches it once)."""


@pytest.fixture(scope="module")
def recommended() -> dict[str, dict[str, Any]]:
    """`recommend --json` for each committed complete snapshot with no recorded
    out-of-memory error."""
    found = {}
    for name in UNCAPPED:
        done = _hipmem(
            "recommend",
            "--from-snapshot",
            str(SNAPSHOTS / f"{name}.pickle.gz"),
            "--torch",
            "2.11",
            "--capacity",
            "recommended",
            "--json",
        )
        assert done.returncode == 0, done.stderr
        found[name] = json.loads(done.stdout)
    return found


def test_json_has_every_candidate_and_the_env(recommended: dict[str, dict[str, Any]]) -> None:
    for payload in recommended.values():
        advice = payload["allocator_settings"]
        value = advice["recommended"]
        assert payload["env"] == {"PYTORCH_HIP_ALLOC_CONF": value, "PYTORCH_CUDA_ALLOC_CONF": value}
        settings = [c["settings"] for c in advice["candidates"]]
        assert value in settings and settings[0] == "" and len(settings) >= 12
        chosen = next(c for c in advice["candidates"] if c["settings"] == value)
        assert chosen["peak_reserved_bytes"] == advice["peak_reserved_bytes"]
        assert (
            advice["headroom_bytes"]
            == advice["device"]["memory_bytes"] - (advice["peak_reserved_bytes"])
        )
        assert chosen["capacity_bytes"] == advice["capacity_bytes"] > 0


@pytest.mark.parametrize("name", UNCAPPED)
def test_check_passes_at_the_recommended_capacity_and_fails_2_mib_below(
    name: str, recommended: dict[str, dict[str, Any]]
) -> None:
    advice = recommended[name]["allocator_settings"]
    snapshot = str(SNAPSHOTS / f"{name}.pickle.gz")
    capacity = advice["capacity_bytes"]
    common = (
        "check",
        "--from-snapshot",
        snapshot,
        "--alloc-conf",
        advice["recommended"],
        "--torch",
        "2.11",
    )
    at = _hipmem(*common, "--device-memory", f"{capacity}B")
    assert at.returncode == 0, at.stderr
    assert at.stdout.startswith("ok --alloc-conf")
    below = _hipmem(*common, "--device-memory", f"{capacity - 2 * MiB}B")
    assert below.returncode == 1, below.stderr
    first = below.stderr.splitlines()[0]
    assert first.startswith("FAIL --alloc-conf") and "does not fit" in first
    assert f"the first refused allocation is {snapshot}#dev0:" in first


def test_the_shell_output_is_sourced_into_a_shell(
    tmp_path: Path, recommended: dict[str, dict[str, Any]]
) -> None:
    done = _hipmem(
        "recommend",
        "--from-snapshot",
        str(TRAIN),
        "--torch",
        "2.11",
        "--capacity",
        "recommended",
        "--format",
        "shell",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("# allocator settings for PyTorch 2.11.0+cu130 on a virtual ")
    script = tmp_path / "alloc.sh"
    script.write_text(done.stdout)
    shown = subprocess.run(
        [
            "bash",
            "-c",
            f'source {script}; bash -c \'printf "%s|%s" "$PYTORCH_HIP_ALLOC_CONF" '
            '"$PYTORCH_CUDA_ALLOC_CONF"\'',
        ],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    value = recommended["train-default"]["allocator_settings"]["recommended"]
    assert shown.stdout == f"{value}|{value}"


def test_piped_without_a_format_only_the_export_lines(
    recommended: dict[str, dict[str, Any]],
) -> None:
    done = _hipmem(
        "recommend",
        "--from-snapshot",
        str(TRAIN),
        "--torch",
        "2.11",
        "--for",
        "rocm",
        "--capacity",
        "recommended",
    )
    assert done.returncode == 0, done.stderr
    value = recommended["train-default"]["allocator_settings"]["recommended"]
    assert done.stdout.splitlines()[1:] == [f"export PYTORCH_HIP_ALLOC_CONF='{value}'"]


def test_github_appends_the_variable_for_later_steps(tmp_path: Path) -> None:
    env_file, outputs = tmp_path / "env", tmp_path / "outputs"
    done = _hipmem(
        "recommend",
        "--from-snapshot",
        str(SNAPSHOTS / "infer-default.pickle.gz"),
        "--torch",
        "2.11",
        "--for",
        "cuda",
        "--format",
        "github",
        "--capacity",
        "recommended",
        GITHUB_ENV=str(env_file),
        GITHUB_OUTPUT=str(outputs),
    )
    assert done.returncode == 0, done.stderr
    (line,) = env_file.read_text().splitlines()
    name, _, value = line.partition("=")
    assert name == "PYTORCH_CUDA_ALLOC_CONF" and outputs.read_text() == env_file.read_text()
    # the value a later step gets is one the gate passes on the same device
    gate = _hipmem(
        "check",
        "--from-snapshot",
        str(SNAPSHOTS / "infer-default.pickle.gz"),
        "--torch",
        "2.11",
        PYTORCH_CUDA_ALLOC_CONF=value,
    )
    assert gate.returncode == 0, gate.stderr
    shown = f" '{value}'" if value else ": PyTorch's defaults"
    assert gate.stdout.startswith(f"ok $PYTORCH_CUDA_ALLOC_CONF{shown} fits on a virtual")


def test_one_step_emits_the_workspace_and_the_allocator_variables(rocm: Path) -> None:
    done = _hipmem(
        "recommend",
        "--rocm",
        "7.2",
        "-d",
        "MI300X",
        "rocsolver_dgetrf:m=1024,n=1024",
        "--from-snapshot",
        str(SNAPSHOTS / "multistream.pickle.gz"),
        "--torch",
        "2.11",
        "--capacity",
        "recommended",
        "--format",
        "dotenv",
    )
    assert done.returncode == 0, done.stderr
    names = [line.partition("=")[0] for line in done.stdout.splitlines() if "=" in line]
    assert names == [
        "ROCBLAS_DEVICE_MEMORY_SIZE",
        "PYTORCH_HIP_ALLOC_CONF",
        "PYTORCH_CUDA_ALLOC_CONF",
    ]
    comment = done.stdout.splitlines()[0]
    assert comment.startswith("# for ROCm 7.2") and "allocator settings for PyTorch 2.11" in comment


def test_the_plot_is_written(tmp_path: Path) -> None:
    plot = tmp_path / "reserved.png"
    done = _hipmem(
        "recommend",
        "--from-snapshot",
        str(TRAIN),
        "--torch",
        "2.11",
        "--capacity",
        "recommended",
        "--plot",
        str(plot),
    )
    assert done.returncode == 0, done.stderr
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"plot written to {plot}" in unwrapped(done.stderr)


def test_the_gate_names_the_program_line_when_stacks_were_recorded(tmp_path: Path) -> None:
    """A snapshot whose entries carry frames (as `_record_memory_history(stacks="python")`
    records them): the FAIL line names the program's own frame, not PyTorch's."""
    data = load(TRAIN)
    frames = [
        {
            "filename": "/usr/lib/python3/site-packages/torch/nn/modules/linear.py",
            "line": 125,
            "name": "forward",
        },
        {"filename": "/work/train.py", "line": 42, "name": "step"},
    ]
    for entry in data["device_traces"][0]:
        if entry["action"] == "alloc":
            entry["frames"] = frames
    path = tmp_path / "stacks.pickle.gz"
    path.write_bytes(gzip.compress(pickle.dumps(data)))
    done = _hipmem(
        "check",
        "--from-snapshot",
        str(path),
        "--alloc-conf",
        "",
        "--device-memory",
        "400MiB",
        "--torch",
        "2.11",
    )
    assert done.returncode == 1
    first = done.stderr.splitlines()[0]
    assert first.startswith("FAIL --alloc-conf: PyTorch's defaults does not fit on a virtual GPU")
    assert first.endswith(", allocated at /work/train.py:42 in step")


def test_the_gate_reads_the_variables_and_refuses_ones_that_disagree() -> None:
    done = _hipmem(
        "check",
        "--from-snapshot",
        str(TRAIN),
        "--torch",
        "2.11",
        PYTORCH_HIP_ALLOC_CONF="expandable_segments:True",
        PYTORCH_CUDA_ALLOC_CONF="max_split_size_mb:64",
    )
    assert done.returncode == 2
    assert done.stderr.startswith(
        "Error: PYTORCH_CUDA_ALLOC_CONF and PYTORCH_HIP_ALLOC_CONF are set to different"
    )
    unset = _hipmem("check", "--from-snapshot", str(TRAIN), "--torch", "2.11", "--json")
    assert unset.returncode == 0, unset.stderr
    payload = json.loads(unset.stdout)["allocator_settings"]
    assert payload["settings"] == "" and payload["fits"] is True


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["recommend", "--for", "rocm", "-d", "MI210", "rocsolver_dgetrf:m=8,n=8"],
            "Error: --for is about PyTorch's allocator settings: give --from-snapshot FILE too",
        ),
        (
            ["recommend", "--from-snapshot", str(TRAIN), "--headroom", "10%"],
            "Error: --headroom is about the workspace of calls",
        ),
        (
            ["recommend", "--from-snapshot", str(TRAIN), "--device", "MI211"],
            "Error: --device 'MI211': not a device hipmem knows; did you mean MI210",
        ),
        (
            ["recommend", "--from-snapshot", "samples/serve-first-2000.csv.gz"],
            "Error: --from-snapshot 'samples/serve-first-2000.csv.gz': not a PyTorch memory",
        ),
        (
            ["recommend", "--from-snapshot", str(TRAIN), "--plot", "out.pdf"],
            "Error: --plot 'out.pdf': must end in .png or .svg",
        ),
        (
            ["check", "--from-snapshot", str(TRAIN), "--alloc-conf", "expandable_segments: True"],
            "Error: --alloc-conf 'expandable_segments: True': expected PyTorch's allocator",
        ),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(args: list[str], message: str) -> None:
    done = _hipmem(*args)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(message) and len(done.stderr.splitlines()) == 1
    assert done.stdout == ""


def test_a_device_too_small_for_any_setting_exits_1_with_nothing_emitted() -> None:
    done = _hipmem(
        "recommend",
        "--from-snapshot",
        str(TRAIN),
        "--device-memory",
        "200MiB",
        "--torch",
        "2.11",
        "--capacity",
        "recommended",
    )
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.startswith(
        "Error: no setting of the grid replays every snapshot on a virtual GPU of 200.0 MiB"
    )
    assert f"the defaults first at {TRAIN}#dev0:" in done.stderr


def _ci_job() -> dict[str, Any]:
    """The allocator job of docs/ci.md (the yaml block under its own heading)."""
    import yaml

    page = (REPO / "docs" / "ci.md").read_text()
    section = page[page.index("## PyTorch's allocator settings") :]
    start = section.index("```yaml\n") + len("```yaml\n")
    [job] = yaml.safe_load(section[start : section.index("\n```", start)])["jobs"].values()
    job_dict: dict[str, Any] = job
    return job_dict


def test_the_documented_ci_job_runs_as_github_actions_runs_it(tmp_path: Path) -> None:
    """Each `run:` step after the install, in bash as a runner does, with the job's env (the
    snapshot pointed at a committed one) and what a step appends to $GITHUB_ENV visible to
    the steps after it."""
    job = _ci_job()
    assert job["runs-on"] == "ubuntu-latest"
    cache = next(step for step in job["steps"] if step.get("uses", "").startswith("actions/cache"))
    assert cache["with"]["path"] == "~/.cache/hipmem"
    runs = [step["run"] for step in job["steps"] if "run" in step]
    assert runs[0].startswith("pip install ") and runs[1].startswith("hipmem torch fetch")
    env_file, outputs = tmp_path / "github_env", tmp_path / "github_output"
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    env.update({name: str(value) for name, value in job["env"].items()})
    env.update(SNAPSHOT=str(TRAIN), GITHUB_ENV=str(env_file), GITHUB_OUTPUT=str(outputs))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    for run in runs[1:]:
        done = subprocess.run(
            ["bash", "-e", "-c", run],
            capture_output=True,
            text=True,
            cwd=REPO,
            env=env,
            timeout=300,
        )
        assert done.returncode == 0, f"{run}\n{done.stderr}"
        if env_file.exists():
            for line in env_file.read_text().splitlines():
                name, _, value = line.partition("=")
                env[name] = value
    assert env["PYTORCH_HIP_ALLOC_CONF"] == env["PYTORCH_CUDA_ALLOC_CONF"]
    assert outputs.read_text() == env_file.read_text()
    assert done.stdout.startswith("ok --alloc-conf 'expandable_segments:True' fits on a virtual")
