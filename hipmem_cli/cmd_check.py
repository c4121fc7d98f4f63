"""`hipmem check`: the CI gate. Does a value of ROCBLAS_DEVICE_MEMORY_SIZE (or
HIPBLAS_WORKSPACE_CONFIG, HIPBLASLT_WORKSPACE_SIZE) cover the workload, and do PyTorch's
allocator settings replay its memory snapshots? It sizes the same call sources as
`hipmem size`."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from hipmem._core.errors import UsageError

from ..sizing.request import SizingRequest, size_request
from ..sizing.workspace_check import (
    VARIABLE,
    check,
    read_environment_setting,
    read_pytorch_config,
    read_setting,
)
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
    JsonOption,
    MaxPointsOption,
    MinimumOption,
    OfflineOption,
    RocmDirOption,
    RocmOption,
    StrictOption,
    SweepOption,
    TorchVersionOption,
    WorkloadOption,
)
from .rocm_choice import release_line
from .sized_calls import refuse_idle_accept, say_accepted

CHECK_EPILOG = """\b
Examples:
  ROCBLAS_DEVICE_MEMORY_SIZE=8388608 hipmem check -d MI210 \\
      --workload samples/workload.yaml
  hipmem check -d MI210 --value 4194304 rocsolver_dgetrf:m=1024,n=1024

\b
PyTorch's allocator settings against memory snapshots
(hipmem docs allocator-settings):
  hipmem check --from-snapshot run.pickle \\
      --alloc-conf expandable_segments:True --device-memory 80GiB

Exit codes: 0 the value covers the workload (and the snapshots replay with the allocator
settings); 1 it does not (the reason on stderr, with the first refused allocation), a
call could not be sized, or a log line or snapshot entry could not be read
(--accept-skipped answers from the rest); 2 usage; 130 interrupted.

Docs: hipmem docs recommend
"""


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
            "`hipmem explain` does (hipmem docs explain).",
        ),
    ] = False,
) -> None:
    """Exit 0 when ROCBLAS_DEVICE_MEMORY_SIZE covers the workload (and, with --from-snapshot,
    the snapshots replay with PyTorch's allocator settings), 1 (with the reason) if not."""
    refuse_idle_accept(accept_skipped, from_log, from_snapshot)
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
        setting = read_environment_setting()
    request = SizingRequest(
        calls=calls or [], from_logs=from_log or [], workloads=workload or [], strict=strict,
        accept_skipped=accept_skipped, sweeps=sweep or [], max_points=max_points,
        device=device, compute_units=cus, rocm=rocm, rocm_dir=rocm_dir, offline=offline,
        minimum=minimum, purpose="check", hipblaslt_value=hipblaslt_value,
    )  # fmt: skip
    answer = size_request(request, sized_calls.say())
    libraries, sources = answer.releases[0], answer.sources
    if answer.matmuls.any:
        (report,) = answer.matmul_reports
        if not hipblaslt_output.render_check(report, answer.cap_source or ""):
            raise typer.Exit(1)
        if not answer.sessions:
            if not allocator_fits:
                raise typer.Exit(1)
            return
    result = answer.sessions[0]
    sized_calls.end_if_failed(result)
    outcome = check(setting, result)
    skipped = say_accepted(sources)
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


def register(app: typer.Typer) -> None:
    app.command("check", epilog=CHECK_EPILOG)(check_command)
