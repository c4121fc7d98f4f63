"""What a user sees from the installed `hipmem`, at 60, 80 and 200 columns, piped (as in CI
logs) and on a pseudo-terminal: values whole, honest exit codes, help with examples."""

from __future__ import annotations

import functools
import gzip
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.terminal import (
    HIPMEM,
    REPO,
    WIDTHS,
    Seen,
    both,
    help_piped,
    on_terminal,
    piped,
    unwrapped,
    whole_on_a_line,
)

SAMPLE_LOG = "samples/serve-first-2000.csv.gz"
CALL_LOGS = ["--from-log", "samples/rocblas-bench.log", "--from-log", "samples/rocsolver-bench.log"]
LONG_CALLS = (
    "rocsolver_dgesvd:left_svect=singular,right_svect=none,m=400,n=300,lda=400,ldu=400,ldv=1,"
    "fast_alg=outofplace",
    "rocblas_strsm:side=left,uplo=lower,transA=none,diag=non_unit,m=2048,n=2048,alpha=1.0,"
    "lda=2048,ldb=2048",
    "rocsolver_zheevd:evect=original,uplo=lower,n=500,lda=500",
)


# -- nothing users copy is split or cut -------------------------------------------------------


@functools.cache
def _as_json(*args: str) -> Seen:
    """`hipmem ARGS --json`, piped: the values the tables below must show whole. JSON is the
    same at every width, so the three widths' tests share one run of it."""
    return piped(*args, "--json")


@pytest.mark.parametrize("columns", WIDTHS)
def test_long_call_table_keeps_every_call_whole(rocm: Path, columns: int) -> None:
    as_json = json.loads(_as_json("size", "-d", "MI210", *CALL_LOGS).stdout)
    session = as_json["session_bytes"]
    versions = [f"{name} {v}" for name, v in as_json["library"]["versions"].items()]
    for seen in both("size", "-d", "MI210", *CALL_LOGS, "--top", "8", columns=columns):
        assert seen.returncode == 0, seen.stderr
        for value in (*LONG_CALLS, f"{session:,} bytes", *versions):
            assert whole_on_a_line(value, seen.stdout), (value, seen.stdout)
        assert re.search(r"session \d+\.\d (KiB|MiB) \(", seen.stdout)  # number and unit together
        assert "…" not in seen.stdout
    for line in seen.stdout.splitlines():  # on a terminal, only a long value runs past
        assert len(line) <= columns or re.search(r"(rocblas|rocsolver)_\w+:", line), line


@pytest.mark.parametrize("columns", WIDTHS)
def test_capacity_table_keeps_the_spec_to_use_whole(columns: int) -> None:
    as_json = _as_json("replay", SAMPLE_LOG, "-r", "host", "-r", "host:pinned=0",
                       "--find-capacity", "--confirm-runs", "0")  # fmt: skip
    assert as_json.returncode == 0, as_json.stderr
    found = json.loads(as_json.stdout)["capacities"]
    for seen in both("replay", SAMPLE_LOG, "-r", "host", "-r", "host:pinned=0", "--find-capacity",
                     "--confirm-runs", "0", columns=columns):  # fmt: skip
        assert seen.returncode == 0, seen.stderr
        for capacity in found:
            assert whole_on_a_line(capacity["sized_spec"], seen.stdout), seen.stdout
        assert "…" not in seen.stdout


@pytest.mark.parametrize("columns", WIDTHS)
def test_replay_table_keeps_places_and_units_whole(columns: int) -> None:
    for seen in both("replay", SAMPLE_LOG, "-r", "host", "-r", "host:limit=200MiB",
                     columns=columns):  # fmt: skip
        assert seen.returncode == 1, seen.stderr
        place = re.search(r"serve-first-2000\.csv\.gz:\d+", seen.stdout)
        assert place is not None, seen.stdout
        assert "…" not in seen.stdout
        for unit in re.findall(r"\d (?:ns|µs|ms|s|B|KiB|MiB|GiB)\b", seen.stdout):
            assert unit  # found on one line: a unit never starts a line on its own
        assert not any(re.match(r"\s*│?\s*(ns|µs|ms|MiB|GiB)\b", line)
                       for line in seen.stdout.splitlines())  # fmt: skip


# -- exit codes -------------------------------------------------------------------------------


def test_replay_exits_1_when_a_resource_refused_and_0_when_none_did() -> None:
    refused = piped("replay", SAMPLE_LOG, "-r", "host:limit=200MiB", "--json")
    assert refused.returncode == 1 and json.loads(refused.stdout)["resources"][0]["failure_count"]
    stopped = piped("replay", SAMPLE_LOG, "-r", "host:limit=200MiB", "--on-failure", "stop")
    assert stopped.returncode == 1
    granted = piped("replay", SAMPLE_LOG, "-r", "host")
    assert granted.returncode == 0, granted.stderr


