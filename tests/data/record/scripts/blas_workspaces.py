"""One GEMM through cuBLAS and one through cuBLASLt: what each allocates as its workspace
(tests/replay/record/test_record.py: a ROCm build's sizes on an AMD device)."""

import torch
import torch.nn.functional as F

x = torch.randn(256, 512, device="cuda")
w = torch.randn(1024, 512, device="cuda")
b = torch.randn(1024, device="cuda")
y = x @ w.t()  # cuBLAS (rocBLAS on ROCm)
z = F.linear(x, w, b)  # addmm with a bias: cuBLASLt in CUDA builds (hipBLASLt on ROCm)
torch.cuda.synchronize()
