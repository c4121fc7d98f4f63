"""`hipmem recommend`: what to set ROCBLAS_DEVICE_MEMORY_SIZE (and PyTorch's equivalents) to
for a workload, and PyTorch's allocator settings for its memory snapshots. It sizes the same
call sources as `hipmem size`; `hipmem check` (cmd_check.py) is its gate."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Optional

import typer

from ..sizing import env_formats
from ..sizing.errors import SizingUsageError
from ..sizing.recommend import (
    PYTORCH_VARIABLE,
    BadSize,
    parse_alignment,
    parse_headroom,
    recommend,
)
from ..sizing.request import SizingRequest, size_request
from ..sizing.session import SessionResult
from . import allocator_recommend, hipblaslt_output, output, sized_calls
from .options import (
    MAX_POINTS_DEFAULT_TEXT,
    AcceptSkippedOption,
    CallsArgument,
    CusOption,
    DeviceMemoryOption,
    DeviceOption,
    FromLogOption,
    FromSnapshotOption,
    HtmlOption,
    MaxPointsOption,
    MinimumOption,
    OfflineOption,
    PlotOption,
    RocmDirOption,
    RocmOption,
    StrictOption,
    SweepOption,
    TorchVersionOption,
    WorkloadOption,
)
from .recommend_output import render_summary
from .rocm_choice import release_line
from .sized_calls import refuse_idle_accept, say_accepted


class Format(str, Enum):
    """The output formats of sizing/env_formats.py (a test keeps the two lists equal)."""

    shell = "shell"
    dotenv = "dotenv"
    json = "json"
    yaml = "yaml"
    github = "github"


RECOMMEND_EPILOG = """\b
Examples:
  hipmem recommend -d MI210 rocsolver_dgetrf:m=4096,n=4096 --headroom 10%
  hipmem recommend -d MI300X --workload samples/workload.yaml --format github
  hipmem recommend -d gfx90a --from-log samples/rocblas-bench.log --json

\b
With --from-snapshot, PyTorch's allocator settings (PYTORCH_HIP_ALLOC_CONF
and PYTORCH_CUDA_ALLOC_CONF) from replays of the snapshots on a virtual GPU
(no GPU needed; `hipmem torch fetch` gets the allocator once;
hipmem docs allocator-settings):
  hipmem recommend --from-snapshot run.pickle --device MI300X --format shell
  hipmem recommend -d MI300X --workload samples/workload.yaml \\
      --from-snapshot run.pickle

Exit codes: 0 recommended; 1 a call could not be sized, no allocator setting replays the
snapshots, a log line or snapshot entry could not be read (--accept-skipped answers from
the rest), or a file could not be written; 2 usage (a bare --headroom 10: say 10% or
10B); 130 interrupted.

