"""`hipmem recommend` (what to set ROCBLAS_DEVICE_MEMORY_SIZE to) and `hipmem check` (the CI
gate: does a value cover the workload?). Both size the same call sources as `hipmem size`."""

from __future__ import annotations

import os
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..sizing import env_formats
from ..sizing.errors import UsageError
from ..sizing.recommend import (
    PYTORCH_VARIABLE,
    PYTORCH_WHY,
    BadSize,
    Recommendation,
    parse_alignment,
    parse_headroom,
    recommend,
)
from ..sizing.rocm.catalog import load_catalog
from ..sizing.rocm.locator import Libraries
from ..sizing.session import SessionResult, size_calls
from ..sizing.sweeps.range import parse_max_points
from ..sizing.workspace_check import VARIABLE, check, read_pytorch_config, read_setting
from . import allocator_recommend, hipblaslt_calls, output
from .call_sources import CallSources, accepted_skipped_lines, gather_calls
from .options import (
    MAX_POINTS_DEFAULT_TEXT,
    AcceptSkippedOption,
    CusOption,
    DeviceMemoryOption,
    DeviceOption,
    FromLogOption,
    FromSnapshotOption,
    HtmlOption,
    JsonOption,
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
from .rocm_choice import on_demand, one_release, release_line, several_cached_warning


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
docs/allocator-settings.md):
  hipmem recommend --from-snapshot run.pickle --device MI300X --format shell
  hipmem recommend -d MI300X --workload samples/workload.yaml \\
      --from-snapshot run.pickle

Exit codes: 0 recommended; 1 a call could not be sized, no allocator setting replays the
snapshots, a log line or snapshot entry could not be read (--accept-skipped answers from
the rest), or a file could not be written; 2 usage (a bare --headroom 10: say 10% or
10B); 130 interrupted.

Docs: docs/recommend.md
"""

CHECK_EPILOG = """\b
Examples:
  ROCBLAS_DEVICE_MEMORY_SIZE=8388608 hipmem check -d MI210 \\
      --workload samples/workload.yaml
  hipmem check -d MI210 --value 4194304 rocsolver_dgetrf:m=1024,n=1024

\b
PyTorch's allocator settings against memory snapshots
(docs/allocator-settings.md):
  hipmem check --from-snapshot run.pickle \\
      --alloc-conf expandable_segments:True --device-memory 80GiB

Exit codes: 0 the value covers the workload (and the snapshots replay with the allocator
settings); 1 it does not (the reason on stderr, with the first refused allocation), a
call could not be sized, or a log line or snapshot entry could not be read
(--accept-skipped answers from the rest); 2 usage; 130 interrupted.

