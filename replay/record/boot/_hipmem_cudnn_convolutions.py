"""cuDNN for convolutions only, in the recorded process (sitecustomize starts it).

On the GPU PyTorch runs convolutions on cuDNN, and the stand-in cuDNN answers their workspaces
from the GPU's measured table (csrc/libraries/cudnn_convolution.c). cuDNN's other paths (batch
norm, RNNs, CTC loss, grid sampling) ask cuDNN sizes the stand-in cannot answer, so cuDNN stays
off in the process (sitecustomize) and is turned on around each convolution and each backward
pass, where PyTorch picks a convolution's backward: a backward of batch norm or an RNN follows
its forward's choice, which was made with cuDNN off.

Only the standard library and torch: this runs in the user's interpreter.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode

_CONVOLUTIONS = {
    torch.conv1d, torch.conv2d, torch.conv3d, torch.conv_transpose1d, torch.conv_transpose2d,
    torch.conv_transpose3d, torch.convolution,
    # the backward passes: a convolution's backward picks cuDNN when it runs
    torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad,
}  # fmt: skip


class CudnnConvolutions(TorchFunctionMode):
    """Turns cuDNN on for the calls above, as the GPU runs them, and back off after."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if (
            func not in _CONVOLUTIONS
            or torch.compiler.is_compiling()  # torch.compile tracing: its graph holds the calls
            or torch._C._get_cudnn_enabled()
        ):
            return func(*args, **kwargs)
        torch._C._set_cudnn_enabled(True)
        try:
            return func(*args, **kwargs)
        finally:
            torch._C._set_cudnn_enabled(False)


def start() -> CudnnConvolutions:
    """Enters the mode for the rest of the process (it is never left: the script runs in it)."""
    mode = CudnnConvolutions()
    mode.__enter__()
    return mode
