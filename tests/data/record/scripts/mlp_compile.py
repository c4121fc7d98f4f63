"""An MLP under torch.compile (default mode): fp32, AdamW, batch 64, 3 steps (Triton compiles its
kernels; its first call times candidates, flushing the L2 with a buffer of the L2's size)."""

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)
).cuda()
compiled = torch.compile(model)
optimizer = torch.optim.AdamW(model.parameters())
for _ in range(3):
    x = torch.randn(64, 512, device="cuda")
    loss = compiled(x).square().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
print(f"reserved {torch.cuda.max_memory_reserved()} allocated {torch.cuda.max_memory_allocated()}")
