"""`recommend --from-snapshot`: PyTorch's allocator settings beside the workspace variables.

The options are read and checked here before any work; the grid runs in
hipmem.replay.settings.recommend; what a terminal shows is hipmem_cli/allocator_output.py.
The variables join the workspace ones in one output (every `--format`), so one step emits
everything a deployment sets: the CLI combines the two libraries, which know nothing of each
other (sizing renders the formats, replay finds the settings).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
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
    from ..replay.settings.recommend import AllocatorRecommendation

# The replay library (pandas, numpy) is imported when a snapshot is replayed, not when
# `hipmem recommend` starts for calls alone.


class Target(str, Enum):
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
    target: str
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
        target: Target,
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
                ("--for", target is not Target.both), ("--device-memory", device_memory),
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
            target=target.value,
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
                rocm=self.target in ("rocm", "both"),
            )
        say_accepted(advice.skipped)
        for note in advice.release_notes:
            output.warning(note)
        if advice.inferred is not None:
            output.info(advice.inferred.sentence(cap_option=False))
        for warning in environment_warnings(self.target):
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
        return Emitted(advice.variables(self.target), {"allocator_settings": advice.as_dict()},
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


def environment_warnings(target: str, environ: Mapping[str, str] | None = None) -> list[str]:
    """A variable already set that a ROCm build would read instead of the one emitted
    (docs/allocator-settings.md, "Which variable PyTorch reads")."""
    environ = os.environ if environ is None else environ
    found = []
    if target == "rocm" and "PYTORCH_CUDA_ALLOC_CONF" in environ:
        found.append(
            "PYTORCH_CUDA_ALLOC_CONF is set: a ROCm build of PyTorch reads it before "
            "PYTORCH_HIP_ALLOC_CONF (even empty); unset it, or use --for both"
        )
    if "PYTORCH_ALLOC_CONF" in environ:
        found.append(
            "PYTORCH_ALLOC_CONF is set: PyTorch 2.11 reads it only when none of the variables "
            "below is set, and 2.9 never; the settings are not merged"
        )
    return found


# The variables a setting string is read from when no --alloc-conf is given, in the order a
# ROCm build of PyTorch 2.11 reads them; when more than one is set they must agree, since
# builds and versions read different ones (a CUDA build never reads the HIP one, 2.9 never
# reads PYTORCH_ALLOC_CONF).
CHECKED_VARIABLES = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF", "PYTORCH_ALLOC_CONF")


@dataclass
class CheckRequest:
    """The allocator options of one `check`, checked."""

    snapshots: list[Path]
    settings: str
    source: str  # where the settings came from, as the verdict names it
    device: str | None
    device_memory_bytes: int | None
    torch: str | None
    accept_skipped: bool = False
    strict: bool = False
    result_dict: dict[str, object] = field(default_factory=dict)
    failed_snapshots: list[Path] = field(default_factory=list)

    @staticmethod
    def of(
        snapshots: list[Path] | None,
        alloc_conf: str | None,
        device: str | None,
        device_memory: str | None,
        torch: str | None,
        accept_skipped: bool = False,
        strict: bool = False,
        environ: Mapping[str, str] | None = None,
    ) -> CheckRequest | None:
        if not snapshots:
            given = [flag for flag, value in (("--alloc-conf", alloc_conf),
                     ("--device-memory", device_memory), ("--torch", torch)) if value]  # fmt: skip
            if given:
                raise ReplayUsageError(f"{given[0]} is about PyTorch's allocator settings: "
                                       "give --from-snapshot FILE too")  # fmt: skip
            return None
        environ = os.environ if environ is None else environ
        settings, source = _settings_to_check(alloc_conf, environ)
        memory = _device_memory(device_memory)
        return CheckRequest(list(snapshots), settings, source, device, memory, torch,
                            accept_skipped, strict)  # fmt: skip

    def run(self, json_only: bool) -> bool:
        """Replay, say the verdict (or print the JSON), and whether every snapshot fits."""
        from ..replay.settings.check import check_allocator_settings
        from . import allocator_output

        with output.progress("checking snapshots"):
            found = check_allocator_settings(
                self.snapshots, self.settings, device=self.device,
                device_memory_bytes=self.device_memory_bytes, torch_version=self.torch,
                accept_skipped=self.accept_skipped, strict=self.strict,
            )  # fmt: skip
        say_accepted(found.skipped)
        for note in found.release_notes:
            output.warning(note)
        if found.inferred is not None:
            output.info(found.inferred.sentence(cap_option=False))
        self.result_dict = {"source": self.source, **found.as_dict()}
        refused = [v.snapshot for v in found.verdicts if not v.fits]
        self.failed_snapshots = [Path(name.rpartition("#dev")[0] or name) for name in refused]
        if json_only:
            output.print_json({"allocator_settings": self.result_dict})
        else:
            allocator_output.render_check(found, self.source)
        return found.fits


def explain_failure(gate: CheckRequest) -> None:
    """`check --explain`: the first refused snapshot, explained as `hipmem explain` does."""
    from ..replay.explain.explanation import explain
    from .explain_output import render_explanation, render_inferred

    refused = next((name for name in gate.failed_snapshots), None)
    if refused is None:
        return
    memory = gate.device_memory_bytes
    with output.progress("explaining") as report:
        found = explain(refused, device=gate.device if memory is None else None,
                        device_memory_bytes=memory, torch_version=gate.torch,
                        settings=gate.settings, torch_build="rocm", progress=report)  # fmt: skip
    render_inferred(found)
    render_explanation(found)


def _settings_to_check(alloc_conf: str | None, environ: Mapping[str, str]) -> tuple[str, str]:
    """(settings, where they came from): --alloc-conf, else the variables that are set."""
    from hipmem._core.alloc_conf import check_alloc_conf

    if alloc_conf is not None:
        return check_alloc_conf(alloc_conf, parameter="alloc_conf"), "--alloc-conf"
    found = {name: environ[name] for name in CHECKED_VARIABLES if name in environ}
    if len(set(found.values())) > 1:
        raise ReplayUsageError(
            f"{' and '.join(found)} are set to different settings, and PyTorch's builds and "
            "versions read different ones (`hipmem docs allocator-settings`): give --alloc-conf"
        )
    if not found:
        return "", "no PYTORCH_*_ALLOC_CONF set"
    name, value = next(iter(found.items()))
    return check_alloc_conf(value, parameter=name), f"${name}"