Docs: docs/recommend.md
"""

CallsArgument = Annotated[
    Optional[list[str]],  # noqa: UP045 - typer reads annotations at runtime
    typer.Argument(
        help="ROUTINE[:ARG=VALUE,...], e.g. rocsolver_dgetrf:m=1024,n=1024",
        show_default=False,
        metavar="CALL",
    ),
]


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
    target: Annotated[
        allocator_recommend.Target,
        typer.Option(
            "--for",
            help="With --from-snapshot: the PyTorch build the settings are for: rocm "
            "(PYTORCH_HIP_ALLOC_CONF), cuda (PYTORCH_CUDA_ALLOC_CONF) or both (a ROCm build "
            "reads either).",
        ),
    ] = allocator_recommend.Target.both,
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
        raise UsageError(f"--json is --format json; it cannot go with --format {fmt.value}")
    chosen = "json" if json else (fmt.value if fmt is not None else None)
    _refuse_idle_accept(accept_skipped, from_log, from_snapshot)
    if chosen == "github":  # the files it appends to, before any work
        env_formats.check_github_files()
    allocator_request = allocator_recommend.Request.of(
        from_snapshot, target, device, device_memory, torch, capacity, plot, allow_cap, html,
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
    matmuls = hipblaslt_calls.gather(calls, from_log, workload, strict, accept_skipped)
    calls, from_log, workload = matmuls.calls, matmuls.from_log, matmuls.workload
    sources = CallSources(calls or [], from_log or [], workload or [], strict, accept_skipped)
    sources.sweeps, sources.max_points = sweep or [], parse_max_points(max_points)
    fetch = on_demand(offline, device, cus)
    libraries = one_release(rocm, rocm_dir, "recommend", fetch)
    # The allocator's variables join the workspace ones in one output (hipmem_cli combines the
    # two libraries; neither knows the other).
    extra = allocator_request.run(chosen) if allocator_request else allocator_recommend.Emitted()
    matmul_variables: list[tuple[str, str]] = []
    if matmuls.any:
        hipblaslt_calls.warn_cuda_variables()
        matmul_variables.append(
            hipblaslt_calls.recommend_variable(matmuls, libraries, device, cus, fetch)
        )
        if matmuls.only and not sources.sweeps:
            _emit(chosen, matmul_variables + extra.variables, details=extra.details,
                  comment=extra.comment)  # fmt: skip
            return
    result = _size(sources, device, cus, libraries, minimum=minimum)
    advice = recommend(
        result,
        headroom=headroom_value,
        align_bytes=align_bytes,
        handles=handles,
        minimum=minimum,
    )
    for warning in advice.warnings:
        output.warning(warning)
    skipped = _say_accepted(sources)
    variables = advice.variables(pytorch=pytorch) + matmul_variables + extra.variables
    comment = f"for {release_line(libraries, result.library.versions)}, {_device_text(result)}"
    if extra.comment:
        comment += f"; {extra.comment}"
    if chosen is None and output.stdout_is_terminal():
        _render_summary(advice, result, pytorch)
    details = advice.as_dict() | extra.details | skipped
    _emit(chosen, variables, details=details, comment=comment)


def _say_accepted(sources: CallSources) -> dict[str, object]:
    """The call-log lines an answer did without (--accept-skipped): said on stderr, and the
    JSON's `skipped_lines` (empty when none were)."""
    skipped = accepted_skipped_lines(sources)
    if skipped.count:
        output.skipped(skipped.describe(), "accepted: --accept-skipped")
    return {"skipped_lines": skipped.as_dict()} if sources.from_logs else {}


def _refuse_idle_accept(accept: bool, *files: list[Path] | None) -> None:
    """--accept-skipped with no file read leniently would change nothing: say so."""
    if accept and not any(files):
        raise UsageError("--accept-skipped is about lines and entries of files that cannot be "
                         "read: give --from-log or --from-snapshot, or drop it")  # fmt: skip


