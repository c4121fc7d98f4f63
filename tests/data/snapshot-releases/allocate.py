"""A few allocations, recorded with each PyTorch release (`hipmem record --torch V`): the
snapshots beside this file show which fields each release writes (release_range.py)."""

import torch

x = torch.randn(1024, 1024, device="cuda")
y = x @ x
del x
z = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")