def test_a_missing_gpu_is_exit_1_in_size_and_replay(rocm: Path) -> None:
    env = {"HIP_VISIBLE_DEVICES": "-1", "CUDA_VISIBLE_DEVICES": "-1"}
    # (-r async: RMM's own pool replays on the virtual GPU with no GPU at all)
    for args in (["size", "dgetrf:m=8,n=8"], ["replay", SAMPLE_LOG, "-r", "async"]):
        seen = piped(*args, env=env)
        if seen.returncode == 0:
            pytest.skip("a GPU is visible here")
        assert seen.returncode == 1 and seen.stderr.count("\n") == 1, seen.stderr


# -- global flags anywhere --------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [["--version"], ["size", "--version"], ["log", "inspect", SAMPLE_LOG, "--version"]],
)
def test_version_anywhere(args: list[str]) -> None:
    seen = piped(*args)
    assert seen.returncode == 0 and re.fullmatch(r"hipmem \d+\.\d+\.\d+\S*\n", seen.stdout)


@pytest.mark.parametrize("args", [["-h"], ["size", "-h"], ["log", "inspect", "-h"],
                                  ["replay", SAMPLE_LOG, "-r", "host", "-h"]])  # fmt: skip
def test_short_help_anywhere(args: list[str]) -> None:
    seen = piped(*args)
    assert seen.returncode == 0 and seen.stdout.startswith("Usage: hipmem")


def test_no_command_prints_the_help_on_stderr_exit_2() -> None:
    seen = piped()
    assert seen.returncode == 2 and seen.stderr.startswith("Usage: hipmem") and seen.stdout == ""
    assert "Error:" not in seen.stderr


def test_debug_after_the_subcommand_shows_the_traceback(rocm: Path) -> None:
    seen = piped("size", "-d", "MI210", "dgetrf:m=8", "--debug")
    assert seen.returncode == 2
    assert "Traceback" in seen.stderr and "BadArgument" in seen.stderr
    assert seen.stderr.rstrip().endswith("missing argument n (no default for it)")


# -- help -------------------------------------------------------------------------------------

COMMANDS = [["size"], ["routines"], ["recommend"], ["check"], ["devices"], ["rocm", "fetch"],
            ["rocm", "where"], ["log", "inspect"], ["log", "convert"], ["replay"],
            ["torch", "fetch"], ["torch", "where"]]  # fmt: skip


def _help(command: list[str], columns: int = 80) -> str:
    seen = help_piped(tuple(command), columns)  # one run, shared with the tests that read it
    assert seen.returncode == 0, seen.stderr
    return seen.stdout


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_shows_flags_as_flags_and_ends_with_examples_and_exit_codes(
    command: list[str],
) -> None:
    text = _help(command)
    assert "<bool>" not in text and "<list[" not in text
    examples = " ".join(text[text.index("Examples:") :].split())  # the prose may wrap anywhere
    assert len(_examples(text)) >= 2
    assert "Exit codes: 0" in examples and "130 interrupted" in examples


def test_help_shows_choices_and_the_resource_specs_whole_at_60_columns() -> None:
    text = _help(["replay"], columns=60)
    assert "<logged|single>" in text and "<skip|stop>" in text
    assert "<auto|cuda|hip|host|virtual>" in text
    for spec in ("managed[:prefetch=1,advise=preferred_location]",
                 "pool[:initial=1GiB,maximum=8GiB,upstream=cuda]"):  # fmt: skip
        assert whole_on_a_line(spec, text)
    assert "…" not in text
    assert "<shell|dotenv|json|yaml|github>" in _help(["recommend"])


def _examples(help_text: str) -> list[str]:
    """The example commands, a line ending in `\\` joined to the next (as a shell does)."""
    block = help_text[help_text.index("Examples:") :].split("\n\n")[0]
    found: list[str] = []
    continued = False
    for line in (line.strip() for line in block.splitlines()[1:] if line.strip()):
        if continued:
            found[-1] = found[-1][:-1].rstrip() + " " + line
        else:
            found.append(line)
        continued = line.endswith("\\")
    return found