def _refuse_sizing_options(*given: tuple[str, object]) -> None:
    """Workspace options with no calls to size: say so rather than ignore them."""
    for flag, value in given:
        if value:
            raise UsageError(f"{flag} is about the workspace of calls, and none was given "
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


def check_command(
    calls: CallsArgument = None,
    from_log: FromLogOption = None,
    workload: WorkloadOption = None,
    strict: StrictOption = False,
    accept_skipped: AcceptSkippedOption = False,
    value: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "--value",
            help=f"The value to check, as the variable would hold it. Default: ${VARIABLE}.",
            show_default=False,
        ),
    ] = None,
    device: DeviceOption = None,
    cus: CusOption = None,
    rocm_dir: RocmDirOption = None,
    rocm: RocmOption = None,
    offline: OfflineOption = False,
    json: JsonOption = False,
    sweep: SweepOption = None,
    max_points: MaxPointsOption = MAX_POINTS_DEFAULT_TEXT,
    hipblas_config: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "--hipblas-config",
            help="Check PyTorch's HIPBLAS_WORKSPACE_CONFIG (:SIZE_KiB:COUNT) instead of "
            "ROCBLAS_DEVICE_MEMORY_SIZE for the rocBLAS/rocSOLVER calls.",
            show_default=False,
        ),
    ] = None,
    hipblaslt_value: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "--hipblaslt-value",
            help="HIPBLASLT_WORKSPACE_SIZE to check (KiB) for hipblaslt_matmul calls. Default: "
            "$CUBLASLT_WORKSPACE_SIZE, else $HIPBLASLT_WORKSPACE_SIZE, else PyTorch's default.",
            show_default=False,
        ),
    ] = None,
    minimum: MinimumOption = False,
    from_snapshot: FromSnapshotOption = None,
    alloc_conf: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "--alloc-conf",
            help="With --from-snapshot: PyTorch's allocator settings to check "
            "(expandable_segments:True). Default: $PYTORCH_CUDA_ALLOC_CONF, "
            "$PYTORCH_HIP_ALLOC_CONF or $PYTORCH_ALLOC_CONF, whichever is set (they must "
            "agree), else PyTorch's defaults.",
            show_default=False,
        ),
    ] = None,
    device_memory: DeviceMemoryOption = None,
    torch: TorchVersionOption = None,
    explain: Annotated[
        bool,
        typer.Option(
            "--explain",
            help="With --from-snapshot: when a snapshot is refused a request, explain it as "
            "`hipmem explain` does (docs/explain.md).",
        ),
    ] = False,
) -> None:
    """Exit 0 when ROCBLAS_DEVICE_MEMORY_SIZE covers the workload (and, with --from-snapshot,
    the snapshots replay with PyTorch's allocator settings), 1 (with the reason) if not."""
    _refuse_idle_accept(accept_skipped, from_log, from_snapshot)
    gate = allocator_recommend.CheckRequest.of(from_snapshot, alloc_conf, device,
                                               device_memory, torch, accept_skipped,
                                               strict)  # fmt: skip
    has_calls = bool(calls or from_log or workload or sweep)
    allocator_fits = True
    if explain and gate is None:
        raise UsageError("--explain is about PyTorch's allocator settings: give "
                               "--from-snapshot FILE too")  # fmt: skip
    if gate is not None:
        allocator_fits = gate.run(json and not has_calls)
        if explain and not allocator_fits and not json:
            allocator_recommend.explain_failure(gate)
        if not has_calls:
            if not allocator_fits:
                raise typer.Exit(1)
            return
    if hipblas_config is not None:
        setting = read_pytorch_config(hipblas_config, source="--hipblas-config")
    elif value is not None:
        setting = read_setting(value, source="--value")
    else:
        setting = read_setting(os.environ.get(VARIABLE), source=f"${VARIABLE}")
    matmuls = hipblaslt_calls.gather(calls, from_log, workload, strict, accept_skipped)
    calls, from_log, workload = matmuls.calls, matmuls.from_log, matmuls.workload
    sources = CallSources(calls or [], from_log or [], workload or [], strict, accept_skipped)
    sources.sweeps, sources.max_points = sweep or [], parse_max_points(max_points)
    fetch = on_demand(offline, device, cus)
    libraries = one_release(rocm, rocm_dir, "check", fetch)
    if matmuls.any:
        hipblaslt_calls.warn_cuda_variables()
        if not hipblaslt_calls.check_specs(matmuls, hipblaslt_value, libraries, device, cus, fetch):
            raise typer.Exit(1)
        if matmuls.only and not sources.sweeps:
            if not allocator_fits:
                raise typer.Exit(1)
            return
    result = _size(sources, device, cus, libraries, minimum=minimum)
    outcome = check(setting, result)
    skipped = _say_accepted(sources)
    if json:
        extra = {} if gate is None else {"allocator_settings": gate.result_dict}
        output.print_json(outcome.as_dict() | {"library": result.library.as_dict()} | extra
                          | skipped)  # fmt: skip
    else:
        for note in setting.notes:
            output.warning(note)
        for call in outcome.degraded:
            output.warning(f"runs degraded: {call}")
        # The verdict, then which release gave the sizes it rests on, on the same stream.
        sized_with = release_line(libraries, result.library.versions)
        release = f"sized with {sized_with}"
        if outcome.passed:
            output.ok(outcome.reason)
        else:
            output.fail(outcome.reason)
        for note in outcome.sweep_notes:
            output.note(f"sweep {note}", err=not outcome.passed)
        output.note(release, err=not outcome.passed)
    if not outcome.passed or not allocator_fits:
        raise typer.Exit(1)


