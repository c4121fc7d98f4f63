"""torch.compile's timed choice that changes memory, answered as the GPU answers it, in the
recorded process (sitecustomize starts it).

Inductor runs the script's kernels for real here (Triton compiles them; the launches do
nothing), but where it times candidates to choose, every candidate measures the same on the
virtual GPU. One such choice changes what is allocated: its pad_mm pass times a matrix product
with an unaligned dimension against the same product on zero-padded copies, and pads when
that is over 1.1 times faster (padded copies of a language model's output layer are hundreds
of MB). Both candidates still run here, as on the GPU, and only the verdict is replaced by
what an H200 answered (benchmarks/gpu_pad_mm.py: 57 products, each with its inputs' padding
timed or not, 228 verdicts; `padded_is_faster` answers all as the GPU did, and the three a
compiled Hugging Face GPT-2 asked): fp32 products never pad, nor fp16/bf16 ones whose rows in
memory are all aligned (an input's leading dimension and the output's columns: a product
unaligned only in its row count); another fp16/bf16 product pads from 1 GFLOP (measured from
2.1), and below that only when the copies it pads are not timed (Inductor leaves out a copy
that a fusion makes free; measured up to 0.3 GFLOP).

Inductor is patched only once its pad_mm module is imported: a script that never compiles
pays nothing. Only the standard library and torch: this runs in the user's interpreter.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from types import ModuleType
from typing import Any

PAD_MM = "torch._inductor.fx_passes.pad_mm"
ALIGNMENT = 8  # Inductor's alignment for fp16/bf16 (pad_mm.get_alignment_size_dtype)
ALWAYS_PADDED_FLOP = 1e9  # from here padding paid for its copies on the H200


def leading(matrix: Any) -> int:
    """A matrix's leading dimension in memory: its row stride, or its column stride when it is
    stored transposed (a backward pass's weight gradient reads one so)."""
    return int(max(matrix.stride()[-2:]))


def padded_is_faster(dtype_name: str, batch: int, rows: int, inner: int, columns: int,
                     leading_dimensions: tuple[int, int], copies_timed: bool) -> bool:  # fmt: skip
    """What the H200 answered for `batch` (rows x inner) @ (inner x columns) products whose
    inputs' leading dimensions are `leading_dimensions`; `copies_timed`: the padding of an
    input is part of the time (not left out by Inductor)."""
    if dtype_name not in ("torch.float16", "torch.bfloat16"):
        return False
    if all(size % ALIGNMENT == 0 for size in (*leading_dimensions, columns)):
        return False  # every row in memory is aligned (unaligned rows alone): never faster
    return 2 * batch * rows * inner * columns >= ALWAYS_PADDED_FLOP or not copies_timed


def _patch(pad_mm: ModuleType) -> None:
    should_pad, is_padded_faster = (
        getattr(pad_mm, "_should_pad", None),
        getattr(pad_mm, "is_padded_faster", None),
    )
    if not callable(should_pad) or not callable(is_padded_faster):
        return  # another release: its own timing stands (every candidate measures the same)
    asked = threading.local()

    def _should_pad(match: Any, mat1: Any, mat2: Any, *args: Any, **kwargs: Any) -> Any:
        sizes = (*mat1.shape, *mat1.stride(), *mat2.shape, *mat2.stride())
        if not all(type(size) is int for size in sizes):
            # symbolic sizes: int() would specialize them, and Inductor pads none of them
            return should_pad(match, mat1, mat2, *args, **kwargs)
        batch = 1
        for size in mat1.shape[:-2]:
            batch *= size
        rows, inner, columns = mat1.shape[-2], mat1.shape[-1], mat2.shape[-1]
        asked.shapes = (str(mat1.dtype), batch, rows, inner, columns,
                        (leading(mat1), leading(mat2)),
                        _copies_timed(pad_mm, match, rows, inner, columns))  # fmt: skip
        try:
            return should_pad(match, mat1, mat2, *args, **kwargs)
        finally:
            asked.shapes = None

    def _is_padded_faster(key: str, ori_time: float, pad_time: float) -> bool:
        shapes = getattr(asked, "shapes", None)
        if shapes is None:
            return bool(is_padded_faster(key, ori_time, pad_time))
        answer = padded_is_faster(*shapes)
        pad_mm.set_cached_should_pad(key, answer)  # as the original keeps its verdict
        return answer

    setattr(pad_mm, "_should_pad", _should_pad)  # noqa: B010  # a module of the user's torch
    setattr(pad_mm, "is_padded_faster", _is_padded_faster)  # noqa: B010


def _copies_timed(pad_mm: ModuleType, match: Any, rows: int, inner: int, columns: int) -> bool:
    """Whether Inductor times the padding of an input that needs it (pad_mm's
    should_exclude_padding_time says which it leaves out)."""

    def needs(*sizes: int) -> bool:
        return any(size % ALIGNMENT for size in sizes)

    try:
        return (needs(rows, inner) and not pad_mm.should_exclude_padding_time(match, "mat1")) or (
            needs(inner, columns) and not pad_mm.should_exclude_padding_time(match, "mat2")
        )
    except (AttributeError, KeyError, TypeError):  # another release's match: timed, to be safe
        return True


class _AfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds pad_mm as the other finders do, and patches it once it has run."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != PAD_MM:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None:
            return None
        self.loader = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        _patch(module)


def start() -> None:
    if PAD_MM in sys.modules:
        _patch(sys.modules[PAD_MM])
    else:
        sys.meta_path.insert(0, _AfterImport())