Docs: hipmem docs recommend
"""


def recommend_command(
    calls: CallsArgument = None,
    from_log: FromLogOption = None,
    workload: WorkloadOption = None,
    strict: StrictOption = False,
    accept_skipped: AcceptSkippedOption = False,
    headroom: Annotated[
        str,
        typer.Option(
            "--headroom",
            help="Extra room: a percentage (10%) or a size (64MiB, 1000B).",
            metavar="AMOUNT",
        ),
    ] = "0%",
    align: Annotated[
        str,
        typer.Option(
            "--align", help="Round up to a multiple of this (2MiB, 4096).", metavar="SIZE"
        ),
    ] = "1",
    handles: Annotated[
        int, typer.Option("--handles", help="How many handles the process creates.", metavar="N")
    ] = 1,
    fmt: Annotated[
        Optional[Format],  # noqa: UP045
        typer.Option(
            "--format",
            help="shell, dotenv, json, yaml (Kubernetes env list) or github "
            "(appends to $GITHUB_ENV/$GITHUB_OUTPUT). Default: a summary and the shell line.",
            show_default=False,
        ),
    ] = None,
    json: Annotated[bool, typer.Option("--json", help="The same as --format json.")] = False,
    pytorch: Annotated[
        bool, typer.Option("--pytorch", help=f"Also emit {PYTORCH_VARIABLE} for PyTorch.")
    ] = False,
    device: DeviceOption = None,
    cus: CusOption = None,
    rocm_dir: RocmDirOption = None,
    rocm: RocmOption = None,
    offline: OfflineOption = False,
    sweep: SweepOption = None,
    max_points: MaxPointsOption = MAX_POINTS_DEFAULT_TEXT,
    minimum: MinimumOption = False,
    from_snapshot: FromSnapshotOption = None,
    torch_build: Annotated[
        allocator_recommend.TorchBuild,
        typer.Option(
            "--for",
            help="With --from-snapshot: the PyTorch build the settings are for: rocm "
            "(PYTORCH_HIP_ALLOC_CONF), cuda (PYTORCH_CUDA_ALLOC_CONF) or both (a ROCm build "
            "reads either).",
        ),
    ] = allocator_recommend.TorchBuild.both,
    device_memory: DeviceMemoryOption = None,
    torch: TorchVersionOption = None,
    capacity: Annotated[
        allocator_recommend.Capacity,
        typer.Option(
            "--capacity",
            help="With --from-snapshot: search the smallest device for every setting (all) "
            "or for the recommended one and the defaults only (recommended, faster).",
        ),
    ] = allocator_recommend.Capacity.all,
    allow_cap: Annotated[
        bool,
        typer.Option(
            "--allow-cap",
            help="With --from-snapshot: settings that cap the process (garbage collection "
            "under a memory fraction) may be recommended too; a run needing more than the "
            "cap is then refused.",
        ),
    ] = False,
    plot: PlotOption = None,
    html: HtmlOption = None,
) -> None:
    """Recommend ROCBLAS_DEVICE_MEMORY_SIZE (and PyTorch's equivalent) for a workload, and
    PyTorch's allocator settings for its memory snapshots."""
    # Every option is checked before any library is loaded.
    headroom_value = parse_headroom(headroom)
    align_bytes = parse_alignment(align)
    if handles < 1:
        raise BadSize("must be at least 1", parameter="handles", value=handles)
    if json and fmt not in (None, Format.json):
        raise SizingUsageError(f"--json is --format json; it cannot go with --format {fmt.value}")
    chosen = "json" if json else (fmt.value if fmt is not None else None)
    refuse_idle_accept(accept_skipped, from_log, from_snapshot)
    if chosen == "github":  # the files it appends to, before any work
        env_formats.check_github_files()
    allocator_request = allocator_recommend.Request.of(
        from_snapshot, torch_build, device, device_memory, torch, capacity, plot, allow_cap, html,
        accept_skipped, strict,
    )  # fmt: skip
    if allocator_request is not None and not (calls or from_log or workload or sweep):
        _refuse_sizing_options(
            ("--headroom", headroom != "0%"), ("--align", align != "1"),
            ("--handles", handles != 1), ("--pytorch", pytorch), ("--cus", cus),
            ("--rocm", rocm), ("--rocm-dir", rocm_dir), ("--minimum", minimum),
        )  # fmt: skip
        emitted = allocator_request.run(chosen)
        _emit(chosen, emitted.variables, details=emitted.details, comment=emitted.comment)
        return
    request = SizingRequest(
        calls=calls or [], from_logs=from_log or [], workloads=workload or [], strict=strict,
        accept_skipped=accept_skipped, sweeps=sweep or [], max_points=max_points,
        device=device, compute_units=cus, rocm=rocm, rocm_dir=rocm_dir, offline=offline,
        minimum=minimum, purpose="recommend",
    )  # fmt: skip
    # The allocator's variables join the workspace ones in one output (hipmem_cli combines the
    # two libraries; neither knows the other): its snapshots are replayed once the device and
    # release are chosen, before the calls are sized.
    extra = allocator_recommend.Emitted()

    def replay_snapshots() -> None:
        nonlocal extra
        if allocator_request is not None:
            extra = allocator_request.run(chosen)

    answer = size_request(request, sized_calls.say(), ready=replay_snapshots)
    libraries, sources = answer.releases[0], answer.sources
    matmul_variables: list[tuple[str, str]] = []
    if answer.matmuls.any:
        if hipblaslt_output.report_failures(answer.matmul_reports):
            raise typer.Exit(1)
        matmul_variables.append(hipblaslt_output.recommended_variable(answer.matmul_reports[0]))
    if answer.matmuls.any and not answer.sessions:
        _emit(chosen, matmul_variables + extra.variables, details=extra.details,
              comment=extra.comment)  # fmt: skip
        return
    result = answer.sessions[0]
    sized_calls.end_if_failed(result)
    advice = recommend(
        result,
        headroom=headroom_value,
        align_bytes=align_bytes,
        handles=handles,
        minimum=minimum,
    )
    for warning in advice.warnings:
        output.warning(warning)
    skipped = say_accepted(sources)
    variables = advice.variables(pytorch=pytorch) + matmul_variables + extra.variables
    comment = f"for {release_line(libraries, result.library.versions)}, {_device_text(result)}"
    if extra.comment:
        comment += f"; {extra.comment}"
    if chosen is None and output.stdout_is_terminal():
        render_summary(advice, result, pytorch)
    details = advice.as_dict() | extra.details | skipped
    _emit(chosen, variables, details=details, comment=comment)


def _refuse_sizing_options(*given: tuple[str, object]) -> None:
    """Workspace options with no calls to size: say so rather than ignore them."""
    for flag, value in given:
        if value:
            raise SizingUsageError(f"{flag} is about the workspace of calls, and none was given "
                                   "(CALL, --from-log or --workload); drop it")  # fmt: skip


def _emit(
    chosen: str | None,
    variables: list[tuple[str, str]],
    *,
    details: dict[str, object],
    comment: str | None,
) -> None:
    """The variables in the chosen format (shell when none): every format carries them all."""
    if chosen == "github":
        _emit_github(variables)
        return
    output.write_exact(
        env_formats.render(chosen or "shell", variables, details=details, comment=comment)
    )


def _device_text(result: SessionResult) -> str:
    device = result.device
    return f"{'virtual ' if device.virtual else ''}{device.name} ({device.arch.name})"


def _emit_github(variables: list[tuple[str, str]]) -> None:
    written = env_formats.write_github(variables)
    if not written:  # not inside GitHub Actions: show what would be appended
        output.write_exact(env_formats.render("github", variables))
        return
    names = ", ".join(name for name, _ in variables)
    for path in written:
        output.info(f"appended {names} to {path}")


def register(app: typer.Typer) -> None:
    app.command("recommend", epilog=RECOMMEND_EPILOG)(recommend_command)
