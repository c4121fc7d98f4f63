"""`recommend --from-snapshot`: PyTorch's allocator settings beside the workspace variables.

The options are read and checked here before any work; the grid runs in
hipmem.replay.settings.recommend; what a terminal shows is hipmem_cli/allocator_output.py.
The variables join the workspace ones in one output (every `--format`), so one step emits
everything a deployment sets: the CLI combines the two libraries, which know nothing of each
other (sizing renders the formats, replay finds the settings).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from hipmem._core.skipped_input import SkippedInput

from ..replay.errors import ReplayUsageError
from . import output
from .html_output import captured, check_html_option, write_html
from .options import check_plot_option, memory_bytes

if TYPE_CHECKING:
    from ..replay.explain.variables import CheckedSettings
    from ..replay.settings.recommend import AllocatorRecommendation

# The replay library (pandas, numpy) is imported when a snapshot is replayed, not when
# `hipmem recommend` starts for calls alone.


class TorchBuild(str, Enum):
    """`--for`: the PyTorch build the settings are written for."""

    rocm = "rocm"
    cuda = "cuda"
    both = "both"


class Capacity(str, Enum):
    all = "all"
    recommended = "recommended"


@dataclass
class Emitted:
    """What the allocator part adds to the output: variables, JSON details, the `#` line."""

    variables: list[tuple[str, str]] = field(default_factory=list)
    details: dict[str, object] = field(default_factory=dict)
    comment: str | None = None


@dataclass(frozen=True)
class Request:
    """The allocator options of one `recommend`, checked."""

    snapshots: list[Path]
    torch_build: str
    device: str | None
    device_memory_bytes: int | None
    torch: str | None
    capacity: str
    plot: Path | None
    allow_cap: bool = False
    html: Path | None = None
    accept_skipped: bool = False
    strict: bool = False

    @staticmethod
    def of(
        snapshots: list[Path] | None,
        torch_build: TorchBuild,
        device: str | None,
        device_memory: str | None,
        torch: str | None,
        capacity: Capacity,
        plot: Path | None,
        allow_cap: bool = False,
        html: Path | None = None,
        accept_skipped: bool = False,
        strict: bool = False,
    ) -> Request | None:
        """The request, or None without --from-snapshot (whose own options are then refused:
        an option that changes nothing is a mistake worth saying)."""
        if not snapshots:
            given = [flag for flag, value in (
                ("--for", torch_build is not TorchBuild.both), ("--device-memory", device_memory),
                ("--torch", torch), ("--capacity", capacity is not Capacity.all),
                ("--plot", plot), ("--allow-cap", allow_cap), ("--html", html))
                if value]  # fmt: skip
            if given:
                raise ReplayUsageError(f"{given[0]} is about PyTorch's allocator settings: "
                                       "give --from-snapshot FILE too")  # fmt: skip
            return None
        check_plot_option(plot)
        check_html_option(html)
        memory = _device_memory(device_memory)
        request = Request(
            snapshots=list(snapshots),
            torch_build=torch_build.value,
            # --device names the virtual GPU unless --device-memory does: with calls as well,
            # --device is then the sizing device alone (an MI210 is not a virtual GPU preset).
            device=device if memory is None else None,
            device_memory_bytes=memory,
            torch=torch,
            capacity=capacity.value,
            plot=plot,
            allow_cap=allow_cap,
            html=html,
            accept_skipped=accept_skipped,
            strict=strict,
        )
        # An unknown preset is said before any work (sizing included).
        from ..replay.engine.options import ReplayOptions

        ReplayOptions(backend="virtual", device_name=request.device,
                      device_memory_bytes=memory).check()  # fmt: skip
        return request

    def run(self, chosen_format: str | None) -> Emitted:
        """Replay the grid, show it (on a terminal, without --format), and what to emit.
        No setting fits: the table, one error line, exit 1 (nothing is emitted)."""
        from ..replay.settings import recommend as allocator_settings
        from . import allocator_output

        with output.progress("allocator settings") as bar:
            advice = allocator_settings.recommend_allocator_settings(
                self.snapshots,
                device=self.device,
                device_memory_bytes=self.device_memory_bytes,
                torch_version=self.torch,
                capacity=self.capacity,
                allow_cap=self.allow_cap,
                accept_skipped=self.accept_skipped,
                strict=self.strict,
                progress=bar,
                rocm=self.torch_build in ("rocm", "both"),
            )
        say_accepted(advice.skipped)
        for note in advice.release_notes:
            output.warning(note)
        if advice.inferred is not None:
            output.info(advice.inferred.sentence(cap_option=False))
        for warning in advice.environment_warnings(self.torch_build):
            output.warning(warning)
        shown = chosen_format is None and output.stdout_is_terminal()
        # The page has the tables a terminal shows, whatever stdout is.
        kept = captured(echo=shown) if self.html else contextlib.nullcontext()
        with kept as printed:
            if shown or self.html:
                allocator_output.render_recommendation(advice)
        if self.html is not None and printed is not None:
            _write_page(self.html, advice, printed)
        if advice.recommended is None:
            if chosen_format == "json":
                output.print_json({"env": {}, "allocator_settings": advice.as_dict()})
            output.error(allocator_output.render_no_fit(advice))
            raise typer.Exit(1)
        if self.plot is not None:
            from ..replay.settings.plot import write_allocator_plot

            write_allocator_plot(self.plot, advice)
            output.written("plot", self.plot)
        return Emitted(advice.variables(self.torch_build), {"allocator_settings": advice.as_dict()},
                       _comment(advice))  # fmt: skip


def _write_page(path: Path, advice: AllocatorRecommendation, printed: output.Captured) -> None:
    """The driving snapshot's timeline under the defaults and the recommended setting (or,
    when none fits, its requested bytes alone), and the tables of the recommendation."""
    from ..replay.pictures.html_timeline import frames_left_out, replay_figure, replay_headline
    from ..replay.settings.plot import sampled_replays

    if advice.recommended is not None:
        workload, shown = sampled_replays(advice)
    else:
        workload, shown = advice.workloads[0], []
    program = workload.program
    title = f"hipmem recommend: {Path(workload.name).name} ({program.log_events:,} events)"
    chosen = advice.recommended
    headline = [
        "recommended: " + (chosen.settings or "PyTorch defaults") if chosen else "no setting fits",
        *replay_headline(workload.log, program, shown),
    ]
    with output.progress("writing the page") as bar:
        bar(0, None)
        figure = replay_figure(
            workload.log, program, shown, title=f"Reserved bytes, PyTorch {advice.torch_version}"
        )
    write_html(path, title, printed, figure=figure, headline=headline,
               notes=[frames_left_out(workload.log)])  # fmt: skip


def say_accepted(skipped: SkippedInput) -> None:
    """The snapshot entries an answer did without (--accept-skipped), on stderr."""
    if skipped.count:
        output.skipped(skipped.describe(), "accepted: --accept-skipped")


def _device_memory(text: str | None) -> int | None:
    return memory_bytes(text, "--device-memory")


def _comment(advice: AllocatorRecommendation) -> str:
    # The `#` line of shell/dotenv output; its characters are env_formats' comment grammar.
    return (
        f"allocator settings for PyTorch {advice.torch_version} on a virtual {advice.device.name}"
    )


@dataclass
class CheckRequest:
    """The allocator options of one `check`, checked."""

    snapshots: list[Path]
    chosen: CheckedSettings  # the setting string and where it came from (--alloc-conf, ...)
    device: str | None
    device_memory_bytes: int | None
    torch: str | None
    accept_skipped: bool = False
    strict: bool = False
    result_dict: dict[str, object] = field(default_factory=dict)
    refused_snapshot: Path | None = None  # the first snapshot refused a request

    @staticmethod
    def of(
        snapshots: list[Path] | None,
        alloc_conf: str | None,
        device: str | None,
        device_memory: str | None,
        torch: str | None,
        accept_skipped: bool = False,
        strict: bool = False,
    ) -> CheckRequest | None:
        if not snapshots:
            given = [flag for flag, value in (("--alloc-conf", alloc_conf),
                     ("--device-memory", device_memory), ("--torch", torch)) if value]  # fmt: skip
            if given:
                raise ReplayUsageError(f"{given[0]} is about PyTorch's allocator settings: "
                                       "give --from-snapshot FILE too")  # fmt: skip
            return None
        from ..replay.explain.variables import settings_to_check

        # Chosen before any work: variables that disagree are refused before calls are sized.
        chosen = settings_to_check(alloc_conf)
        memory = _device_memory(device_memory)
        return CheckRequest(list(snapshots), chosen, device, memory, torch, accept_skipped,
                            strict)  # fmt: skip

    def run(self, json_only: bool) -> bool:
        """Replay, say the verdict (or print the JSON), and whether every snapshot fits."""
        from ..replay.settings.check import check_allocator_settings
        from . import allocator_output

        with output.progress("checking snapshots"):
            found = check_allocator_settings(
                self.snapshots, self.chosen, device=self.device,
                device_memory_bytes=self.device_memory_bytes, torch_version=self.torch,
                accept_skipped=self.accept_skipped, strict=self.strict,
            )  # fmt: skip
        say_accepted(found.skipped)
        for note in found.release_notes:
            output.warning(note)
        if found.inferred is not None:
            output.info(found.inferred.sentence(cap_option=False))
        self.result_dict = found.as_dict()
        failed = found.first_failure
        self.refused_snapshot = None if failed is None else failed.path
        if json_only:
            output.print_json({"allocator_settings": self.result_dict})
        else:
            allocator_output.render_check(found)
        return found.fits


def explain_failure(gate: CheckRequest) -> None:
    """`check --explain`: the first refused snapshot, explained as `hipmem explain` does."""
    from ..replay.explain.explanation import explain
    from .explain_output import render_explanation, render_inferred

    refused = gate.refused_snapshot
    if refused is None:
        return
    memory = gate.device_memory_bytes
    with output.progress("explaining") as report:
        found = explain(refused, device=gate.device if memory is None else None,
                        device_memory_bytes=memory, torch_version=gate.torch,
                        settings=gate.chosen.settings, torch_build="rocm",
                        progress=report)  # fmt: skip
    render_inferred(found)
    render_explanation(found)