@pytest.mark.slow
@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_examples_run(rocm: Path, command: list[str], tmp_path: Path) -> None:
    """Every example is a real command: it runs (or, where it needs a GPU this machine lacks,
    fails saying so), never a usage error or an internal one."""
    for example in _examples(_help(command)):
        if "rocm fetch" in example:
            continue  # fetching is tested in test_rocm_fetch; here it would only re-check
        if "--wheel" in example:
            continue  # needs a downloaded wheel; test_virtual_gpu_cli fetches from one
        words = shlex.split(example)
        env = dict(os.environ)
        while "=" in words[0]:
            name, _, value = words.pop(0).partition("=")
            env[name] = value
        words = [str(HIPMEM), *words[1:]]
        # outputs (plots, converted logs) go to a temporary folder
        outputs = (".png", ".svg", ".html", ".csv", ".csv.gz")
        words = [str(tmp_path / Path(w).name) if w.endswith(outputs)
                 and not Path(REPO, w).exists() else w for w in words]  # fmt: skip
        done = subprocess.run(words, capture_output=True, text=True, cwd=REPO, env=env,
                              timeout=300)  # fmt: skip
        assert done.returncode in (0, 1), (example, done.stderr)
        assert "internal error" not in done.stderr, (example, done.stderr)
        if done.returncode == 1 and "hipmem replay" in example:  # no GPU here, or refusals
            assert "no GPU" in done.stderr or "Refused allocations" in done.stdout, example


# -- usage rules ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["log", "inspect", SAMPLE_LOG, "--per-stream"], "--per-stream adds lines to the plot"),
        (["replay", SAMPLE_LOG, "-r", "host", "--confirm-runs", "3"], "--confirm-runs counts"),
        (["recommend", "-d", "MI210", "dgetrf:m=8,n=8", "--headroom", "10"],
         "say 10% (a percentage) or 10B (bytes)"),
        (["replay", SAMPLE_LOG, "-r", "host", "--plot", "out.jpg"], "must end in .png or .svg"),
        (["log", "inspect", SAMPLE_LOG, "--plot", "out"], "must end in .png or .svg"),
    ],
)  # fmt: skip
def test_usage_errors_are_one_line_exit_2(args: list[str], message: str) -> None:
    seen = piped(*args)
    assert seen.returncode == 2 and seen.stderr.count("\n") == 1, seen.stderr
    assert message in seen.stderr and seen.stdout == ""


def test_recommend_json_is_format_json(rocm: Path) -> None:
    calls = ["-d", "MI210", "dgetrf:m=512,n=512", "--headroom", "10%"]
    as_flag = piped("recommend", *calls, "--json")
    as_format = piped("recommend", *calls, "--format", "json")
    assert as_flag.returncode == 0 and as_flag.stdout == as_format.stdout
    assert json.loads(as_flag.stdout)["rocblas_device_memory_size_bytes"] > 0


def test_the_plot_rule_and_wording_are_one(tmp_path: Path) -> None:
    for command in (["replay", SAMPLE_LOG, "-r", "host"], ["log", "inspect", SAMPLE_LOG]):
        target = tmp_path / f"{command[0]}.PNG"
        seen = piped(*command, "--plot", str(target))
        assert seen.returncode == 0, seen.stderr
        assert unwrapped(seen.stderr).endswith(f"plot written to {target}")
        assert target.stat().st_size


# -- nothing echoed raw -----------------------------------------------------------------------


def test_hostile_names_and_lines_are_shown_escaped(rocm: Path, tmp_path: Path) -> None:
    log = tmp_path / "emoji:100:[bold]x[red].log"
    sample = (REPO / "samples" / "rocblas-bench.log").read_text()
    log.write_text(sample + "\x1b[2J\x1b]0;pwned\x07 :thumbs_up: [red]oops\n")
    for seen in both("size", "-d", "MI210", "--from-log", str(log), columns=80):
        text = seen.stdout + seen.stderr
        assert "pwned" in seen.stderr and "\\x1b[2J\\x1b]0;pwned\\x07" in seen.stderr
        assert "\x1b]0" not in text and "\x1b[2J" not in seen.stderr
        assert f"{log}:" in seen.stderr and "💯" not in text and "👍" not in text
        assert ":thumbs_up: [red]oops" in seen.stderr


def test_a_log_name_with_mathtext_plots(tmp_path: Path) -> None:
    log = tmp_path / "m$\\frac{$x.csv"
    log.write_bytes(gzip.decompress((REPO / SAMPLE_LOG).read_bytes()))
    for command in (["replay", str(log), "-r", "host:limit=200MiB"], ["log", "inspect", str(log)]):
        seen = piped(*command, "--plot", str(tmp_path / "out.png"))
        assert seen.returncode in (0, 1) and "plot written to" in seen.stderr, seen.stderr


# -- Ctrl-C -----------------------------------------------------------------------------------


