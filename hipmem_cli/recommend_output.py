"""What `hipmem recommend` shows on a terminal beside the variables it emits: the sizes the
recommendation rests on (the workload's need, headroom, alignment, the default it replaces,
what it saves) and the notes that explain them."""

from __future__ import annotations

from ..sizing.recommend import PYTORCH_VARIABLE, PYTORCH_WHY, Recommendation
from ..sizing.session import SessionResult
from ..sizing.workspace_check import VARIABLE
from . import output


def render_summary(advice: Recommendation, result: SessionResult, pytorch: bool) -> None:
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