def _size(
    sources: CallSources,
    device: str | None,
    cus: int | None,
    libraries: Libraries,
    *,
    minimum: bool = False,
) -> SessionResult:
    """Size the calls; a call that cannot be sized ends the command (exit 1)."""
    several = several_cached_warning(libraries)
    if several:
        output.warning(several)
    parsed = gather_calls(sources, load_catalog(libraries.rocm))
    with output.progress("sizing") as report:
        result = size_calls(
            parsed,
            device,
            compute_units=cus,
            progress=report,
            libraries=libraries,
            minimum=minimum,
        )
    output.summarised_errors([str(failed.error) for failed in result.failed])
    if result.failed:
        raise typer.Exit(1)
    return result


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


def _render_summary(advice: Recommendation, result: SessionResult, pytorch: bool) -> None:
    device = result.device
    versions = ", ".join(f"{name} {v}" for name, v in result.library.versions.items())
    kind = "virtual " if device.virtual else ""
    table = output.Table(
        f"{VARIABLE} for {kind}{device.name} ({device.arch.name}; "
        f"ROCm {result.library.rocm}: {versions})",
        ["what", "size", "bytes", "note"],
        right=("size", "bytes"),
        boxed=False,
        header=False,
    )
    needs_note = "the largest measured minimum" if advice.basis == "minimum" else ""
    table.add_row(
        output.Styled("workload needs", "bold"),
        *_sizes(advice.session_bytes),
        output.Styled(needs_note, "dim"),
    )
    table.add_row(output.Styled("+ headroom", "bold"), *_sizes(advice.headroom_bytes), "")
    aligned = f"rounded up to {output.human_bytes(advice.align_bytes)}"
    table.add_row(
        output.Styled("recommended", "bold"),
        *_sizes(advice.rocblas_device_memory_size_bytes),
        output.Styled(aligned, "dim"),
    )
    source = "asked of rocBLAS" if advice.default_source == "library" else "arch rule"
    table.add_row(
        output.Styled("default", "bold"),
        *_sizes(advice.default_bytes),
        output.Styled(f"without it ({source})", "dim"),
    )
    table.add_row(*_saving_row("per handle", advice.saved_bytes_per_handle))
    if advice.handles > 1:
        table.add_row(*_saving_row(f"× {advice.handles} handles", advice.saved_bytes_total))
    output.print_table(table)
    output.note(f"largest call: {advice.largest_call}")
    for swept in result.sweeps:
        output.note(f"sweep {swept.summary_line()}")
    if advice.default_bytes != advice.arch_rule_bytes:
        output.note(
            f"This rocBLAS allocates {output.human_bytes(advice.default_bytes)} by default "
            f"on {device.arch.name}; the documented rule says "
            f"{output.human_bytes(advice.arch_rule_bytes)}."
        )
    if advice.managed_grows:
        output.note(
            "Without the variable a handle would start at the default and reallocate "
            "mid-run when the largest call comes."
        )
    hint = "" if pytorch else " (--pytorch emits it)"
    output.line(f"PyTorch: {PYTORCH_VARIABLE}={advice.pytorch_workspace_config}{hint}")
    output.note(f"{PYTORCH_WHY}.")


def _sizes(n_bytes: int) -> tuple[str, str]:
    return output.human_bytes(n_bytes), f"{n_bytes:,}"


def _saving_row(label: str, saved_bytes: int) -> tuple[output.Cell, ...]:
    word = "saved" if saved_bytes >= 0 else "added"
    return (
        output.Styled(f"{word} {label}", "bold"),
        *_sizes(abs(saved_bytes)),
        output.Styled("compared with the default", "dim"),
    )


def register(app: typer.Typer) -> None:
    app.command("recommend", epilog=RECOMMEND_EPILOG)(recommend_command)
    app.command("check", epilog=CHECK_EPILOG)(check_command)