@pytest.mark.parametrize("wait_s", [0.15, 0.3, 0.5, 0.8, 1.2, 2.5])
def test_ctrl_c_is_one_line_and_exit_130(wait_s: float) -> None:
    """At start-up (imports) and mid-replay, three quick Ctrl-Cs: one line, exit 130.
    `wait_s` counts from when hipmem handles the signals (its entry point's first lines), not
    from the start of the process: before that, Python itself is starting, and how long that
    takes is the machine's load, not hipmem's (at load 20 a 0.15 s wait landed before it)."""
    process = subprocess.Popen(
        [str(HIPMEM), "replay", SAMPLE_LOG, "-r", "host", "--repeats", "2000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
    )  # fmt: skip
    _wait_until_hipmem_handles_signals(process)
    time.sleep(wait_s)
    for _ in range(3):
        process.send_signal(signal.SIGINT)
        time.sleep(0.02)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert stderr == "Error: interrupted\n" and stdout == ""


def test_sigterm_is_one_line_and_exit_143() -> None:
    """SIGTERM (kill, timeout, a job scheduler) as soon as hipmem handles it (from the first
    lines of its entry point, while it still imports), twice: as Ctrl-C, one line, exit 143
    (128 + 15). (Mid-work: tests/replay/fleet/test_fleet_process.py.)"""
    process = subprocess.Popen(
        [str(HIPMEM), "replay", SAMPLE_LOG, "-r", "host", "--repeats", "2000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
    )  # fmt: skip
    _wait_until_hipmem_handles_signals(process)
    for _ in range(2):
        process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 143, stderr
    assert stderr == "Error: terminated\n" and stdout == ""


def _wait_until_hipmem_handles_signals(process: subprocess.Popen[str]) -> None:
    """Until hipmem's entry point has its handlers: SIGTERM's is installed with SIGINT's, and
    only hipmem installs it (a bound of 60 s for a failure: it comes in a second)."""
    deadline = time.monotonic() + 60
    while not _catches(process.pid, signal.SIGTERM) and time.monotonic() < deadline:
        time.sleep(0.005)


def _catches(pid: int, signum: int) -> bool:
    """Whether the process has a handler for `signum` (its SigCgt mask, from /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


# A Ctrl-C that lands while a module's dataclass is made reaches hipmem as a RuntimeError
# (Python wraps what `__set_name__` raises): here it is made to land there every time.
_CTRL_C_IN_SET_NAME = """
import os, signal, sys
from hipmem.cli import main as cli

class Field:
    def __set_name__(self, owner, name):
        os.kill(os.getpid(), signal.SIGINT)  # the handler raises here

def run(argv):
    class Made:
        good = Field()
    return 0

cli._run = run
sys.argv = ["hipmem", "replay"]
cli.main()
"""


def test_ctrl_c_wrapped_on_its_way_is_still_one_line_and_exit_130() -> None:
    done = subprocess.run([str(Path(HIPMEM).with_name("python")), "-c", _CTRL_C_IN_SET_NAME],
                          capture_output=True, text=True, cwd=REPO, timeout=60)  # fmt: skip
    assert (done.returncode, done.stderr, done.stdout) == (130, "Error: interrupted\n", "")


def test_on_a_terminal_the_table_is_boxed_when_it_fits(rocm: Path) -> None:
    seen = on_terminal("size", "-d", "MI210", "dgetrf:m=1024,n=1024", columns=200)
    assert (
        seen.returncode == 0
        and "┏" in seen.stdout
        and "rocsolver_dgetrf:m=1024,n=1024" in (seen.stdout)
    )
    assert shutil.which(str(HIPMEM))


# -- floods and wording -----------------------------------------------------------------------


def test_failed_calls_are_summarised_and_the_footer_says_what_it_covers(rocm: Path) -> None:
    calls = [f"dgetrf:m=8,n=8,lda={lda}" for lda in range(1, 8)]  # lda < m: rejected by rocSOLVER
    seen = piped("size", "-d", "MI210", "dgetrf:m=8,n=8", *calls)
    assert seen.returncode == 1
    errors = seen.stderr.splitlines()
    assert len(errors) == 6 and errors[-1] == "Error: 2 more calls failed (--json lists every one)"
    said = " ".join(seen.stdout.split())  # prose wraps at 80 columns, piped too
    assert "session 0 B (0 bytes), incomplete: the most any one of the 1 answered" in said
    assert "calls needs (7 could not be sized: rocsolver_dgetrf:m=8,n=8,lda=1 (" in said
    assert "and 4 more (--json lists them))" in said


def test_many_skipped_lines_are_counted_in_plain_words(rocm: Path, tmp_path: Path) -> None:
    log = tmp_path / "noisy.log"
    sample = (REPO / "samples" / "rocblas-bench.log").read_text()
    log.write_text(sample + "".join(f"noise line {i}\n" for i in range(12)))
    seen = piped("size", "-d", "MI210", "--from-log", str(log))
    assert seen.returncode == 0, seen.stderr
    warnings = [line for line in seen.stderr.splitlines() if line.startswith("Warning:")]
    assert len(warnings) == 6 and "not a call: not a call" not in seen.stderr
    assert re.search(r"7 more skipped lines, the first at line \d+ \(--json lists them all\)$",
                     warnings[-1]), warnings[-1]  # fmt: skip
