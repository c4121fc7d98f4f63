"""cuDNN where the stand-in answers it, in the recorded process (sitecustomize starts it).

On the GPU PyTorch runs convolutions on cuDNN, and the stand-in cuDNN answers their workspaces
from the GPU's measured table (csrc/libraries/cudnn_convolution.c), and attention plans as the
GPU does. cuDNN's other paths (batch norm, RNNs, CTC loss, grid sampling) ask cuDNN sizes the
stand-in cannot answer, so cuDNN is turned off around those calls and PyTorch runs its own
kernels there; their backward passes follow the forward's choice. cuDNN stays on everywhere
else, as on the GPU, so that torch.compile traces with it on and its compiled code (which calls
the convolutions itself, past any mode) runs them on cuDNN, in the layout its graph expects;
its graphs hold no cuDNN batch norm (Inductor decomposes it).

Only the standard library and torch: this runs in the user's interpreter.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

# The calls that would pick a cuDNN path whose sizes the stand-in cannot answer: both the
# functional ones and the torch functions they call, since a mode does not see the calls made
# inside a call it passed on (nn.LSTM/GRU/RNN call torch.lstm, torch.gru, ... themselves).
_OFF = {
    F.batch_norm, F.instance_norm, F.ctc_loss, F.grid_sample, F.affine_grid,
    torch.batch_norm, torch.instance_norm, torch.lstm, torch.gru, torch.rnn_tanh,
    torch.rnn_relu, torch.ctc_loss, torch.grid_sampler, torch.affine_grid_generator,
}  # fmt: skip


class CudnnOffWhereUnanswered(TorchFunctionMode):
    """Turns cuDNN off for the calls above, and back on after."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if (
            func not in _OFF
            or torch.compiler.is_compiling()  # torch.compile tracing: as on the GPU
            or not torch._C._get_cudnn_enabled()
        ):
            return func(*args, **kwargs)
        torch._C._set_cudnn_enabled(False)
        try:
            return func(*args, **kwargs)
        finally:
            torch._C._set_cudnn_enabled(True)


def start() -> CudnnOffWhereUnanswered:
    """Enters the mode for the rest of the process (it is never left: the script runs in it)."""
    mode = CudnnOffWhereUnanswered()
    mode.__enter__()
    return mode
