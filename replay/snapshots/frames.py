"""The stack frames PyTorch records with a trace entry (`context` and `stacks` on), and the one
of them that names the user's program."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Frame:
    """One stack frame PyTorch recorded with a trace entry (`context` and `stacks` on)."""

    filename: str
    line: int
    name: str

    def __str__(self) -> str:
        return f"{self.filename}:{self.line} in {self.name}"


def user_frame(frames: list[Frame]) -> Frame | None:
    """The innermost frame outside PyTorch's own Python (`.../torch/...`): the line of the
    program that asked; the innermost frame when all are PyTorch's."""
    for frame in frames:
        if "/torch/" not in frame.filename.replace("\\", "/"):
            return frame
    return frames[0] if frames else None
